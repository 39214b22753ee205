//! Plugins as the EventCorrelator's key functions: [`WasmAggregateKeyFunc`],
//! [`WasmMessageFunc`] and [`WasmSpamKeyFunc`] implement the correlator's traits by calling the
//! plugin's batch export once per batch.
//!
//! A failed batch call is bisected (`call::bisect`): the plugin is called on each half,
//! down to single events, so only the events that fail alone get the plugin's
//! [`FallbackPolicy`] (the built-in client-go function, or dropped), each reported with the event
//! it failed on. When [`MAX_ISOLATED_FAILURES`] single events failed and no call of the batch
//! succeeded, the failure is taken as systematic and the rest of the batch falls back without
//! calling the plugin again.
//!
//! These plugins are pure by contract, so each instance memoizes their answers: a batch is
//! first looked up in the memo, and only the inputs it has no answer for go to the plugin, in
//! one call, each distinct input once; the values come back in event order. A plugin configured
//! with `pure = false` ([`PluginSettings::pure`]) is called on every event.

use std::sync::atomic::Ordering;
use std::time::Instant;

pub use super::call::MAX_ISOLATED_FAILURES;
use super::call::{CallFailure, bisect};
use super::convert::{describe, key_field, unpack};
use super::memo::{Answer, Memo};
use super::projection::{KeyProjection, ProjectedKeys};
use super::shadow::ShadowCalls;
use std::sync::Arc;

use super::registry::{LookupError, PluginRegistry};
use super::{FallbackPolicy, PluginCallError, PluginHandle, PluginKind, PluginSettings};
use super::{WrongKind, check_kind};
use crate::correlator::CorrelatorOptions;
use crate::correlator::keys::{
    AggregateKey, ByReason, EventAggregatorKeyFunc, EventAggregatorMessageFunc, EventSpamKeyFunc, Key, SimilarEvents,
    SourceObject,
};
use crate::event::Event;

pub use crate::tenant::DEFAULT_TENANT;

/// The default plugins, one per key slot: client-go's functions as embedded Wasm components
/// (`EventAggregatorByReasonFunc`).
pub const DEFAULT_AGGREGATE_KEY_PLUGIN: &str = "by-reason";
/// The default message combiner: client-go's `EventAggregatorByReasonMessageFunc`.
pub const DEFAULT_MESSAGE_COMBINER_PLUGIN: &str = "similar-events";
/// The default spam key: client-go v0.26's `getSpamKey`.
pub const DEFAULT_SPAM_KEY_PLUGIN: &str = "source-object";

/// Decodes one event's strings of a batch answer into its value, given what the version that
/// answered declared.
trait Decode<T>: Fn(&[&[u8]], &Event, KeyProjection) -> Result<T, String> {}
impl<T, F: Fn(&[&[u8]], &Event, KeyProjection) -> Result<T, String>> Decode<T> for F {}

/// A key-fields batch export returning `per_event` strings per event, decoded into a `T` per
/// event, with its memo (`None` for a plugin that is not pure).
struct BatchKeyFn<T> {
    caller: ProjectedKeys,
    per_event: usize,
    memo: Option<Memo<T>>,
    /// A candidate version compared on every batch ([`super::shadow`]), when one is set.
    shadow: Option<ShadowCalls<ProjectedKeys>>,
}

impl<T: Clone> BatchKeyFn<T> {
    fn new(handle: PluginHandle, expected: PluginKind, per_event: usize) -> Result<Self, WrongKind> {
        check_kind(&handle, expected)?;
        let settings = handle.settings();
        let memo = settings.pure.then(|| Memo::new(settings.memo_max_entries));
        let shadow = ShadowCalls::for_keys(&handle);
        Ok(Self { caller: ProjectedKeys::new(handle), per_event, memo, shadow })
    }

    /// One call on `events`, its answer checked and decoded, with the version that answered.
    fn try_batch(&self, events: &[&Event], decode: &impl Decode<T>) -> Result<Vec<Answer<T>>, CallFailure> {
        let (answer, _cost, version, projection) = self.caller.call(events)?;
        let packed = answer.map_err(CallFailure::GuestError)?;
        let strings = unpack(&packed, events.len() * self.per_event).map_err(CallFailure::Garbage)?;
        strings
            .chunks(self.per_event)
            .zip(events)
            .map(|(s, e)| {
                decode(s, e, projection).map(|value| Answer::Plugin { value, version }).map_err(CallFailure::Garbage)
            })
            .collect()
    }

    /// Values for every event of `events`, in order, into `out`: from the memo where it has
    /// them, the rest from the plugin; failures fall back.
    fn run(&self, events: &[&Event], out: &mut Vec<Option<T>>, decode: impl Decode<T>, builtin: impl Fn(&Event) -> T) {
        if let Some(shadow) = &self.shadow {
            shadow.compare(events, self.per_event);
        }
        // No memo (not pure), or one standing aside after a low hit rate: every event to the
        // plugin. So too when the version's key fields are unknown (an unloaded plugin goes
        // straight to the built-in; a failed declaration fails its calls, which fall back).
        let memo = self.memo.as_ref().filter(|memo| !memo.stands_aside());
        let Some((memo, (version, fields))) = memo.and_then(|memo| Some((memo, self.caller.fields().ok()?))) else {
            let started = Instant::now();
            let answers = self.answers(events, &decode, &builtin);
            if let Some(memo) = &self.memo {
                memo.called(events.len(), started.elapsed());
            }
            return out.extend(answers.into_iter().map(Answer::into_value));
        };
        let started = Instant::now();
        let lookup = memo.lookup(version, fields.fields, events);
        memo.observe(events.len(), lookup.hits(), started.elapsed());
        let stats = self.caller.handle().stats();
        stats.memo_hits.fetch_add(lookup.hits() as u64, Ordering::Relaxed);
        stats.memo_misses.fetch_add(lookup.misses().len() as u64, Ordering::Relaxed);
        let answers = match lookup.misses() {
            [] => Vec::new(),
            misses => {
                let started = Instant::now();
                let answers = self.answers(misses, &decode, &builtin);
                memo.called(misses.len(), started.elapsed());
                answers
            }
        };
        memo.remember(&lookup, &answers);
        lookup.finish(answers, out, |value| self.count_policy(value));
    }

    /// The plugin's answers for `events`, in order, with the fallback policy's values where it
    /// failed.
    fn answers(&self, events: &[&Event], decode: &impl Decode<T>, builtin: &impl Fn(&Event) -> T) -> Vec<Answer<T>> {
        let failure = match self.try_batch(events, decode) {
            Ok(answers) => return answers,
            // Removed with no embedded default: the built-in function is the default.
            Err(CallFailure::Unloaded) if !self.caller.handle().slot().is_withdrawn() => {
                return events.iter().map(|e| Answer::Builtin(builtin(e))).collect();
            }
            // Quarantined, or pinned and removed: the fallback policy, without calling it (nor
            // counting failures).
            Err(CallFailure::Quarantined | CallFailure::Unloaded) => {
                return events.iter().map(|e| Answer::Policy(self.apply_policy(e, builtin))).collect();
            }
            Err(failure) if events.len() == 1 => {
                return vec![Answer::Policy(self.fall_back(events[0], failure, builtin))];
            }
            Err(failure) => failure,
        };
        tracing::debug!(plugin = self.caller.handle().name(), events = events.len(), %failure, "batch call failed; bisecting it");
        let first_failure = failure.clone();
        let mut systematic = 0;
        let answers = bisect(
            events,
            failure,
            &mut |part| self.try_batch(part, decode),
            &mut |e, failure| Answer::Policy(self.fall_back(e, failure, builtin)),
            &mut |e| {
                systematic += 1;
                Answer::Policy(self.apply_policy(e, builtin))
            },
        );
        if systematic > 0 {
            tracing::warn!(
                plugin = self.caller.handle().name(),
                events = systematic,
                "plugin keeps failing; the rest of the batch falls back without calling it"
            );
            self.caller.keeps_failing(&first_failure);
        }
        answers
    }

    /// Reports `failure` on `event` and applies the fallback policy.
    fn fall_back(&self, event: &Event, failure: CallFailure, builtin: &impl Fn(&Event) -> T) -> Option<T> {
        let error = self.caller.error(describe(event), failure);
        log_failure(&error, self.caller.handle().settings().fallback);
        self.apply_policy(event, builtin)
    }

    fn apply_policy(&self, event: &Event, builtin: &impl Fn(&Event) -> T) -> Option<T> {
        let value = match self.caller.handle().settings().fallback {
            FallbackPolicy::Builtin => Some(builtin(event)),
            FallbackPolicy::Drop | FallbackPolicy::Fail => None,
        };
        self.count_policy(&value);
        value
    }

    /// Counts one event given `value` by the fallback policy: a fallback, or a drop (`None`).
    fn count_policy(&self, value: &Option<T>) {
        let stats = self.caller.handle().stats();
        let counter = if value.is_some() { &stats.fallbacks } else { &stats.drops };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) fn log_failure(error: &PluginCallError, policy: FallbackPolicy) {
    let label = error.failure.label();
    match policy {
        FallbackPolicy::Builtin => {
            tracing::warn!(plugin = %error.plugin, tenant = %error.tenant, failure = label, %error, "using the built-in function")
        }
        FallbackPolicy::Drop => {
            tracing::warn!(plugin = %error.plugin, tenant = %error.tenant, failure = label, %error, "dropping the event")
        }
        FallbackPolicy::Fail => {
            tracing::error!(plugin = %error.plugin, tenant = %error.tenant, failure = label, %error, "dropping the event")
        }
    }
}

/// Whether an event has anything a key could be made of; a plugin's empty key for such an
/// event is garbage (it would lump unrelated events together).
fn has_identity(e: &Event) -> bool {
    !(e.source.component.is_empty() && e.involved_object.name.is_empty() && e.involved_object.uid.is_empty())
}

fn non_empty_key(s: &[u8], e: &Event, what: &str) -> Result<Key, String> {
    if s.is_empty() && has_identity(e) {
        return Err(format!("empty {what} for event {}", describe(e)));
    }
    Ok(Key::of_bytes(s))
}

/// One event through a batch method. The single-event methods cannot drop an event, so a
/// dropped one gets the built-in answer.
fn one<T>(batch: impl FnOnce(&mut Vec<Option<T>>), builtin: impl FnOnce() -> T) -> T {
    let mut out = Vec::with_capacity(1);
    batch(&mut out);
    out.pop().flatten().unwrap_or_else(builtin)
}

/// An aggregate-key plugin's answer for one event: the aggregate key, and the local key or
/// the key field it is (a plugin that declares `local-key-field`): an answer that events
/// differing only in that field share, in the memo too.
#[derive(Debug, Clone, Copy)]
struct AggregateAnswer {
    aggregate: Key,
    local: LocalKey,
}

#[derive(Debug, Clone, Copy)]
enum LocalKey {
    /// The plugin's (or the built-in function's) local key.
    Key(Key),
    /// Key field `i` of the event, as it is.
    Field(usize),
}

impl AggregateAnswer {
    /// The key pair of `event`.
    fn for_event(self, event: &Event) -> AggregateKey {
        let local = match self.local {
            LocalKey::Key(key) => key,
            LocalKey::Field(i) => Key::of(key_field(event, i)),
        };
        AggregateKey { aggregate: self.aggregate, local }
    }
}

impl From<AggregateKey> for AggregateAnswer {
    fn from(k: AggregateKey) -> Self {
        Self { aggregate: k.aggregate, local: LocalKey::Key(k.local) }
    }
}

/// An aggregate-key plugin as the correlator's [`EventAggregatorKeyFunc`]; fallback
/// [`ByReason`].
pub struct WasmAggregateKeyFunc(BatchKeyFn<AggregateAnswer>);

impl WasmAggregateKeyFunc {
    /// Wraps `handle` (an `aggregate-key` plugin as one tenant uses it).
    ///
    /// # Errors
    /// [`WrongKind`] for a plugin of another kind.
    pub fn new(handle: PluginHandle) -> Result<Self, WrongKind> {
        BatchKeyFn::new(handle, PluginKind::AggregateKey, 2).map(Self)
    }
}

impl EventAggregatorKeyFunc for WasmAggregateKeyFunc {
    fn aggregate_key(&self, event: &Event) -> AggregateKey {
        one(|out| self.aggregate_keys(&[event], out), || ByReason.aggregate_key(event))
    }

    fn aggregate_keys(&self, events: &[&Event], out: &mut Vec<Option<AggregateKey>>) {
        let decode = |s: &[&[u8]], e: &Event, projection: KeyProjection| {
            let aggregate = non_empty_key(s[0], e, "aggregate key")?;
            let local = match projection.local {
                Some(i) => LocalKey::Field(i),
                None => LocalKey::Key(Key::of_bytes(s[1])),
            };
            Ok(AggregateAnswer { aggregate, local })
        };
        let mut answers = Vec::with_capacity(events.len());
        self.0.run(events, &mut answers, decode, |e| ByReason.aggregate_key(e).into());
        out.extend(answers.into_iter().zip(events).map(|(a, e)| a.map(|a| a.for_event(e))));
    }
}

/// A message-combiner plugin as the correlator's [`EventAggregatorMessageFunc`]; fallback
/// [`SimilarEvents`].
pub struct WasmMessageFunc(BatchKeyFn<String>);

impl WasmMessageFunc {
    /// Wraps `handle` (a `message-combiner` plugin as one tenant uses it).
    ///
    /// # Errors
    /// [`WrongKind`] for a plugin of another kind.
    pub fn new(handle: PluginHandle) -> Result<Self, WrongKind> {
        BatchKeyFn::new(handle, PluginKind::MessageCombiner, 1).map(Self)
    }
}

impl EventAggregatorMessageFunc for WasmMessageFunc {
    fn aggregate_message(&self, event: &Event) -> String {
        one(|out| self.aggregate_messages(&[event], out), || SimilarEvents.aggregate_message(event))
    }

    fn aggregate_messages(&self, events: &[&Event], out: &mut Vec<Option<String>>) {
        let decode = |s: &[&[u8]], _: &Event, _: KeyProjection| {
            String::from_utf8(s[0].to_vec()).map_err(|e| format!("message is not UTF-8: {e}"))
        };
        self.0.run(events, out, decode, |e| SimilarEvents.aggregate_message(e));
    }
}

/// A spam-key plugin as the correlator's [`EventSpamKeyFunc`]; fallback [`SourceObject`].
pub struct WasmSpamKeyFunc(BatchKeyFn<Key>);

impl WasmSpamKeyFunc {
    /// Wraps `handle` (a `spam-key` plugin as one tenant uses it).
    ///
    /// # Errors
    /// [`WrongKind`] for a plugin of another kind.
    pub fn new(handle: PluginHandle) -> Result<Self, WrongKind> {
        BatchKeyFn::new(handle, PluginKind::SpamKey, 1).map(Self)
    }
}

impl EventSpamKeyFunc for WasmSpamKeyFunc {
    fn spam_key(&self, event: &Event) -> Key {
        one(|out| self.spam_keys(&[event], out), || SourceObject.spam_key(event))
    }

    fn spam_keys(&self, events: &[&Event], out: &mut Vec<Option<Key>>) {
        self.0.run(events, out, |s, e, _| non_empty_key(s[0], e, "spam key"), |e| SourceObject.spam_key(e));
    }
}

/// The three correlator plugins of one tenant.
#[derive(Debug, Clone)]
pub struct CorrelatorPlugins {
    /// The aggregate-key plugin.
    pub aggregate_key: PluginHandle,
    /// The message combiner.
    pub message_combiner: PluginHandle,
    /// The spam-key plugin.
    pub spam_key: PluginHandle,
}

impl CorrelatorPlugins {
    /// The embedded defaults `by-reason`, `similar-events` and `source-object` of `registry` (or
    /// the plugins-directory files overriding them) for `tenant` with `settings`.
    ///
    /// # Errors
    /// [`LookupError`] if a default is missing or was replaced by a plugin of another kind.
    pub fn defaults(registry: &PluginRegistry, tenant: &str, settings: &PluginSettings) -> Result<Self, LookupError> {
        let get = |name, kind| registry.handle(name, kind, tenant, settings.clone());
        Ok(Self {
            aggregate_key: get(DEFAULT_AGGREGATE_KEY_PLUGIN, PluginKind::AggregateKey)?,
            message_combiner: get(DEFAULT_MESSAGE_COMBINER_PLUGIN, PluginKind::MessageCombiner)?,
            spam_key: get(DEFAULT_SPAM_KEY_PLUGIN, PluginKind::SpamKey)?,
        })
    }

    /// `options` with these plugins as its key, message and spam-key functions.
    ///
    /// # Errors
    /// [`WrongKind`] when a plugin is not of the kind its slot needs.
    pub fn apply(&self, options: CorrelatorOptions) -> Result<CorrelatorOptions, WrongKind> {
        Ok(CorrelatorOptions {
            key_func: Some(Arc::new(WasmAggregateKeyFunc::new(self.aggregate_key.clone())?)),
            message_func: Some(Arc::new(WasmMessageFunc::new(self.message_combiner.clone())?)),
            spam_key_func: Some(Arc::new(WasmSpamKeyFunc::new(self.spam_key.clone())?)),
            ..options
        })
    }

    /// The three handles (to read their counters).
    pub fn handles(&self) -> [&PluginHandle; 3] {
        [&self.aggregate_key, &self.message_combiner, &self.spam_key]
    }
}
