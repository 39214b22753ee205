//! Calling one export of a plugin: one live instance per caller, fuel set before every call,
//! a fresh instance after any failure that may have poisoned the old one, and after a hot
//! reload swapped the plugin's version.

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use wasmtime::component::{ComponentNamedList, Func, Lift, Lower};
use wasmtime::{Store, Trap};

use super::breaker::Tripped;
use super::state::{MemoryLimitExceeded, OutputFn};
use super::{Plugin, PluginHandle, PluginKind, PluginState};

/// Fuel for instantiating (a guest's start code), in multiples of the per-event budget.
const INSTANTIATE_FUEL_EVENTS: u64 = 16;

/// Why a plugin call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallFailure {
    /// The call used its whole fuel budget (an endless or too long loop).
    OutOfFuel {
        /// The budget, fuel units.
        budget: u64,
    },
    /// The guest grew its memory past its limit.
    MemoryLimit(String),
    /// The guest trapped: a panic (`unreachable`), a bad memory access, …
    Trap(String),
    /// A fresh instance could not be created.
    Instantiate(String),
    /// The guest answered with its own error (e.g. it rejected the batch).
    GuestError(String),
    /// The guest answered with something that breaks the contract (wrong count, bad offsets,
    /// invalid UTF-8, an empty key).
    Garbage(String),
    /// The plugin's file was removed and no embedded default of that name exists: callers use
    /// the built-in function (not counted as a failure). When the name is pinned
    /// ([`PluginSlot::is_withdrawn`](super::PluginSlot::is_withdrawn)) they apply their fallback
    /// policy instead, without calling (nor counting failures), as for [`Quarantined`](Self::Quarantined).
    Unloaded,
    /// The plugin is quarantined after repeated failures ([`super::breaker`]): not called;
    /// callers apply the fallback policy (key functions and filters do not count it as a
    /// failure).
    Quarantined,
}

impl fmt::Display for CallFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallFailure::OutOfFuel { budget } => write!(f, "ran out of fuel (budget {budget})"),
            CallFailure::MemoryLimit(m) => write!(f, "{m}"),
            CallFailure::Trap(m) => write!(f, "trapped: {m}"),
            CallFailure::Instantiate(m) => write!(f, "could not be instantiated: {m}"),
            CallFailure::GuestError(m) => write!(f, "returned an error: {m}"),
            CallFailure::Garbage(m) => write!(f, "returned garbage: {m}"),
            CallFailure::Unloaded => write!(f, "is not loaded (its file was removed)"),
            CallFailure::Quarantined => write!(f, "is quarantined after repeated failures"),
        }
    }
}

impl CallFailure {
    /// A short label for metrics: `out_of_fuel`, `memory_limit`, `trap`, `instantiate`,
    /// `guest_error`, `garbage`, `unloaded`, `quarantined`.
    pub fn label(&self) -> &'static str {
        match self {
            CallFailure::OutOfFuel { .. } => "out_of_fuel",
            CallFailure::MemoryLimit(_) => "memory_limit",
            CallFailure::Trap(_) => "trap",
            CallFailure::Instantiate(_) => "instantiate",
            CallFailure::GuestError(_) => "guest_error",
            CallFailure::Garbage(_) => "garbage",
            CallFailure::Unloaded => "unloaded",
            CallFailure::Quarantined => "quarantined",
        }
    }

    /// Every [`label`](Self::label), in the order of [`PluginStatsSnapshot::failures_by_reason`](super::PluginStatsSnapshot::failures_by_reason).
    pub const LABELS: [&'static str; 8] =
        ["out_of_fuel", "memory_limit", "trap", "instantiate", "guest_error", "garbage", "unloaded", "quarantined"];

    /// The index of this failure's label in [`LABELS`](Self::LABELS).
    pub fn index(&self) -> usize {
        match self {
            CallFailure::OutOfFuel { .. } => 0,
            CallFailure::MemoryLimit(_) => 1,
            CallFailure::Trap(_) => 2,
            CallFailure::Instantiate(_) => 3,
            CallFailure::GuestError(_) => 4,
            CallFailure::Garbage(_) => 5,
            CallFailure::Unloaded => 6,
            CallFailure::Quarantined => 7,
        }
    }

    /// Whether the circuit breaker counts it: a failure that ran the guest to a limit or a
    /// trap (costly), not an answer the guest gave.
    fn trips_breaker(&self) -> bool {
        matches!(self, CallFailure::OutOfFuel { .. } | CallFailure::MemoryLimit(_) | CallFailure::Trap(_))
    }

    fn from_wasmtime(e: &wasmtime::Error, budget: u64) -> Self {
        if let Some(limit) = e.downcast_ref::<MemoryLimitExceeded>() {
            return CallFailure::MemoryLimit(limit.to_string());
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => CallFailure::OutOfFuel { budget },
            Some(Trap::UnreachableCodeReached) => CallFailure::Trap("unreachable code reached (a guest panic?)".into()),
            _ => CallFailure::Trap(format!("{e:#}")),
        }
    }
}

/// A failed plugin call: which plugin, kind, tenant and event, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin `{plugin}` ({kind}) for tenant `{tenant}` failed on event {event}: {failure}")]
pub struct PluginCallError {
    /// Plugin name.
    pub plugin: String,
    /// Plugin kind.
    pub kind: PluginKind,
    /// Tenant the call was made for (`default` when none matched).
    pub tenant: String,
    /// The event (`namespace/name`), or the first event and batch size.
    pub event: String,
    /// What went wrong.
    pub failure: CallFailure,
}

/// What a successful call cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCost {
    /// Fuel consumed (0 when fuel is off).
    pub fuel: u64,
    /// The instance's peak linear memory so far, bytes.
    pub peak_memory_bytes: usize,
}

struct Live<P, R> {
    /// The version this instance runs.
    plugin: Arc<Plugin>,
    store: Store<PluginState>,
    /// The export, checked against `P` → `R` when the instance was made.
    func: Func,
    types: PhantomData<fn(P) -> R>,
}

/// One export of one plugin for one tenant, with its live instance.
pub(crate) struct Caller<P, R> {
    handle: PluginHandle,
    export: &'static str,
    output: Option<OutputFn>,
    live: Mutex<Option<Live<P, R>>>,
}

impl<P, R> Caller<P, R>
where
    P: ComponentNamedList + Lower + Send + Sync + 'static,
    R: ComponentNamedList + Lift + Send + Sync + 'static,
{
    /// A caller of `export` (instantiated lazily, on the first call).
    pub(crate) fn new(handle: PluginHandle, export: &'static str, output: Option<OutputFn>) -> Self {
        Self { handle, export, output, live: Mutex::new(None) }
    }

    pub(crate) fn handle(&self) -> &PluginHandle {
        &self.handle
    }

    /// The error for `failure` on `event`, counted in the handle's stats.
    pub(crate) fn error(&self, event: String, failure: CallFailure) -> PluginCallError {
        let stats = self.handle.stats();
        stats.failures.fetch_add(1, Ordering::Relaxed);
        stats.failures_by_reason[failure.index()].fetch_add(1, Ordering::Relaxed);
        PluginCallError {
            plugin: self.handle.name().to_string(),
            kind: self.handle.kind(),
            tenant: self.handle.tenant().to_string(),
            event,
            failure,
        }
    }

    /// Quarantines the plugin at once ([`super::breaker::Breaker::trip`]): a batch's bisection
    /// found it failing on every event it tried (`failure` the last one).
    pub(crate) fn keeps_failing(&self, failure: &CallFailure) {
        if !failure.trips_breaker() {
            return;
        }
        if let Tripped::For(backoff) = self.handle.slot().breaker().trip(std::time::Instant::now()) {
            self.quarantined(backoff, failure);
        }
    }

    /// Counts and logs (once) a quarantine of `backoff` that `failure` caused.
    fn quarantined(&self, backoff: std::time::Duration, failure: &CallFailure) {
        self.handle.stats().quarantines.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            plugin = self.handle.name(),
            tenant = %self.handle.tenant(),
            %failure,
            backoff_seconds = backoff.as_secs_f64(),
            "plugin quarantined: its fallback is used without calling it",
        );
    }

    fn instantiate(&self, plugin: Arc<Plugin>) -> Result<Live<P, R>, CallFailure> {
        let settings = self.handle.settings();
        let state = PluginState::new(
            plugin.name.clone(),
            self.handle.tenant().clone(),
            settings.config.clone(),
            settings.memory_limit_bytes,
            self.output.clone(),
        );
        let mut store = Store::new(plugin.pre.engine(), state);
        store.limiter(|s| s.limiter());
        let budget = settings.fuel_per_event.saturating_mul(INSTANTIATE_FUEL_EVENTS);
        if plugin.fuel {
            store.set_fuel(budget).map_err(|e| CallFailure::Instantiate(e.to_string()))?;
        }
        let instance =
            plugin.pre.instantiate(&mut store).map_err(|e| match CallFailure::from_wasmtime(&e, budget) {
                CallFailure::Trap(m) => CallFailure::Instantiate(m),
                other => other,
            })?;
        let func = *instance
            .get_typed_func::<P, R>(&mut store, self.export)
            .map_err(|e| CallFailure::Instantiate(format!("export `{}`: {e:#}", self.export)))?
            .func();
        self.handle.stats().instances.fetch_add(1, Ordering::Relaxed);
        Ok(Live { plugin, store, func, types: PhantomData })
    }

    /// Calls the export with `params` (a batch of `events` events) under a budget of
    /// `events × fuel_per_event`, on the slot's current version (a new instance when the version
    /// changed since the last call). On any failure the instance is discarded; the next call
    /// gets a fresh one.
    pub(crate) fn call(&self, params: P, events: usize) -> Result<(R, CallCost), CallFailure> {
        self.call_versioned(params, events).map(|(r, cost, _)| (r, cost))
    }

    /// As [`call`](Self::call), also telling which version answered
    /// ([`Plugin::version`](super::Plugin::version)).
    pub(crate) fn call_versioned(&self, params: P, events: usize) -> Result<(R, CallCost, u64), CallFailure> {
        self.call_lowering(params, events)
    }

    /// As [`call_versioned`](Self::call_versioned), with parameters of another Rust type that
    /// lowers to the same WIT types, e.g. `(&T,)` for a `P` of `(T,)`: the caller keeps its
    /// buffers. (A key-fields batch is tens of KiB; freeing one after every call cost ~18 ns
    /// per event.) A `Q` that does not lower to the export's parameters fails the call.
    pub(crate) fn call_lowering<Q>(&self, params: Q, events: usize) -> Result<(R, CallCost, u64), CallFailure>
    where
        Q: ComponentNamedList + Lower,
    {
        let (settings, stats) = (self.handle.settings(), self.handle.stats());
        let mut guard = self.live.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(current) = self.handle.slot().load() else {
            *guard = None;
            return Err(CallFailure::Unloaded);
        };
        let breaker = self.handle.slot().breaker();
        if !breaker.allows(std::time::Instant::now()) {
            return Err(CallFailure::Quarantined);
        }
        if !guard.as_ref().is_some_and(|live| Arc::ptr_eq(&live.plugin, &current)) {
            *guard = None;
            *guard = Some(self.instantiate(current)?);
        }
        let live = guard.as_mut().expect("instantiated above");
        let fuel_on = live.plugin.fuel;
        let budget = settings.fuel_per_event.saturating_mul(events.max(1) as u64);
        if fuel_on {
            live.store.set_fuel(budget).map_err(|e| CallFailure::Trap(e.to_string()))?;
        }
        stats.calls.fetch_add(1, Ordering::Relaxed);
        stats.events.fetch_add(events as u64, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let func = live
            .func
            .typed::<Q, R>(&live.store)
            .map_err(|e| CallFailure::Instantiate(format!("export `{}`: {e:#}", self.export)))?;
        let outcome = func.call(&mut live.store, params);
        stats.called_for(crate::metrics::histogram::nanos(started.elapsed()));
        match outcome {
            Ok(r) => {
                breaker.succeeded();
                let fuel = if fuel_on { budget.saturating_sub(live.store.get_fuel().unwrap_or(0)) } else { 0 };
                stats.fuel_consumed.fetch_add(fuel, Ordering::Relaxed);
                let cost = CallCost { fuel, peak_memory_bytes: live.store.data().peak_memory_bytes() };
                Ok((r, cost, live.plugin.version))
            }
            Err(e) => {
                *guard = None; // a trapped instance cannot be entered again
                let failure = CallFailure::from_wasmtime(&e, budget);
                if failure.trips_breaker()
                    && let Tripped::For(backoff) = breaker.failed(std::time::Instant::now(), events <= 1)
                {
                    self.quarantined(backoff, &failure);
                }
                Err(failure)
            }
        }
    }
}

/// Single-event failures, with no call of the batch succeeding, after which a failure is taken
/// as systematic (the plugin fails on everything) and the rest of the batch falls back without
/// calling the plugin again.
pub const MAX_ISOLATED_FAILURES: usize = 3;

/// One plugin call on a slice of events: a value per event, or why not.
type TryCall<'f, 'e, T> = dyn FnMut(&[&'e crate::event::Event]) -> Result<Vec<T>, CallFailure> + 'f;

/// Finds the events a failed batch call failed on, by calling the plugin on its first event
/// alone (up to [`MAX_ISOLATED_FAILURES`] of them while each fails), then on each half of the
/// rest, down to single events, so that only an event that fails alone takes the fallback:
/// with k failing events among n, at most about 2·k·log2(n) + 3 more calls. `failure` is the
/// batch call's.
///
/// `try_call` answers one value per event of a slice; `fall_back` is given each event that
/// failed alone, with its failure (it reports and applies the policy); `systematic` is given
/// the events left once [`MAX_ISOLATED_FAILURES`] single events failed and no call of this
/// batch had succeeded. Values come back in event order.
pub(crate) fn bisect<'e, T>(
    events: &[&'e crate::event::Event],
    failure: CallFailure,
    try_call: &mut TryCall<'_, 'e, T>,
    fall_back: &mut dyn FnMut(&'e crate::event::Event, CallFailure) -> T,
    systematic: &mut dyn FnMut(&'e crate::event::Event) -> T,
) -> Vec<T> {
    struct Search<'f, 'e, T> {
        try_call: &'f mut TryCall<'f, 'e, T>,
        fall_back: &'f mut dyn FnMut(&'e crate::event::Event, CallFailure) -> T,
        systematic: &'f mut dyn FnMut(&'e crate::event::Event) -> T,
        succeeded: bool,
        single_failures: usize,
        out: Vec<T>,
    }
    impl<'e, T> Search<'_, 'e, T> {
        fn failed(&mut self, events: &[&'e crate::event::Event], failure: CallFailure) {
            if let [event] = events {
                self.out.push((self.fall_back)(event, failure));
                self.single_failures += 1;
                return;
            }
            let (left, right) = events.split_at(events.len() / 2);
            self.call(left);
            self.call(right);
        }

        fn call(&mut self, events: &[&'e crate::event::Event]) {
            if !self.succeeded && self.single_failures >= MAX_ISOLATED_FAILURES {
                self.out.extend(events.iter().map(|e| (self.systematic)(e)));
                return;
            }
            match (self.try_call)(events) {
                Ok(values) => {
                    self.succeeded = true;
                    self.out.extend(values);
                }
                // Quarantined meanwhile ([`super::breaker`]): not a failure of these events.
                Err(CallFailure::Quarantined) => self.out.extend(events.iter().map(|e| (self.systematic)(e))),
                Err(failure) => self.failed(events, failure),
            }
        }
    }
    let mut search = Search {
        try_call,
        fall_back,
        systematic,
        succeeded: false,
        single_failures: 0,
        out: Vec::with_capacity(events.len()),
    };
    if events.len() == 1 {
        search.failed(events, failure);
        return search.out;
    }
    // The first events alone, before halving: a plugin failing on every event is cut off after
    // a few single calls instead of the halves, which (for a plugin that runs out of fuel) burn
    // the batch's budget a second time. The values are the same either way: the cut-off comes
    // exactly when the first MAX_ISOLATED_FAILURES events each fail alone.
    let probes = events.len().min(MAX_ISOLATED_FAILURES);
    let mut probed = 0;
    while probed < probes && !search.succeeded {
        search.call(&events[probed..=probed]);
        probed += 1;
    }
    match &events[probed..] {
        [] => {}
        rest @ [_] => search.call(rest),
        rest => search.failed(rest, failure),
    }
    search.out
}
