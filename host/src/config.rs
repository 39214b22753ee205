//! The tenant configuration file (TOML): per-tenant correlation rules, plugin choices and sinks.
//!
//! Events are routed to the first tenant whose `match` holds (see [`crate::tenant`]); events no
//! tenant matches get the `[defaults]`. Every tenant's `rules` are merged over `[defaults]` key
//! by key; a key set nowhere stays unset ([`None`]) and the caller applies its own default (the
//! CLI flag, or client-go's value). A full example with every key:
//!
//! ```toml
//! # Rules for events no tenant matches (and the base every tenant overrides).
//! [defaults]
//! aggregate_key = "by-reason"          # plugin name (embedded or in the plugins directory), or "builtin" for the native client-go function
//! message_combiner = "similar-events"
//! spam_key = "source-object"
//! filters = ["my-filter"]              # filter plugin names, run in order before correlation
//! max_events = 10                      # client-go maxEvents
//! max_interval_seconds = 600           # client-go maxIntervalInSeconds
//! burst = 25                           # spam filter burst, events
//! qps = 0.0033333333                   # spam filter refill, events per second
//! lru_cache_size = 4096                # entries per correlator cache; 0 = the client-go default
//! fuel_per_event = 2000000             # plugin fuel per event (≈ Wasm instructions)
//! memory_limit_bytes = 67108864        # plugin linear-memory limit, bytes
//! fallback = "builtin"                 # what a failed plugin call does: builtin | drop | fail
//! sinks = ["jsonl:out/default.jsonl"]  # sink specs, same syntax as --sink; absent = the --sink option
//!                                      # (",delivery=at-most-once|wait|at-least-once" gives a sink its own mode)
//! partition_key = "source-object"      # what `run --workers` shards by: source-object | namespace; absent = --partition-key
//! # Declarative rules (no plugin needed), evaluated before the filter plugins; the criteria of a
//! # tenant's `match`, plus an optional `name` (the label of its counters; default `drop[0]`, …).
//! drop = [{ name = "pulls", namespaces = ["kube-system"], reasons = ["Pulled", "Created"] }]
//! keep = [{ types = ["Warning"] }, { reasons = ["Killing", "Evicted"] }]  # given: anything else is dropped
//! spam_exempt = [{ reasons = ["NodeReady", "Started"] }]                  # never skipped by the spam filter
//! suppressed_summary_seconds = 300     # one "N events suppressed" event per object and window; 0 = none
//!
//! # Per-plugin key/value config, handed to the plugin through its `config` import. Values are
//! # strings; integers, floats and booleans are accepted and passed in their string form.
//! # `pure` is the host's: `pure = false` makes the host call a key plugin or message combiner on
//! # every event instead of answering repeated inputs from its memo (for a plugin that keeps state).
//! [plugins.my-filter]
//! threshold = "5"
//! verbose = true
//! [plugins.my-stateful-key]
//! pure = false
//! # `memo_max_entries` is the host's too: the most answers a pure plugin's memo grows to (per
//! # tenant stage; default 65536, rounded down to a power of two).
//! [plugins.by-reason]
//! memo_max_entries = 16384
//! # `digest` is the host's: the plugin is pinned to the SHA-256 of its component bytes; a file
//! # (or embedded default) of another digest is refused. `eventpipe plugins lock` writes these.
//! [plugins.my-filter-pinned]
//! digest = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//! # `source` is the host's: the plugin is pulled at start from an OCI registry (a Wasm OCI
//! # artifact, by its manifest digest), verified, cached, and loaded under this name.
//! [plugins.shared-filter]
//! source = "oci://registry.example.com/eventpipe/shared-filter:1.0@sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
//!
//! [[tenants]]                          # first match wins, in file order
//! name = "payments"
//! [tenants.match]                      # every criterion given must hold; a list matches if any entry does
//! namespaces = ["payments-*", "billing"]   # globs on metadata.namespace (involvedObject.namespace when empty)
//! kinds = ["Pod", "Deployment"]            # involvedObject.kind, exact
//! # also: reasons = ["Back*"] (globs on reason), types = ["Warning"] (exact),
//! #       message = "OOM|evict" (a regex searched for in message, unanchored)
//! labels = { team = "pay*" }               # the Event's own metadata.labels; value globs; all must match
//! source_components = ["kubelet"]          # globs on source.component (reportingComponent when empty)
//! source_hosts = ["node-*"]                # globs on source.host (reportingInstance when empty)
//! headers = { "x-eventpipe-tenant" = "payments" }  # HTTP ingest request headers; names case-insensitive, value globs
//! # with [enrich]: object_labels = { team = "pay*" } (the involved object's enriched labels),
//! #       owner_kinds = ["Deployment"] (exact), owner_names = ["checkout-*"] (globs on the top owner)
//! [tenants.rules]                      # any key of [defaults]; unset keys inherit [defaults]
//! max_events = 5
//! burst = 10
//! sinks = ["jsonl:out/payments.jsonl"]
//! [[tenants.rules.routes]]             # a route of this tenant's writes only (default name `payments/route-0`)
//! match = { reasons = ["OOMKilling"] }
//! sinks = ["jsonl:out/payments-oom.jsonl"]
//!
//! [[tenants]]
//! name = "system"
//! match = { namespaces = ["kube-*"] }
//! rules = { filters = [], fallback = "drop" }
//!
//! [[routes]]                           # correlated writes sent to more sinks, besides each tenant's own
//! name = "slack-prod"                  # the label of its counters; default `route-<index>`
//! match = { types = ["Warning"], namespaces = ["prod-*"] }  # a tenant's criteria; absent: every write
//! min_count = 3                        # only writes whose event count reached 3 (default 1)
//! rate = "10/min"                      # at most 10 writes a minute (N/s, N/min, N/h); the rest held back
//! sinks = ["webhook:https://hooks.slack.com/services/T000/B000/XXXX,preset=slack"]
//!
//! [watch_cache]                        # `run --serve`'s watch cache; read at start, each `run` flag wins
//! size = 10000                         # changes kept for resuming watchers (--watch-cache-size)
//! age_seconds = 300                    # --watch-cache-age
//! objects = 10000                      # events held (--watch-cache-objects)
//! event_ttl_seconds = 3600             # --event-ttl
//! queue_length = 100                   # events queued per watch connection (--watch-queue-length)
//! budget_seconds = 10                  # > 0 (--watch-budget)
//! bookmark_interval_seconds = 60       # > 0 (--watch-bookmark-interval)
//!
//! [enrich]                             # attach what each event's object is part of; read at start, each `run` flag wins
//! labels = ["app.kubernetes.io/*", "team"]  # globs on the involved object's label keys (--enrich-labels)
//! annotations = []                     # globs on its annotation keys (--enrich-annotations)
//! owner = true                         # the top controller owner: Pod → ReplicaSet → Deployment (--enrich-owner)
//! node_labels = ["topology.kubernetes.io/*"]  # a Pod's node and its labels (--enrich-node-labels)
//! cluster = "prod-eu"                  # --cluster-name
//! wait_ms = 100                        # the longest an event waits for it (--enrich-wait)
//! max_objects = 100000                 # objects per kind in the cache (--enrich-max-objects)
//!
//! [leader_election]                    # `run` only while holding a Lease; read at start, each `run` flag wins
//! enabled = true                       # --leader-elect
//! lease = "eventpipe/eventpipe"        # NAMESPACE/NAME or NAME (--leader-elect-lease)
//! lease_duration_seconds = 15          # > renew_deadline_seconds (--leader-elect-lease-duration)
//! renew_deadline_seconds = 10          # > retry_period_seconds × 1.2 (--leader-elect-renew-deadline)
//! retry_period_seconds = 2             # --leader-elect-retry-period
//! ```
//!
//! Rules of the format, all checked by [`Config::parse`]:
//! - Unknown keys are errors, everywhere.
//! - A tenant needs a non-empty, unique `name` other than `default` (the name of the defaults,
//!   [`DEFAULT_TENANT`]) and a `match` with at least one criterion; a criterion given must have at
//!   least one entry. Globs must be valid.
//! - `fuel_per_event` and `memory_limit_bytes` are non-negative integers. `lru_cache_size`,
//!   `max_events`, `max_interval_seconds`, `burst` and `qps` may be negative, with client-go's
//!   meaning (a negative burst filters every event, a negative cache size keeps nothing, …);
//!   `qps` must not be NaN.
//! - `fallback` is `builtin`, `drop` or `fail`; `partition_key` is `source-object` or `namespace`.
//! - `drop`, `keep` and `spam_exempt` are lists of matchers ([`crate::tenant::rules`]); a rule's `name`
//!   is non-empty and unique in its list; `keep = []` is refused (it would drop every event); a
//!   tenant's `match` has no `name`. A tenant's list replaces the `[defaults]` one (`drop = []`
//!   clears it).
//! - `pure` in a `[plugins.NAME]` table is `true` or `false` (or the string `"true"` / `"false"`);
//!   `memo_max_entries` an integer from 2 to 16,777,216; `digest` is `sha256:` and 64 hex
//!   digits; `source` an `oci://HOST[:PORT]/REPO[:TAG]@sha256:HEX` reference.
//! - In `[watch_cache]`, `budget_seconds` and `bookmark_interval_seconds` are positive numbers;
//!   the other keys non-negative integers.
//! - In `[leader_election]`, the `*_seconds` keys are positive numbers; those the file gives keep
//!   client-go's order (lease duration > renew deadline > retry period × 1.2); `lease` is `NAME`
//!   or `NAMESPACE/NAME`, neither part empty. The terms as the flags and defaults complete them
//!   are checked when `run` starts ([`LeaderElectionSettings::resolve`]).
//! - Routes ([`crate::tenant::routes`]): top-level `[[routes]]` serve every tenant, a tenant's
//!   `rules.routes` that tenant only; `[defaults]` has no `routes`. A route's `name` is
//!   non-empty and unique in the file (default `route-<index>`, `TENANT/route-<index>` in a
//!   tenant); its `match` has the criteria of a tenant's (absent: every write) and no `name`;
//!   `min_count` is from 1 to 2,147,483,647; `rate` is `N/s`, `N/min` or `N/h` (N from 1 to
//!   1,000,000); `sinks` is a non-empty list of sink specs.
//! - Each sink is a sink spec as `--sink` takes it (`jsonl:PATH`, `jsonl:-`, `plugin:NAME`, `k8s`,
//!   `k8s:NAMESPACE`), and
//!   `sinks` must not be empty when given.
//! - Plugin names are non-empty; `builtin` names the native client-go function and is not a
//!   filter. Whether a named plugin exists is for the caller to check ([`PluginRef`] keeps the
//!   line for its error).
//!
//! Errors ([`ConfigError`]) name the file, line and column, and the key path, like
//! `eventpipe.toml:14:9: tenants[0].rules.burst: invalid type: string "x", expected i64`.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use toml::Spanned;

use crate::broadcaster::FullChannelBehavior;
use crate::election::{self as leader, JITTER_FACTOR, LeaderElectionConfig};
use crate::oci::OciReference;
use crate::partition::PartitionKey;
use crate::plugin::pin::{DIGEST_KEY, SOURCE_KEY, Sha256Digest};
use crate::plugin::{FallbackPolicy, MEMO_MAX_ENTRIES_KEY, PURE_KEY, parse_memo_max_entries};
pub use crate::tenant::DEFAULT_TENANT;
use crate::tenant::routes::{Rate, Route};
use crate::tenant::rules::EventRule;
use crate::tenant::{EventMatch, MatchEntry, MatchError, MatchSpec, TenantRouter};
use crate::watchers::WatcherSpec;

/// The plugin name that selects the native client-go function instead of a plugin
/// (`aggregate_key`, `message_combiner`, `spam_key`).
pub const BUILTIN: &str = "builtin";

/// An error in a configuration file: where (file, 1-based line and column when known, key path)
/// and what.
///
/// Displays as `FILE:LINE:COLUMN: KEY: MESSAGE`, leaving out what is unknown (an I/O error has no
/// line and no key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The configuration file.
    pub path: PathBuf,
    /// 1-based line, when the error has a place in the file.
    pub line: Option<usize>,
    /// 1-based column (in characters), when known.
    pub column: Option<usize>,
    /// The key path (`tenants[1].rules.max_events`); empty when the error is not about a key.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// The file at `path` cannot be read (`error`; or it is not UTF-8): no line, no key.
    pub fn unreadable(path: &Path, error: &std::io::Error) -> Self {
        ConfigError {
            path: path.to_path_buf(),
            line: None,
            column: None,
            key: String::new(),
            message: format!("cannot read: {error}"),
        }
    }
}

/// Writes a problem as compilers do: `FILE[:LINE[:COLUMN]]: [KEY: ]MESSAGE`, each part only
/// where given (`line` and `column` 1-based; a column only after a line). The form of
/// [`ConfigError`] and of `eventpipe validate`'s lines.
pub fn write_located(
    f: &mut fmt::Formatter<'_>,
    file: Option<&dyn fmt::Display>,
    (line, column): (Option<usize>, Option<usize>),
    key: &str,
    message: &str,
) -> fmt::Result {
    if let Some(file) = file {
        write!(f, "{file}")?;
        if let Some(line) = line {
            write!(f, ":{line}")?;
            if let Some(column) = column {
                write!(f, ":{column}")?;
            }
        }
        f.write_str(": ")?;
    }
    if !key.is_empty() {
        write!(f, "{key}: ")?;
    }
    f.write_str(message)
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(f, Some(&self.path.display()), (self.line, self.column), &self.key, &self.message)
    }
}

/// A plugin named in the configuration, with where it was named (for "not found" errors).
///
/// Equality and hashing look at `name` only, so that rules that only moved within the file
/// compare equal.
#[derive(Debug, Clone, Eq)]
pub struct PluginRef {
    /// The plugin's name (embedded, or in the plugins directory), or [`BUILTIN`].
    pub name: String,
    /// 1-based line of the name in the file.
    pub line: usize,
    /// The key path (`tenants[0].rules.aggregate_key`, `defaults.filters[1]`).
    pub key: String,
}

impl PluginRef {
    /// Whether this selects the native client-go function rather than a plugin.
    pub fn is_builtin(&self) -> bool {
        self.name == BUILTIN
    }
}

impl PartialEq for PluginRef {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Hash for PluginRef {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

/// Fully resolved rules (tenant over defaults). `None` (or an empty `filters`) means "not set
/// anywhere": the caller uses its own default (CLI flags, client-go defaults).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rules {
    /// Aggregate-key function (client-go `EventAggregatorKeyFunc`).
    pub aggregate_key: Option<PluginRef>,
    /// Message combiner (client-go `EventAggregatorMessageFunc`).
    pub message_combiner: Option<PluginRef>,
    /// Spam-filter key function (client-go `EventSpamKeyFunc`).
    pub spam_key: Option<PluginRef>,
    /// Filter plugins, run in this order before correlation.
    pub filters: Vec<PluginRef>,
    /// Whether `filters` was given (even as `[]`): then the config controls the tenant's
    /// filters, and the plugins directory's drop-in filters do not apply.
    pub filters_listed: bool,
    /// client-go `maxEvents`: similar events before aggregation.
    pub max_events: Option<i64>,
    /// client-go `maxIntervalInSeconds`: aggregation window, seconds.
    pub max_interval_seconds: Option<i64>,
    /// Spam-filter burst, events.
    pub burst: Option<i64>,
    /// Spam-filter refill rate, events per second.
    pub qps: Option<f32>,
    /// Entries per correlator LRU cache (0 = the client-go default; negative: none kept).
    pub lru_cache_size: Option<i64>,
    /// Plugin fuel per event (≈ Wasm instructions).
    pub fuel_per_event: Option<u64>,
    /// Plugin linear-memory limit, bytes.
    pub memory_limit_bytes: Option<usize>,
    /// What a failed plugin call does.
    pub fallback: Option<FallbackPolicy>,
    /// Sink specs (`jsonl:PATH`, `jsonl:-`, `plugin:NAME`), not yet parsed; never empty.
    pub sinks: Option<Vec<String>>,
    /// What this tenant's events are partitioned by (`run --workers`).
    pub partition_key: Option<PartitionKey>,
    /// `drop` rules ([`crate::tenant::rules`]); `Some(empty)` clears the base's.
    pub drop: Option<Vec<EventRule>>,
    /// `keep` rules; never `Some(empty)`.
    pub keep: Option<Vec<EventRule>>,
    /// `spam_exempt` rules; `Some(empty)` clears the base's.
    pub spam_exempt: Option<Vec<EventRule>>,
    /// Seconds of an "N suppressed" summary window ([`crate::pipeline::suppressed`]); 0: none.
    pub suppressed_summary_seconds: Option<u64>,
    /// A tenant's own routes (`tenants[i].rules.routes`, [`crate::tenant::routes`]); never
    /// set in `[defaults]` (routes for every tenant are the top-level [`Config::routes`]).
    pub routes: Option<Vec<RouteConfig>>,
}

/// One route of the file, validated: the route, and where it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    /// Its key path: `routes[0]`, `tenants[1].rules.routes[0]`.
    pub key: String,
    /// 1-based line of its table in the file.
    pub line: usize,
    /// The route.
    pub route: Route,
}

impl Rules {
    /// These rules with every unset key taken from `base` (`filters` counts as set when
    /// non-empty or given explicitly in the file; an explicit `filters = []` clears the base's).
    pub fn merged_over(self, base: &Rules) -> Rules {
        self.merge(base, false)
    }

    fn merge(self, base: &Rules, filters_given: bool) -> Rules {
        Rules {
            aggregate_key: self.aggregate_key.or_else(|| base.aggregate_key.clone()),
            message_combiner: self.message_combiner.or_else(|| base.message_combiner.clone()),
            spam_key: self.spam_key.or_else(|| base.spam_key.clone()),
            filters: if filters_given || !self.filters.is_empty() { self.filters } else { base.filters.clone() },
            filters_listed: self.filters_listed || filters_given || base.filters_listed,
            max_events: self.max_events.or(base.max_events),
            max_interval_seconds: self.max_interval_seconds.or(base.max_interval_seconds),
            burst: self.burst.or(base.burst),
            qps: self.qps.or(base.qps),
            lru_cache_size: self.lru_cache_size.or(base.lru_cache_size),
            fuel_per_event: self.fuel_per_event.or(base.fuel_per_event),
            memory_limit_bytes: self.memory_limit_bytes.or(base.memory_limit_bytes),
            fallback: self.fallback.or(base.fallback),
            sinks: self.sinks.or_else(|| base.sinks.clone()),
            partition_key: self.partition_key.or(base.partition_key),
            drop: self.drop.or_else(|| base.drop.clone()),
            keep: self.keep.or_else(|| base.keep.clone()),
            spam_exempt: self.spam_exempt.or_else(|| base.spam_exempt.clone()),
            suppressed_summary_seconds: self.suppressed_summary_seconds.or(base.suppressed_summary_seconds),
            routes: self.routes.or_else(|| base.routes.clone()),
        }
    }

    /// Every plugin these rules name (including [`BUILTIN`] references): aggregate key, message
    /// combiner, spam key, then the filters in order.
    pub fn plugin_refs(&self) -> impl Iterator<Item = &PluginRef> {
        self.aggregate_key.iter().chain(&self.message_combiner).chain(&self.spam_key).chain(&self.filters)
    }
}

/// One `[[tenants]]` entry, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantConfig {
    /// Unique, non-empty, never [`DEFAULT_TENANT`].
    pub name: String,
    /// The compiled `match` criteria.
    pub matcher: EventMatch,
    /// The tenant's `rules` merged over `[defaults]`.
    pub rules: Rules,
    /// The tenant's own `rules`, as written (what the command line does not replace).
    pub own: Rules,
}

/// A parsed and validated configuration file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from (for error messages).
    pub path: PathBuf,
    /// The `[defaults]` rules: for events no tenant matches.
    pub defaults: Rules,
    /// The tenants, in file order (the order they are tried in).
    pub tenants: Vec<TenantConfig>,
    /// `[plugins.NAME]` tables: plugin name → its key/value config (without the pin).
    pub plugin_config: BTreeMap<String, BTreeMap<String, String>>,
    /// The `digest` keys of `[plugins.NAME]` tables: plugin name → the digest it is pinned to
    /// ([`crate::plugin::pin`]). Read at start only.
    pub pins: BTreeMap<String, Sha256Digest>,
    /// The `source` keys of `[plugins.NAME]` tables: plugin name → the OCI reference (with its
    /// manifest digest) it is pulled from at start ([`crate::oci`]).
    pub sources: BTreeMap<String, OciReference>,
    /// `[[watchers]]` tables: watcher plugins attached to the Broadcaster at start.
    pub watchers: Vec<WatcherSpec>,
    /// `[[routes]]` tables: routes of every tenant's correlated writes, in file order
    /// ([`crate::tenant::routes`]); a tenant's own are in its [`Rules::routes`].
    pub routes: Vec<RouteConfig>,
    /// `[shadow]`: plugin name → a candidate component run beside it ([`crate::plugin::shadow`]);
    /// relative paths are taken from the config file's directory. Read at start only.
    pub shadows: BTreeMap<String, PathBuf>,
    /// `shadow_diffs`: the JSON-lines file the first divergences go to (same resolution).
    pub shadow_diffs: Option<PathBuf>,
    /// `shadow_diffs_max`: how many divergences it gets at most.
    pub shadow_diffs_max: Option<u64>,
    /// `[watch_cache]`: the watch cache's settings (the `run` flags win over them). Read at
    /// start only.
    pub watch_cache: crate::watch_cache::WatchCacheSettings,
    /// `[enrich]`: enrichment's settings (the `run` flags win over them). Read at start only.
    pub enrich: crate::k8s::enrich::EnrichSettings,
    /// `[leader_election]`: the election's terms (the `run --leader-elect*` flags win over
    /// them). Read at start only.
    pub leader_election: LeaderElectionSettings,
    /// The 1-based line of every rules key given: `defaults.burst`, `tenants[0].rules.sinks`;
    /// and of each tenant's `match` (`tenants[0].match`).
    pub key_lines: BTreeMap<String, usize>,
}

impl Config {
    /// Parses and validates `text`; `path` is only used in errors and kept in [`Config::path`].
    ///
    /// # Errors
    /// [`ConfigError`] for a TOML syntax error, a wrong type, an unknown key or any rule of the
    /// format broken (see the module documentation); the first one found ([`Config::check`]
    /// finds them all).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        match Self::check(text, path) {
            (Some(config), problems) if problems.is_empty() => Ok(config),
            (_, mut problems) => Err(problems.swap_remove(0)),
        }
    }

    /// Every problem of `text`, in file-section order, as `eventpipe validate` lists them:
    ///
    /// 1. TOML syntax errors (each with its line and column; the parser recovers after each).
    ///    When there is one, nothing else is checked: the rest would be read from a guess.
    /// 2. Types and unknown keys (an unknown key with `did you mean …?` when a known key of that
    ///    table is close): each is noted, taken out of the document, and the document read
    ///    again, until it reads. A missing required key ends this step.
    /// 3. The rules of the format (module documentation), per key: one problem per key at
    ///    most, every key checked.
    ///
    /// Returns the config when steps 1 and 2 pass (without the parts step 3 refused, so that
    /// the caller can go on checking, e.g. that the plugins it names exist), and the problems
    /// (none: the config is valid).
    pub fn check(text: &str, path: &Path) -> (Option<Config>, Vec<ConfigError>) {
        let ctx = Ctx { text, path };
        let (mut table, syntax) = toml::de::DeTable::parse_recoverable(text);
        if !syntax.is_empty() {
            let mut errors: Vec<ConfigError> = syntax.iter().map(|e| ctx.toml_error(e, String::new())).collect();
            errors.sort_by_key(|e| (e.line, e.column));
            return (None, errors);
        }
        let mut problems = Vec::new();
        let raw = loop {
            let deserializer = toml::Deserializer::from(table.clone());
            let e = match serde_path_to_error::deserialize::<_, RawFile>(deserializer) {
                Ok(raw) => break raw,
                Err(e) => e,
            };
            let (key, at) = error_key(e.path(), e.inner().message());
            let mut error = ctx.toml_error(e.inner(), key);
            error.message = with_suggestion(&error.message);
            let missing = error.message.starts_with("missing field");
            problems.push(error);
            // Take the offending key out and read again; a missing key cannot be taken out.
            if missing || problems.len() > MAX_PROBLEMS || !remove_at(table.get_mut(), &at) {
                return (None, problems);
            }
        };
        let config = ctx.build(raw, &mut problems);
        (Some(config), problems)
    }

    /// The 1-based line of rules key `key` (`defaults.burst`, `tenants[0].rules.sinks`), if the
    /// file gives it.
    pub fn key_line(&self, key: &str) -> Option<usize> {
        self.key_lines.get(key).copied()
    }

    /// Reads and parses the file at `path`.
    ///
    /// # Errors
    /// [`ConfigError`] without a line when the file cannot be read (or is not UTF-8); otherwise
    /// as [`Config::parse`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::unreadable(path, &e))?;
        Config::parse(&text, path)
    }

    /// An error at `line` (1-based) of this file about `key`, for problems found by the caller
    /// (a plugin that does not exist, a sink that cannot be opened, …).
    pub fn error_at(&self, line: usize, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: self.path.clone(),
            line: Some(line),
            column: None,
            key: key.into(),
            message: message.into(),
        }
    }

    /// An error about a plugin reference, at its line and key (for "plugin not found" and the
    /// like).
    pub fn plugin_error(&self, plugin: &PluginRef, message: impl Into<String>) -> ConfigError {
        self.error_at(plugin.line, plugin.key.clone(), message)
    }

    /// The rules of a routed event: tenant `tenant`'s (an index into [`Config::tenants`]), or the
    /// defaults for `None`.
    ///
    /// # Panics
    /// When the index is out of range.
    pub fn rules(&self, tenant: Option<usize>) -> &Rules {
        tenant.map_or(&self.defaults, |i| &self.tenants[i].rules)
    }

    /// The router of these tenants, in file order (`route` gives an index into
    /// [`Config::tenants`], `None` for the defaults).
    pub fn router(&self) -> TenantRouter {
        TenantRouter::new(self.tenants.iter().map(|t| t.matcher.clone()).collect())
    }

    /// The name of a routed event's tenant: the tenant's, or [`DEFAULT_TENANT`] for `None`.
    ///
    /// # Panics
    /// When the index is out of range.
    pub fn tenant_name(&self, tenant: Option<usize>) -> &str {
        tenant.map_or(DEFAULT_TENANT, |i| &self.tenants[i].name)
    }
}

/// The terms of a leader election ([`crate::topology::leader`]) as one layer gives them: the
/// `run --leader-elect*` flags, or the config's `[leader_election]`. A term a layer leaves unset
/// is taken from the next one, then from client-go's defaults
/// ([`LeaderElectionSettings::resolve`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderElectionSettings {
    /// Whether `run` elects at all (`--leader-elect`, `enabled`); unset in every layer: no.
    pub enabled: Option<bool>,
    /// The Lease, `NAMESPACE/NAME` or `NAME` (then in
    /// [`crate::election::default_namespace`]); unset: `eventpipe` there.
    pub lease: Option<String>,
    /// How long a Lease holds without renewal, as candidates observe it (client-go's
    /// LeaseDuration); unset: 15 s.
    pub lease_duration: Option<Duration>,
    /// How long the leader tries to renew before it steps down (client-go's RenewDeadline);
    /// unset: 10 s.
    pub renew_deadline: Option<Duration>,
    /// Interval between tries to acquire or renew (client-go's RetryPeriod); unset: 2 s.
    pub retry_period: Option<Duration>,
}

impl LeaderElectionSettings {
    /// The election's terms, each from the first layer that gives it — `flags`, then `file`
    /// (the config's `[leader_election]`), then client-go's defaults (LeaseDuration 15 s,
    /// RenewDeadline 10 s, RetryPeriod 2 s; the Lease `eventpipe` in
    /// [`crate::election::default_namespace`]); the identity is
    /// [`crate::election::default_identity`]. `None` when neither layer enables it.
    ///
    /// # Errors
    /// A `lease` that is not `NAME` or `NAMESPACE/NAME`; terms that break a rule of
    /// [`LeaderElectionConfig::validate`] (as client-go's `NewLeaderElector` checks them): the
    /// rule, then each term with the flag, key or default it came from.
    pub fn resolve(flags: &Self, file: &Self) -> Result<Option<LeaderElectionConfig>, String> {
        if !flags.enabled.or(file.enabled).unwrap_or(false) {
            return Ok(None);
        }
        let term = |flag: Option<Duration>, name: &str, key: Option<Duration>, default: Duration| match (flag, key) {
            (Some(d), _) => (d, format!("--leader-elect-{}", name.replace('_', "-"))),
            (None, Some(d)) => (d, format!("leader_election.{name}_seconds")),
            (None, None) => (default, "default".to_owned()),
        };
        let (lease_duration, lease_from) =
            term(flags.lease_duration, "lease_duration", file.lease_duration, leader::DEFAULT_LEASE_DURATION);
        let (renew_deadline, renew_from) =
            term(flags.renew_deadline, "renew_deadline", file.renew_deadline, leader::DEFAULT_RENEW_DEADLINE);
        let (retry_period, retry_from) =
            term(flags.retry_period, "retry_period", file.retry_period, leader::DEFAULT_RETRY_PERIOD);
        let (namespace, name) = match (&flags.lease, &file.lease) {
            (Some(lease), _) => lease_parts(lease).map_err(|why| format!("--leader-elect-lease: {why}"))?,
            (None, Some(lease)) => lease_parts(lease).map_err(|why| format!("leader_election.lease: {why}"))?,
            (None, None) => (None, leader::DEFAULT_LEASE_NAME),
        };
        let config = LeaderElectionConfig {
            namespace: namespace.map_or_else(leader::default_namespace, str::to_owned),
            name: name.to_owned(),
            identity: leader::default_identity(),
            lease_duration,
            renew_deadline,
            retry_period,
        };
        config.validate().map_err(|why| {
            format!(
                "{why} (lease duration {} s from {lease_from}, renew deadline {} s from {renew_from}, retry period \
                 {} s from {retry_from})",
                lease_duration.as_secs_f64(),
                renew_deadline.as_secs_f64(),
                retry_period.as_secs_f64()
            )
        })?;
        Ok(Some(config))
    }
}

/// A Lease named `NAMESPACE/NAME` or `NAME`: (the namespace if given, the name).
fn lease_parts(lease: &str) -> Result<(Option<&str>, &str), String> {
    match lease.split_once('/') {
        None if !lease.is_empty() => Ok((None, lease)),
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((Some(namespace), name))
        }
        _ => Err(format!("expected NAME or NAMESPACE/NAME, got {lease:?}")),
    }
}

// ---- the file as deserialised, before validation ----
//
// These types are also the source of the config's JSON Schema ([`json_schema`]): their doc
// comments are its descriptions.

/// `text` (the config file at `path`) with `digest = "sha256:…"` set in the `[plugins.NAME]`
/// table of each of `pins` (plugin name → digest), as a lock file records what was resolved:
/// tables are added where missing, every other key, comment and table is kept as it was.
///
/// # Errors
/// [`ConfigError`] when `text` is not a valid config, or a `plugins` or `plugins.NAME` key
/// holds something other than a table.
pub fn with_pins_written(
    text: &str,
    path: &Path,
    pins: &BTreeMap<String, Sha256Digest>,
) -> Result<String, ConfigError> {
    Config::parse(text, path)?;
    let not_a_table = |key: String| ConfigError {
        path: path.to_path_buf(),
        line: None,
        column: None,
        key,
        message: "expected a table".into(),
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|_| not_a_table(String::new()))?;
    let plugins = doc.entry("plugins").or_insert_with(|| {
        let mut table = toml_edit::Table::new();
        table.set_implicit(true);
        toml_edit::Item::Table(table)
    });
    let plugins = plugins.as_table_like_mut().ok_or_else(|| not_a_table("plugins".into()))?;
    for (name, digest) in pins {
        let table = plugins.entry(name).or_insert(toml_edit::Item::Table(toml_edit::Table::new()));
        let table = table.as_table_like_mut().ok_or_else(|| not_a_table(format!("plugins.{name}")))?;
        table.insert(DIGEST_KEY, toml_edit::value(digest.to_string()));
    }
    let written = doc.to_string();
    Config::parse(&written, path)?;
    Ok(written)
}

/// An eventpipe tenant config (TOML): `[defaults]`, `[plugins.NAME]`, `[[tenants]]`,
/// `[[watchers]]`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawFile {
    /// Rules for events no tenant matches, and the base every tenant's rules override.
    #[serde(default)]
    defaults: RawRules,
    /// Per-plugin key/value config, handed to plugin NAME through its `config` import; values
    /// are strings (numbers and booleans are passed in their string form).
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, BTreeMap<String, PluginValueSchema>>")]
    plugins: BTreeMap<String, BTreeMap<String, Spanned<PluginValue>>>,
    /// Tenants, tried in file order: the first whose `match` holds gets the event.
    #[serde(default)]
    #[schemars(with = "Vec<RawTenant>")]
    tenants: Vec<Spanned<RawTenant>>,
    /// Watcher plugins attached to the Broadcaster.
    #[serde(default)]
    #[schemars(with = "Vec<RawWatcher>")]
    watchers: Vec<Spanned<RawWatcher>>,
    /// Routes of every tenant's correlated writes: the writes a route selects also go to its
    /// sinks, besides the tenant's own.
    #[serde(default)]
    #[schemars(with = "Vec<RawRoute>")]
    routes: Vec<Spanned<RawRoute>>,
    /// Shadow plugins: plugin name → a candidate component (`.wasm`, relative to this file)
    /// run beside it on the same events, never affecting output; divergences are counted.
    #[serde(default)]
    shadow: BTreeMap<String, String>,
    /// The JSON-lines file the first divergences of shadow plugins go to, with both answers.
    shadow_diffs: Option<String>,
    /// How many divergences that file gets at most (default 100).
    #[schemars(extend("default" = 100))]
    shadow_diffs_max: Option<u64>,
    /// The watch cache behind `run --serve` (and watcher plugins of the results); the `run`
    /// flags win over these. Read at start only.
    #[serde(default)]
    watch_cache: RawWatchCache,
    /// Enrichment of events with what their involved object is part of (labels, top owner,
    /// node, cluster), from a metadata cache of the cluster; off unless a key is given (or a
    /// `run --enrich-*` / `--cluster-name` flag). The `run` flags win over these. Read at start
    /// only.
    #[serde(default)]
    enrich: RawEnrich,
    /// Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection`:
    /// `run` drives the pipeline only while it holds the Lease. The `run --leader-elect*` flags
    /// win over these. Read at start only.
    #[serde(default)]
    leader_election: RawLeaderElection,
}

/// `[leader_election]`: every key optional, its default in parentheses.
#[derive(Deserialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields)]
struct RawLeaderElection {
    /// Run the pipeline only while holding the Lease (false; `--leader-elect`, which turns it on
    /// whatever this says).
    #[schemars(extend("default" = false))]
    enabled: Option<bool>,
    /// The Lease, `NAMESPACE/NAME` or `NAME` ($POD_NAMESPACE, else the service account's
    /// namespace, else `default` / `eventpipe`; `--leader-elect-lease`).
    #[schemars(with = "Option<String>")]
    lease: Option<Spanned<String>>,
    /// How long a Lease holds without renewal, as candidates observe it, seconds, > the renew
    /// deadline (15, client-go's LeaseDuration; `--leader-elect-lease-duration`).
    #[schemars(with = "Option<f64>", extend("default" = crate::election::DEFAULT_LEASE_DURATION.as_secs()))]
    lease_duration_seconds: Option<Spanned<f64>>,
    /// How long the leader tries to renew before it steps down, seconds, > the retry period ×
    /// 1.2 (10, client-go's RenewDeadline; `--leader-elect-renew-deadline`).
    #[schemars(with = "Option<f64>", extend("default" = crate::election::DEFAULT_RENEW_DEADLINE.as_secs()))]
    renew_deadline_seconds: Option<Spanned<f64>>,
    /// Interval between tries to acquire or renew, seconds (2, client-go's RetryPeriod;
    /// `--leader-elect-retry-period`).
    #[schemars(with = "Option<f64>", extend("default" = crate::election::DEFAULT_RETRY_PERIOD.as_secs()))]
    retry_period_seconds: Option<Spanned<f64>>,
}

/// `[enrich]`: every key optional.
#[derive(Deserialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields)]
struct RawEnrich {
    /// Globs on the involved object's label keys; those matching are attached
    /// (`["app.kubernetes.io/*", "team"]`; `--enrich-labels`).
    #[schemars(with = "Option<Vec<String>>")]
    labels: Option<Spanned<Vec<String>>>,
    /// Globs on its annotation keys (`--enrich-annotations`).
    #[schemars(with = "Option<Vec<String>>")]
    annotations: Option<Spanned<Vec<String>>>,
    /// Attach the top owner, following the controller `ownerReferences` (Pod → ReplicaSet →
    /// Deployment; `--enrich-owner`).
    owner: Option<bool>,
    /// Globs on the label keys of a Pod's node (`--enrich-node-labels`).
    #[schemars(with = "Option<Vec<String>>")]
    node_labels: Option<Spanned<Vec<String>>>,
    /// The cluster's name (`--cluster-name`).
    cluster: Option<String>,
    /// The longest an event waits for its enrichment, milliseconds (100; `--enrich-wait`).
    #[schemars(extend("default" = 100))]
    wait_ms: Option<u64>,
    /// Objects each kind's cache holds at most; the least recently used go first (100000;
    /// `--enrich-max-objects`).
    #[schemars(extend("default" = crate::k8s::enrich::DEFAULT_MAX_OBJECTS))]
    max_objects: Option<usize>,
}

/// `[watch_cache]`: every key optional, its default in parentheses.
#[derive(Deserialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields)]
struct RawWatchCache {
    /// Changes kept for watchers to resume from (resourceVersions; an older one gets 410)
    /// (10000; `--watch-cache-size`).
    #[schemars(extend("default" = crate::watch_cache::DEFAULT_WINDOW_SIZE))]
    size: Option<usize>,
    /// Longest a change is kept for resuming watchers, seconds (300; `--watch-cache-age`).
    #[schemars(extend("default" = crate::watch_cache::DEFAULT_WINDOW_AGE.as_secs()))]
    age_seconds: Option<u64>,
    /// Most events held; beyond it the least recently changed one is deleted (10000;
    /// `--watch-cache-objects`).
    #[schemars(extend("default" = crate::watch_cache::DEFAULT_MAX_OBJECTS))]
    objects: Option<usize>,
    /// An event not changed for this long is deleted, seconds (3600, the apiserver's
    /// `--event-ttl`; `--event-ttl`).
    #[schemars(extend("default" = crate::watch_cache::DEFAULT_EVENT_TTL.as_secs()))]
    event_ttl_seconds: Option<u64>,
    /// Events queued towards one watch connection (100; `--watch-queue-length`).
    #[schemars(extend("default" = crate::watch_cache::DEFAULT_WATCHER_QUEUE))]
    queue_length: Option<usize>,
    /// How long a watch's full queue may wait for its client before the watch is cut off,
    /// seconds, > 0 (10; `--watch-budget`).
    #[schemars(with = "Option<f64>", extend("default" = crate::watch_cache::DEFAULT_WATCHER_BUDGET.as_secs()))]
    budget_seconds: Option<Spanned<f64>>,
    /// Interval between bookmarks of a watch that allows them, seconds, > 0 (60;
    /// `--watch-bookmark-interval`).
    #[schemars(with = "Option<f64>", extend("default" = crate::watch_cache::DEFAULT_BOOKMARK_INTERVAL.as_secs()))]
    bookmark_interval_seconds: Option<Spanned<f64>>,
}

/// A `[plugins.NAME]` value.
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, reason = "only its schema is used")]
enum PluginValueSchema {
    String(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
}

/// A watcher plugin on the Broadcaster.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawWatcher {
    /// A plugin name (embedded, like `log`, or NAME.wasm in the plugins directory) or a
    /// component file.
    #[schemars(with = "String")]
    plugin: Spanned<String>,
    /// Its own queue, events (default 1000).
    #[schemars(extend("default" = crate::watchers::DEFAULT_WATCHER_QUEUE_LENGTH))]
    queue_length: Option<usize>,
    /// What its full queue does: `drop` (DropIfChannelFull, the default) or `wait`.
    #[schemars(with = "Option<FullChannelBehaviorName>", extend("default" = "drop"))]
    full_channel_behavior: Option<Spanned<String>>,
    /// What it watches: `input` (the Broadcaster's events, the default) or `results` (the
    /// correlated events of the watch cache, with resourceVersions; turns the cache on).
    #[schemars(with = "Option<WatchOnName>", extend("default" = "input"))]
    on: Option<Spanned<String>>,
    /// With `on = "results"`: start after this resourceVersion (default: now).
    resource_version: Option<u64>,
}

#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code, reason = "only its schema is used")]
enum WatchOnName {
    Input,
    Results,
}

#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code, reason = "only its schema is used")]
enum FullChannelBehaviorName {
    Drop,
    Wait,
}

#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code, reason = "only its schema is used")]
enum FallbackName {
    Builtin,
    Drop,
    Fail,
}

#[derive(schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(dead_code, reason = "only its schema is used")]
enum PartitionKeyName {
    SourceObject,
    Namespace,
}

/// Correlation rules; every key optional (unset: `[defaults]`, then the command line, then
/// client-go's default).
#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawRules {
    /// The aggregate-key function: a plugin name, or `builtin` (client-go `EventAggregatorByReasonFunc`).
    #[schemars(with = "Option<String>", extend("default" = "builtin"))]
    aggregate_key: Option<Spanned<String>>,
    /// The message combiner: a plugin name, or `builtin` (client-go `EventAggregatorByReasonMessageFunc`).
    #[schemars(with = "Option<String>", extend("default" = "builtin"))]
    message_combiner: Option<Spanned<String>>,
    /// The spam-key function: a plugin name, or `builtin` (client-go `getSpamKey`).
    #[schemars(with = "Option<String>", extend("default" = "builtin"))]
    spam_key: Option<Spanned<String>>,
    /// Filter plugins, run in order before correlation; `[]` clears the defaults'.
    #[schemars(with = "Option<Vec<String>>")]
    filters: Option<Vec<Spanned<String>>>,
    /// client-go `maxEvents`: distinct messages per aggregate key before aggregating.
    #[schemars(extend("default" = crate::correlator::DEFAULT_AGGREGATE_MAX_EVENTS))]
    max_events: Option<i64>,
    /// client-go `maxIntervalInSeconds`: the aggregation window, seconds.
    #[schemars(extend("default" = crate::correlator::DEFAULT_AGGREGATE_INTERVAL_IN_SECONDS))]
    max_interval_seconds: Option<i64>,
    /// The spam filter's bucket, events (client-go `BurstSize`, default 25).
    #[schemars(extend("default" = crate::correlator::DEFAULT_SPAM_BURST))]
    burst: Option<i64>,
    /// The spam filter's refill, events per second (client-go `QPS`, default 1/300).
    #[schemars(with = "Option<f32>", extend("default" = 1.0f64 / 300.0))]
    qps: Option<Spanned<f32>>,
    /// Entries per correlator LRU cache (0: client-go's 4096; negative: the caches keep
    /// nothing, as client-go's).
    #[schemars(extend("default" = crate::correlator::MAX_LRU_CACHE_ENTRIES))]
    lru_cache_size: Option<i64>,
    /// Plugin fuel per event (≈ Wasm instructions).
    #[schemars(extend("default" = crate::plugin::DEFAULT_FUEL_PER_EVENT))]
    fuel_per_event: Option<u64>,
    /// Plugin linear-memory limit, bytes.
    #[schemars(extend("default" = crate::plugin::DEFAULT_MEMORY_LIMIT_BYTES))]
    memory_limit_bytes: Option<usize>,
    /// What a failed plugin call does: `builtin` (the client-go function), `drop`, or `fail`.
    #[schemars(with = "Option<FallbackName>", extend("default" = "builtin"))]
    fallback: Option<Spanned<String>>,
    /// Sinks, as `--sink` takes them (`jsonl:PATH`, `jsonl:-`, `k8s`, `k8s:NAMESPACE`,
    /// `plugin:NAME`, `webhook:URL`, `otlp:URL`, `loki:URL`, `elasticsearch:URL`, `splunk:URL`,
    /// `metrics`, each optionally followed by `,delivery=MODE`; a webhook, otlp or log-store sink
    /// also by `,concurrency=adaptive|N`, `,max_batch=N`, `,max_batch_bytes=N`, a log store by its
    /// own options (docs/log-stores.md); `metrics` by `,max_series=N`).
    #[schemars(with = "Option<Vec<String>>")]
    sinks: Option<Spanned<Vec<Spanned<String>>>>,
    /// What `run --workers` shards this tenant's events by.
    #[schemars(with = "Option<PartitionKeyName>", extend("default" = "source-object"))]
    partition_key: Option<Spanned<String>>,
    /// Events matching any of these are dropped before the filter plugins.
    #[schemars(with = "Option<Vec<RawMatch>>")]
    drop: Option<Spanned<Vec<Spanned<RawMatch>>>>,
    /// When given, events matching none of these are dropped.
    #[schemars(with = "Option<Vec<RawMatch>>")]
    keep: Option<Spanned<Vec<Spanned<RawMatch>>>>,
    /// Events matching any of these are never skipped by the spam filter.
    #[schemars(with = "Option<Vec<RawMatch>>")]
    spam_exempt: Option<Spanned<Vec<Spanned<RawMatch>>>>,
    /// Seconds of an "N events suppressed" summary window; 0: none.
    #[schemars(extend("default" = 0))]
    suppressed_summary_seconds: Option<u64>,
    /// Only in a tenant's rules: routes of this tenant's correlated writes, besides the
    /// top-level `[[routes]]`.
    #[schemars(with = "Option<Vec<RawRoute>>")]
    routes: Option<Spanned<Vec<Spanned<RawRoute>>>>,
}

/// A route: the correlated writes it selects go to its sinks too, besides the tenant's own.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    /// The label of its counters; unique in the file (default `route-<index>`).
    #[schemars(with = "Option<String>")]
    name: Option<Spanned<String>>,
    /// Which writes it selects, on the correlated event (absent: every write).
    #[serde(rename = "match")]
    #[schemars(with = "Option<RawMatch>")]
    matcher: Option<Spanned<RawMatch>>,
    /// The event count a write needs to be sent: writes of lower counts are held back.
    #[schemars(with = "Option<i64>", extend("default" = 1, "minimum" = 1))]
    min_count: Option<Spanned<i64>>,
    /// At most N writes per period, `N/s`, `N/min` or `N/h` (a token bucket of N, full at
    /// first); the writes held back are counted on the next one sent.
    #[schemars(with = "Option<String>")]
    rate: Option<Spanned<String>>,
    /// Sinks, as `--sink` takes them.
    #[schemars(with = "Vec<String>")]
    sinks: Option<Spanned<Vec<Spanned<String>>>>,
}

/// A tenant: its name, which events are its own, and its rules.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    /// Unique, not `default`.
    #[schemars(with = "String")]
    name: Spanned<String>,
    /// Which events are this tenant's: every criterion given must hold.
    #[serde(rename = "match")]
    #[schemars(with = "Option<RawMatch>")]
    matcher: Option<Spanned<RawMatch>>,
    /// Rules over `[defaults]`.
    #[serde(default)]
    rules: RawRules,
}

type SpannedList = Option<Spanned<Vec<Spanned<String>>>>;
type SpannedTable = Option<Spanned<BTreeMap<String, Spanned<String>>>>;

/// Criteria on an event (a tenant's `match`, or a drop / keep / spam_exempt rule): every
/// criterion given must hold; a list holds when any entry does.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    /// Only in rules: the label of the rule's counters (default `LIST[INDEX]`).
    #[schemars(with = "Option<String>")]
    name: Option<Spanned<String>>,
    /// Globs on `metadata.namespace` (else `involvedObject.namespace`).
    #[schemars(with = "Option<Vec<String>>")]
    namespaces: SpannedList,
    /// `involvedObject.kind`, exact.
    #[schemars(with = "Option<Vec<String>>")]
    kinds: SpannedList,
    /// Globs on `reason`.
    #[schemars(with = "Option<Vec<String>>")]
    reasons: SpannedList,
    /// `type`, exact (`Normal`, `Warning`).
    #[schemars(with = "Option<Vec<String>>")]
    types: SpannedList,
    /// A regular expression searched for in `message` (unanchored).
    #[schemars(with = "Option<String>")]
    message: Option<Spanned<String>>,
    /// Label name → value glob on the Event's own labels; all must match.
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    labels: SpannedTable,
    /// Globs on `source.component` (else `reportingComponent`).
    #[schemars(with = "Option<Vec<String>>")]
    source_components: SpannedList,
    /// Globs on `source.host` (else `reportingInstance`).
    #[schemars(with = "Option<Vec<String>>")]
    source_hosts: SpannedList,
    /// HTTP ingest request header name (case-insensitive) → value glob; all must match.
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    headers: SpannedTable,
    /// Label name → value glob on the involved object's labels, as `[enrich] labels` attached
    /// them; all must match (no enrichment: no match).
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    object_labels: SpannedTable,
    /// The kind of the top owner enrichment attached (`[enrich] owner`), exact.
    #[schemars(with = "Option<Vec<String>>")]
    owner_kinds: SpannedList,
    /// Globs on the name of the top owner enrichment attached.
    #[schemars(with = "Option<Vec<String>>")]
    owner_names: SpannedList,
}

/// The JSON Schema (draft 2020-12) of the tenant config file, derived from the types the file
/// is read into, with their documentation as descriptions: for editors (e.g. taplo / Even
/// Better TOML) to check and complete `eventpipe.toml`. What the schema cannot say (globs and
/// regexes valid, names unique, plugins existing) is checked by [`Config::parse`] and
/// `eventpipe validate`.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RawFile)).expect("a schema serialises")
}

impl RawMatch {
    fn spec(&self) -> MatchSpec {
        let list = |l: &SpannedList| l.as_ref().map(|l| l.get_ref().iter().map(|s| s.get_ref().clone()).collect());
        let table = |t: &SpannedTable| {
            t.as_ref().map(|t| t.get_ref().iter().map(|(k, v)| (k.clone(), v.get_ref().clone())).collect())
        };
        MatchSpec {
            namespaces: list(&self.namespaces),
            kinds: list(&self.kinds),
            reasons: list(&self.reasons),
            types: list(&self.types),
            message: self.message.as_ref().map(|m| m.get_ref().clone()),
            labels: table(&self.labels),
            source_components: list(&self.source_components),
            source_hosts: list(&self.source_hosts),
            headers: table(&self.headers),
            object_labels: table(&self.object_labels),
            owner_kinds: list(&self.owner_kinds),
            owner_names: list(&self.owner_names),
        }
    }

    /// Where a criterion, or one of its entries, is written.
    fn span(&self, criterion: &str, entry: Option<&MatchEntry>) -> Option<Range<usize>> {
        let list = match criterion {
            "namespaces" => &self.namespaces,
            "kinds" => &self.kinds,
            "reasons" => &self.reasons,
            "types" => &self.types,
            "message" => return self.message.as_ref().map(|m| m.span()),
            "source_components" => &self.source_components,
            "source_hosts" => &self.source_hosts,
            "owner_kinds" => &self.owner_kinds,
            "owner_names" => &self.owner_names,
            "labels" | "headers" | "object_labels" => {
                let table = match criterion {
                    "labels" => &self.labels,
                    "headers" => &self.headers,
                    _ => &self.object_labels,
                };
                let table = table.as_ref()?;
                return Some(match entry {
                    Some(MatchEntry::Key(k)) => table.get_ref().get(k)?.span(),
                    _ => table.span(),
                });
            }
            _ => return None,
        };
        let list = list.as_ref()?;
        Some(match entry {
            Some(MatchEntry::Index(i)) => list.get_ref().get(*i)?.span(),
            _ => list.span(),
        })
    }
}

/// A `[plugins.NAME]` value: a string, or a number or boolean in its string form.
struct PluginValue(String);

impl<'de> Deserialize<'de> for PluginValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = PluginValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, integer, float or boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PluginValue, E> {
                Ok(PluginValue(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<PluginValue, E> {
                Ok(PluginValue(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PluginValue, E> {
                Ok(PluginValue(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PluginValue, E> {
                Ok(PluginValue(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<PluginValue, E> {
                // `{:?}` keeps a fractional part (`1.0`, not `1`), as TOML requires of floats.
                Ok(PluginValue(format!("{v:?}")))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<PluginValue, E> {
                Ok(PluginValue(v.to_string()))
            }
        }
        deserializer.deserialize_any(V)
    }
}

// ---- validation ----

/// The text being parsed, for turning byte spans into lines and errors.
struct Ctx<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Ctx<'_> {
    /// The config of a file that read (`raw`), checking every rule of the format; each problem
    /// goes to `problems` and leaves its part out (a tenant, a `[plugins.NAME]` table, a watcher,
    /// a `[watch_cache]` key), so that the rest is still checked.
    fn build(&self, raw: RawFile, problems: &mut Vec<ConfigError>) -> Config {
        let ctx = self;
        let path = self.path;
        let defaults = ctx.rules(&raw.defaults, "defaults").unwrap_or_else(|e| {
            problems.extend(e);
            Rules::default()
        });
        let mut tenants: Vec<TenantConfig> = Vec::with_capacity(raw.tenants.len());
        let mut first_line: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, tenant) in raw.tenants.iter().enumerate() {
            let prefix = format!("tenants[{i}]");
            let t = tenant.get_ref();
            let name = t.name.get_ref();
            let name_err = |message: String| ctx.error(t.name.span(), format!("{prefix}.name"), message);
            let mut ok = true;
            if name.is_empty() {
                problems.push(name_err("tenant name must not be empty".into()));
                ok = false;
            } else if name == DEFAULT_TENANT {
                problems.push(name_err(format!(
                    "tenant name `{DEFAULT_TENANT}` is reserved for the [defaults] rules; choose another name"
                )));
                ok = false;
            } else if let Some(line) = first_line.insert(name, ctx.line(t.name.span())) {
                problems.push(name_err(format!("duplicate tenant name `{name}` (first defined on line {line})")));
                ok = false;
            }
            let matcher = ctx
                .matcher(t.matcher.as_ref(), tenant.span(), &format!("{prefix}.match"))
                .map_err(|e| problems.extend(e))
                .ok();
            let mut rules = ctx.rules(&t.rules, &format!("{prefix}.rules")).map_err(|e| problems.extend(e)).ok();
            if let Some(routes) = &t.rules.routes {
                let routes =
                    ctx.routes(routes.get_ref(), &format!("{prefix}.rules.routes"), &format!("{name}/"), problems);
                if let Some(rules) = &mut rules {
                    rules.routes = Some(routes);
                }
            }
            if let (true, Some(matcher), Some(own)) = (ok, matcher, rules) {
                let rules = own.clone().merge(&defaults, t.rules.filters.is_some());
                tenants.push(TenantConfig { name: name.clone(), matcher, rules, own });
            }
        }

        let mut routes = ctx.routes(&raw.routes, "routes", "", problems);
        // A route's name labels its counters: unique in the file.
        let mut named: BTreeMap<Arc<str>, usize> = BTreeMap::new();
        let own_routes = tenants.iter_mut().filter_map(|t| t.own.routes.as_mut());
        for list in std::iter::once(&mut routes).chain(own_routes) {
            list.retain(|r| match named.get(&r.route.name) {
                Some(line) => {
                    problems.push(ctx.error_at_line(
                        r.line,
                        format!("{}.name", r.key),
                        format!("duplicate route name `{}` (first defined on line {line})", r.route.name),
                    ));
                    false
                }
                None => {
                    named.insert(r.route.name.clone(), r.line);
                    true
                }
            });
        }
        for t in &mut tenants {
            t.rules.routes = t.own.routes.clone();
        }
        let mut plugin_config = BTreeMap::new();
        let mut pins = BTreeMap::new();
        let mut sources = BTreeMap::new();
        for (plugin, mut table) in raw.plugins {
            if let Some(digest) = table.remove(DIGEST_KEY) {
                match digest.get_ref().0.parse::<Sha256Digest>() {
                    Ok(pin) => {
                        pins.insert(plugin.clone(), pin);
                    }
                    Err(e) => {
                        problems.push(ctx.error(digest.span(), format!("plugins.{plugin}.{DIGEST_KEY}"), e.to_string()))
                    }
                }
            }
            if let Some(source) = table.remove(SOURCE_KEY) {
                let key = format!("plugins.{plugin}.{SOURCE_KEY}");
                match source.get_ref().0.parse::<OciReference>() {
                    Ok(reference) if reference.digest().is_none() => problems.push(ctx.error(
                        source.span(),
                        key,
                        "expected the manifest's digest: oci://…@sha256:HEX",
                    )),
                    Ok(reference) => {
                        sources.insert(plugin.clone(), reference);
                    }
                    Err(e) => problems.push(ctx.error(source.span(), key, e.to_string())),
                }
            }
            if let Some(pure) = table.get(PURE_KEY)
                && !matches!(pure.get_ref().0.as_str(), "true" | "false")
            {
                problems.push(ctx.error(
                    pure.span(),
                    format!("plugins.{plugin}.{PURE_KEY}"),
                    format!("expected `true` or `false`, got `{}`", pure.get_ref().0),
                ));
                continue;
            }
            if let Some(max) = table.get(MEMO_MAX_ENTRIES_KEY)
                && let Err(why) = parse_memo_max_entries(&max.get_ref().0)
            {
                problems.push(ctx.error(max.span(), format!("plugins.{plugin}.{MEMO_MAX_ENTRIES_KEY}"), why));
                continue;
            }
            plugin_config.insert(plugin, table.into_iter().map(|(k, v)| (k, v.into_inner().0)).collect());
        }
        let mut watchers = Vec::with_capacity(raw.watchers.len());
        for (i, w) in raw.watchers.iter().enumerate() {
            match ctx.watcher(w.get_ref(), i) {
                Ok(spec) => watchers.push(spec),
                Err(e) => problems.push(e),
            }
        }
        let here = |file: &str| {
            let file = PathBuf::from(file);
            match path.parent() {
                Some(dir) if file.is_relative() => dir.join(file),
                _ => file,
            }
        };
        let shadows = raw.shadow.iter().map(|(name, file)| (name.clone(), here(file))).collect();
        let shadow_diffs = raw.shadow_diffs.as_deref().map(here);
        let cache = &raw.watch_cache;
        let mut seconds = |key: &str, value: &Option<Spanned<f64>>| match value {
            Some(v) if !(v.get_ref().is_finite() && *v.get_ref() > 0.0) => {
                problems.push(ctx.error(
                    v.span(),
                    format!("watch_cache.{key}"),
                    format!("expected a positive number of seconds, got {}", v.get_ref()),
                ));
                None
            }
            v => v.as_ref().map(|v| *v.get_ref()),
        };
        let budget_seconds = seconds("budget_seconds", &cache.budget_seconds);
        let bookmark_interval_seconds = seconds("bookmark_interval_seconds", &cache.bookmark_interval_seconds);
        let watch_cache = crate::watch_cache::WatchCacheSettings {
            size: cache.size,
            age_seconds: cache.age_seconds,
            objects: cache.objects,
            event_ttl_seconds: cache.event_ttl_seconds,
            queue_length: cache.queue_length,
            budget_seconds,
            bookmark_interval_seconds,
        };
        let enrich = &raw.enrich;
        let mut globs = |key: &'static str, list: &Option<Spanned<Vec<String>>>| match list {
            Some(l) => match crate::k8s::enrich::glob_set(key, l.get_ref()) {
                Ok(_) => Some(l.get_ref().clone()),
                Err(e) => {
                    problems.push(ctx.error(
                        l.span(),
                        format!("enrich.{key}"),
                        format!("{:?}: {}", e.pattern, e.error),
                    ));
                    None
                }
            },
            None => None,
        };
        let enrich = crate::k8s::enrich::EnrichSettings {
            labels: globs("labels", &enrich.labels),
            annotations: globs("annotations", &enrich.annotations),
            owner: enrich.owner,
            node_labels: globs("node_labels", &enrich.node_labels),
            cluster: enrich.cluster.clone(),
            wait: enrich.wait_ms.map(std::time::Duration::from_millis),
            max_objects: enrich.max_objects,
        };
        let leader_election = ctx.leader_election(&raw.leader_election, problems);
        Config {
            path: path.to_path_buf(),
            defaults,
            tenants,
            plugin_config,
            pins,
            sources,
            watchers,
            routes,
            shadows,
            shadow_diffs,
            shadow_diffs_max: raw.shadow_diffs_max,
            watch_cache,
            enrich,
            leader_election,
            key_lines: ctx.key_lines(),
        }
    }

    /// `[leader_election]`: each key that breaks a rule goes to `problems` and is left unset.
    fn leader_election(&self, raw: &RawLeaderElection, problems: &mut Vec<ConfigError>) -> LeaderElectionSettings {
        let mut seconds = |key: &str, value: &Option<Spanned<f64>>| match value {
            Some(v) if !(v.get_ref().is_finite() && *v.get_ref() > 0.0) => {
                problems.push(self.error(
                    v.span(),
                    format!("leader_election.{key}"),
                    format!("expected a positive number of seconds, got {}", v.get_ref()),
                ));
                None
            }
            Some(v) => Duration::try_from_secs_f64(*v.get_ref()).ok().map(|d| (d, v.span())),
            None => None,
        };
        let lease_duration = seconds("lease_duration_seconds", &raw.lease_duration_seconds);
        let mut renew_deadline = seconds("renew_deadline_seconds", &raw.renew_deadline_seconds);
        let retry_period = seconds("retry_period_seconds", &raw.retry_period_seconds);
        // The order of the terms the file gives, as client-go's NewLeaderElector checks it.
        if let (Some((lease, _)), Some((renew, span))) = (&lease_duration, &renew_deadline)
            && renew >= lease
        {
            problems.push(self.error(
                span.clone(),
                "leader_election.renew_deadline_seconds".into(),
                format!(
                    "must be less than lease_duration_seconds ({} s): the leader steps down before its Lease \
                     can expire for the others",
                    lease.as_secs_f64()
                ),
            ));
            renew_deadline = None;
        }
        if let (Some((renew, span)), Some((retry, _))) = (&renew_deadline, &retry_period)
            && renew.as_secs_f64() <= JITTER_FACTOR * retry.as_secs_f64()
        {
            problems.push(self.error(
                span.clone(),
                "leader_election.renew_deadline_seconds".into(),
                format!(
                    "must be greater than retry_period_seconds × {JITTER_FACTOR} ({} s)",
                    JITTER_FACTOR * retry.as_secs_f64()
                ),
            ));
            renew_deadline = None;
        }
        let lease = match &raw.lease {
            Some(l) => match lease_parts(l.get_ref()) {
                Ok(_) => Some(l.get_ref().clone()),
                Err(why) => {
                    problems.push(self.error(l.span(), "leader_election.lease".into(), why));
                    None
                }
            },
            None => None,
        };
        LeaderElectionSettings {
            enabled: raw.enabled,
            lease,
            lease_duration: lease_duration.map(|(d, _)| d),
            renew_deadline: renew_deadline.map(|(d, _)| d),
            retry_period: retry_period.map(|(d, _)| d),
        }
    }

    /// A `[[watchers]]` entry (the `i`th).
    fn watcher(&self, w: &RawWatcher, i: usize) -> Result<WatcherSpec, ConfigError> {
        let mut spec = WatcherSpec::new(w.plugin.get_ref().clone());
        if spec.plugin.is_empty() {
            return Err(self.error(w.plugin.span(), format!("watchers[{i}].plugin"), "must not be empty"));
        }
        if let Some(n) = w.queue_length {
            spec.queue_length = n;
        }
        if let Some(b) = &w.full_channel_behavior {
            spec.full_channel_behavior = match b.get_ref().as_str() {
                "drop" => FullChannelBehavior::DropIfChannelFull,
                "wait" => FullChannelBehavior::WaitIfChannelFull,
                other => {
                    return Err(self.error(
                        b.span(),
                        format!("watchers[{i}].full_channel_behavior"),
                        format!("expected `drop` or `wait`, got `{other}`"),
                    ));
                }
            };
        }
        if let Some(on) = &w.on {
            spec.on = match on.get_ref().as_str() {
                "input" => crate::watchers::WatchOn::Input,
                "results" => crate::watchers::WatchOn::Results,
                other => {
                    return Err(self.error(
                        on.span(),
                        format!("watchers[{i}].on"),
                        format!("expected `input` or `results`, got `{other}`"),
                    ));
                }
            };
        }
        spec.resource_version = w.resource_version;
        Ok(spec)
    }

    /// 1-based line and column (in characters) of byte `offset`.
    fn line_col(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
    }

    fn line(&self, span: Range<usize>) -> usize {
        self.line_col(span.start).0
    }

    /// The line of every key of `[defaults]` and of each tenant's `rules` (the file parsed
    /// already, so a syntax error here leaves the map empty).
    fn key_lines(&self) -> BTreeMap<String, usize> {
        use toml::de::{DeTable, DeValue};
        let mut lines = BTreeMap::new();
        let Ok(root) = DeTable::parse(self.text) else { return lines };
        let mut matches = Vec::new();
        let mut add = |prefix: &str, table: &DeTable<'_>| {
            for (key, _) in table.iter() {
                lines.insert(format!("{prefix}.{}", key.get_ref()), self.line(key.span()));
            }
        };
        for (key, value) in root.get_ref().iter() {
            match (key.get_ref().as_ref(), value.get_ref()) {
                ("defaults", DeValue::Table(table)) => add("defaults", table),
                ("tenants", DeValue::Array(tenants)) => {
                    for (i, tenant) in tenants.iter().enumerate() {
                        if let DeValue::Table(table) = tenant.get_ref()
                            && let Some((key, _)) = table.get_key_value("match")
                        {
                            matches.push((i, self.line(key.span())));
                        }
                        if let DeValue::Table(tenant) = tenant.get_ref()
                            && let Some(rules) = tenant.get("rules")
                            && let DeValue::Table(rules) = rules.get_ref()
                        {
                            add(&format!("tenants[{i}].rules"), rules);
                        }
                    }
                }
                _ => {}
            }
        }
        lines.extend(matches.into_iter().map(|(i, line)| (format!("tenants[{i}].match"), line)));
        lines
    }

    /// An error at the start of `line` (1-based).
    fn error_at_line(&self, line: usize, key: String, message: impl Into<String>) -> ConfigError {
        ConfigError { path: self.path.to_path_buf(), line: Some(line), column: None, key, message: message.into() }
    }

    fn error(&self, span: Range<usize>, key: String, message: impl Into<String>) -> ConfigError {
        let (line, column) = self.line_col(span.start);
        ConfigError {
            path: self.path.to_path_buf(),
            line: Some(line),
            column: Some(column),
            key,
            message: message.into(),
        }
    }

    fn toml_error(&self, e: &toml::de::Error, key: String) -> ConfigError {
        let (line, column) = e.span().map(|s| self.line_col(s.start)).unzip();
        ConfigError { path: self.path.to_path_buf(), line, column, key, message: e.message().trim_end().to_string() }
    }

    fn plugin(&self, name: &Spanned<String>, key: String, filter: bool) -> Result<PluginRef, ConfigError> {
        if name.get_ref().is_empty() {
            return Err(self.error(name.span(), key, "plugin name must not be empty"));
        }
        if filter && name.get_ref() == BUILTIN {
            return Err(self.error(name.span(), key, format!("`{BUILTIN}` is not a filter plugin")));
        }
        Ok(PluginRef { name: name.get_ref().clone(), line: self.line(name.span()), key })
    }

    /// A `[defaults]` or tenant `rules` table, every key checked; `Err`: each key's problem.
    fn rules(&self, raw: &RawRules, prefix: &str) -> Result<Rules, Vec<ConfigError>> {
        let mut problems = Vec::new();
        let key = |k: &str| format!("{prefix}.{k}");
        let mut plugin = |name: &Option<Spanned<String>>, k: &str| {
            name.as_ref().and_then(|n| self.plugin(n, key(k), false).map_err(|e| problems.push(e)).ok())
        };
        let aggregate_key = plugin(&raw.aggregate_key, "aggregate_key");
        let message_combiner = plugin(&raw.message_combiner, "message_combiner");
        let spam_key = plugin(&raw.spam_key, "spam_key");
        let filters = raw
            .filters
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, f)| {
                self.plugin(f, format!("{prefix}.filters[{i}]"), true).map_err(|e| problems.push(e)).ok()
            })
            .collect();
        if let Some(qps) = &raw.qps
            && qps.get_ref().is_nan()
        {
            problems.push(self.error(qps.span(), key("qps"), "must be a number, not nan"));
        }
        let fallback = raw.fallback.as_ref().and_then(|f| {
            f.get_ref()
                .parse::<FallbackPolicy>()
                .map_err(|e| problems.push(self.error(f.span(), key("fallback"), e)))
                .ok()
        });
        let partition_key = raw.partition_key.as_ref().and_then(|p| {
            <PartitionKey as clap::ValueEnum>::from_str(p.get_ref(), false)
                .map_err(|_| {
                    problems.push(self.error(
                        p.span(),
                        key("partition_key"),
                        format!("expected `source-object` or `namespace`, got `{}`", p.get_ref()),
                    ))
                })
                .ok()
        });
        let sinks = raw.sinks.as_ref().map(|sinks| {
            if sinks.get_ref().is_empty() {
                problems.push(self.error(
                    sinks.span(),
                    key("sinks"),
                    "an empty list sends events nowhere; give at least one sink or remove the key",
                ));
            }
            sinks
                .get_ref()
                .iter()
                .enumerate()
                .filter_map(|(i, s)| match s.get_ref().parse::<crate::sink::SinkEntry>() {
                    Ok(_) => Some(s.get_ref().clone()),
                    Err(e) => {
                        problems.push(self.error(
                            s.span(),
                            format!("{prefix}.sinks[{i}]"),
                            format!("invalid sink {e}"),
                        ));
                        None
                    }
                })
                .collect()
        });
        let mut list =
            |list: &str, value| self.event_rules(value, prefix, list).map_err(|e| problems.extend(e)).ok().flatten();
        let drop = list("drop", raw.drop.as_ref());
        let keep = list("keep", raw.keep.as_ref());
        let spam_exempt = list("spam_exempt", raw.spam_exempt.as_ref());
        if let (Some(routes), "defaults") = (&raw.routes, prefix) {
            problems.push(self.error(
                routes.span(),
                key("routes"),
                "[defaults] has no routes: routes for every tenant are top-level [[routes]] tables",
            ));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Rules {
            aggregate_key,
            message_combiner,
            spam_key,
            filters,
            filters_listed: raw.filters.is_some(),
            max_events: raw.max_events,
            max_interval_seconds: raw.max_interval_seconds,
            burst: raw.burst,
            qps: raw.qps.as_ref().map(|q| *q.get_ref()),
            lru_cache_size: raw.lru_cache_size,
            fuel_per_event: raw.fuel_per_event,
            memory_limit_bytes: raw.memory_limit_bytes,
            fallback,
            sinks,
            partition_key,
            drop,
            keep,
            spam_exempt,
            suppressed_summary_seconds: raw.suppressed_summary_seconds,
            // Read apart ([`Ctx::routes`]): their default names are the tenant's.
            routes: None,
        })
    }

    /// A list of routes (`prefix`: its key path, `routes` or `tenants[0].rules.routes`), each
    /// checked; a route with a problem goes to `problems` and is left out. A route without a
    /// `name` is `{default_prefix}route-{index}`.
    fn routes(
        &self,
        raw: &[Spanned<RawRoute>],
        prefix: &str,
        default_prefix: &str,
        problems: &mut Vec<ConfigError>,
    ) -> Vec<RouteConfig> {
        let mut routes = Vec::with_capacity(raw.len());
        for (i, entry) in raw.iter().enumerate() {
            let key = format!("{prefix}[{i}]");
            let r = entry.get_ref();
            let before = problems.len();
            let name = match &r.name {
                Some(n) if n.get_ref().trim().is_empty() => {
                    problems.push(self.error(n.span(), format!("{key}.name"), "must not be empty"));
                    String::new()
                }
                Some(n) => n.get_ref().clone(),
                None => format!("{default_prefix}{}", crate::tenant::routes::default_name(i)),
            };
            let matcher = match &r.matcher {
                Some(m) if m.get_ref().name.is_some() => {
                    let span = m.get_ref().name.as_ref().map_or_else(|| m.span(), |n| n.span());
                    problems.push(self.error(
                        span,
                        format!("{key}.match.name"),
                        "a route's `match` has no `name` (the route has one)",
                    ));
                    None
                }
                Some(m) => self.compile_match(m, &format!("{key}.match")).map_err(|e| problems.extend(e)).ok(),
                None => None,
            };
            let min_count = match &r.min_count {
                Some(n) => match i32::try_from(*n.get_ref()) {
                    Ok(n) if n >= 1 => n,
                    _ => {
                        problems.push(self.error(
                            n.span(),
                            format!("{key}.min_count"),
                            format!("expected a count from 1 to {}, got {}", i32::MAX, n.get_ref()),
                        ));
                        1
                    }
                },
                None => 1,
            };
            let rate = r.rate.as_ref().and_then(|rate| {
                rate.get_ref()
                    .parse::<Rate>()
                    .map_err(|e| problems.push(self.error(rate.span(), format!("{key}.rate"), e.to_string())))
                    .ok()
            });
            let sinks: Vec<String> = match &r.sinks {
                None => {
                    problems.push(self.error(entry.span(), format!("{key}.sinks"), "a route needs `sinks`"));
                    Vec::new()
                }
                Some(sinks) if sinks.get_ref().is_empty() => {
                    problems.push(self.error(
                        sinks.span(),
                        format!("{key}.sinks"),
                        "an empty list sends the route's writes nowhere; give at least one sink",
                    ));
                    Vec::new()
                }
                Some(sinks) => sinks
                    .get_ref()
                    .iter()
                    .enumerate()
                    .filter_map(|(j, s)| match s.get_ref().parse::<crate::sink::SinkEntry>() {
                        Ok(_) => Some(s.get_ref().clone()),
                        Err(e) => {
                            problems.push(self.error(
                                s.span(),
                                format!("{key}.sinks[{j}]"),
                                format!("invalid sink {e}"),
                            ));
                            None
                        }
                    })
                    .collect(),
            };
            if problems.len() > before {
                continue;
            }
            let route = Route { name: name.into(), matcher, min_count, rate, sinks };
            routes.push(RouteConfig { key, line: self.line(entry.span()), route });
        }
        routes
    }

    /// Compiles a `drop` / `keep` / `spam_exempt` list: each entry a matcher, named by its
    /// `name` or `LIST[INDEX]`; names unique within the list; `keep = []` refused (it would drop
    /// every event). Every entry's problems are reported.
    fn event_rules(
        &self,
        raw: Option<&Spanned<Vec<Spanned<RawMatch>>>>,
        prefix: &str,
        list: &str,
    ) -> Result<Option<Vec<EventRule>>, Vec<ConfigError>> {
        let Some(raw) = raw else { return Ok(None) };
        if list == "keep" && raw.get_ref().is_empty() {
            return Err(vec![self.error(
                raw.span(),
                format!("{prefix}.keep"),
                "an empty list keeps nothing and would drop every event; give at least one rule or remove the key",
            )]);
        }
        let mut rules: Vec<EventRule> = Vec::with_capacity(raw.get_ref().len());
        let mut problems = Vec::new();
        for (i, entry) in raw.get_ref().iter().enumerate() {
            let key = format!("{prefix}.{list}[{i}]");
            let name = match &entry.get_ref().name {
                Some(n) if n.get_ref().is_empty() => {
                    problems.push(self.error(n.span(), format!("{key}.name"), "must not be empty"));
                    continue;
                }
                Some(n) if rules.iter().any(|r| *r.name == **n.get_ref()) => {
                    problems.push(self.error(
                        n.span(),
                        format!("{key}.name"),
                        format!("duplicate rule name `{}` in `{list}`", n.get_ref()),
                    ));
                    continue;
                }
                Some(n) => n.get_ref().as_str().into(),
                None => format!("{list}[{i}]").into(),
            };
            match self.compile_match(entry, &key) {
                Ok(matcher) => rules.push(EventRule { name, matcher }),
                Err(e) => problems.extend(e),
            }
        }
        if problems.is_empty() { Ok(Some(rules)) } else { Err(problems) }
    }

    /// Compiles a tenant's `match`; `tenant_span` places the error when `match` is absent.
    fn matcher(
        &self,
        raw: Option<&Spanned<RawMatch>>,
        tenant_span: Range<usize>,
        prefix: &str,
    ) -> Result<EventMatch, Vec<ConfigError>> {
        let no_criteria = MatchError::NoCriteria.to_string();
        let Some(raw) = raw else { return Err(vec![self.error(tenant_span, prefix.to_string(), no_criteria)]) };
        if let Some(name) = &raw.get_ref().name {
            return Err(vec![self.error(
                name.span(),
                format!("{prefix}.name"),
                "a tenant's `match` has no `name` (the tenant has one; `name` is for drop / keep / spam_exempt rules)",
            )]);
        }
        self.compile_match(raw, prefix)
    }

    /// Compiles a matcher; every problem of every criterion (and entry) is reported, each naming
    /// the criterion and entry at fault.
    fn compile_match(&self, raw: &Spanned<RawMatch>, prefix: &str) -> Result<EventMatch, Vec<ConfigError>> {
        let problem = |e: MatchError| {
            let Some((criterion, entry)) = e.location() else {
                return self.error(raw.span(), prefix.to_string(), e.to_string());
            };
            let mut key = format!("{prefix}.{criterion}");
            match entry {
                Some(MatchEntry::Index(i)) => key.push_str(&format!("[{i}]")),
                Some(MatchEntry::Key(k)) => push_key(&mut key, k),
                None => {}
            }
            let span = raw.get_ref().span(criterion, entry).unwrap_or_else(|| raw.span());
            let message = match &e {
                MatchError::Glob { pattern, reason, .. } => format!("invalid glob {pattern:?}: {reason}"),
                MatchError::Regex { .. } => e.to_string(),
                _ => format!("empty: it would match nothing; give at least one entry or remove `{criterion}`"),
            };
            self.error(span, key, message)
        };
        EventMatch::compile(raw.get_ref().spec()).map_err(|problems| problems.into_iter().map(problem).collect())
    }
}

/// Appends `.key` to a key path, quoting keys that are not bare TOML keys.
fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        path.push_str(key);
    } else {
        path.push_str(&format!("{key:?}"));
    }
}

/// The key path of a deserialisation error: `tenants[1].rules.max_events`, ending with the
/// unknown field itself for an unknown-field error.
fn key_path(path: &serde_path_to_error::Path, message: &str) -> String {
    let mut out = String::new();
    let mut last_key = None;
    for segment in path {
        match segment {
            serde_path_to_error::Segment::Seq { index } => {
                out.push_str(&format!("[{index}]"));
                last_key = None;
            }
            serde_path_to_error::Segment::Map { key } | serde_path_to_error::Segment::Enum { variant: key } => {
                // `Spanned` is deserialised as a struct with private field names.
                if !key.starts_with("$__serde_spanned_private") {
                    push_key(&mut out, key);
                    last_key = Some(key.as_str());
                }
            }
            serde_path_to_error::Segment::Unknown => {
                push_key(&mut out, "?");
                last_key = None;
            }
        }
    }
    if let Some(rest) = message.strip_prefix("unknown field `")
        && let Some((field, _)) = rest.split_once('`')
        && last_key != Some(field)
    {
        push_key(&mut out, field);
    }
    out
}

/// Problems [`Config::check`] lists at most from the reading step (each one costs a new read of
/// the document).
const MAX_PROBLEMS: usize = 100;

/// One step of a key path into the TOML document.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// The key path of a deserialisation error (as [`key_path`]) and the steps to the offending
/// value (for an unknown field, the field itself).
fn error_key(path: &serde_path_to_error::Path, message: &str) -> (String, Vec<Step>) {
    let mut steps = Vec::new();
    for segment in path {
        match segment {
            serde_path_to_error::Segment::Seq { index } => steps.push(Step::Index(*index)),
            serde_path_to_error::Segment::Map { key } | serde_path_to_error::Segment::Enum { variant: key } => {
                if !key.starts_with("$__serde_spanned_private") {
                    steps.push(Step::Key(key.clone()));
                }
            }
            serde_path_to_error::Segment::Unknown => steps.push(Step::Key("?".into())),
        }
    }
    if let Some(rest) = message.strip_prefix("unknown field `")
        && let Some((field, _)) = rest.split_once('`')
        && steps.last() != Some(&Step::Key(field.to_string()))
    {
        steps.push(Step::Key(field.to_string()));
    }
    (key_path(path, message), steps)
}

/// Takes the value at `steps` out of `table`; `false` when there is none.
fn remove_at(table: &mut toml::de::DeTable<'_>, steps: &[Step]) -> bool {
    let Some((last, parents)) = steps.split_last() else { return false };
    let mut value: Option<&mut toml::de::DeValue<'_>> = None;
    for step in parents {
        let next = match (value, step) {
            (None, Step::Key(k)) => table.get_mut(k.as_str()),
            (Some(toml::de::DeValue::Table(t)), Step::Key(k)) => t.get_mut(k.as_str()),
            (Some(toml::de::DeValue::Array(a)), Step::Index(i)) => a.get_mut(*i),
            _ => None,
        };
        let Some(next) = next else { return false };
        value = Some(next.get_mut());
    }
    match (value, last) {
        (None, Step::Key(k)) => table.remove(k.as_str()).is_some(),
        (Some(toml::de::DeValue::Table(t)), Step::Key(k)) => t.remove(k.as_str()).is_some(),
        (Some(toml::de::DeValue::Array(a)), Step::Index(i)) if *i < a.len() => {
            let mut kept = toml::de::DeArray::new();
            for (j, item) in a.iter().enumerate() {
                if j != *i {
                    kept.push(item.clone());
                }
            }
            *a = kept;
            true
        }
        _ => false,
    }
}

/// For an unknown field close to one the table has (serde's `unknown field `x`, expected one of
/// `a`, `b``; by Jaro-Winkler similarity ≥ 0.8, as plugin names are suggested), `unknown field
/// `x`; did you mean `a`?` instead of the list; otherwise `message`.
fn with_suggestion(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else { return message.to_string() };
    let Some((field, expected)) = rest.split_once('`') else { return message.to_string() };
    match crate::suggest::closest(field, expected.split('`').skip(1).step_by(2)) {
        Some(known) => format!("unknown field `{field}`; did you mean `{known}`?"),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;

    #[test]
    fn check_lists_every_problem_of_a_file() {
        let text = "[defaults]\nburst = \"many\"\nmax_evnts = 5\nqps = nan\nfallback = \"nope\"\n\n[[tenants]]\nname = \"default\"\nmatch = { namespaces = [\"a\"] }\n\n[[watchers]]\nplugin = \"log\"\non = \"everything\"\n";
        let (config, problems) = Config::check(text, Path::new("t.toml"));
        let found: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            [
                "t.toml:2:9: defaults.burst: invalid type: string \"many\", expected i64",
                "t.toml:3:1: defaults.max_evnts: unknown field `max_evnts`; did you mean `max_events`?",
                "t.toml:4:7: defaults.qps: must be a number, not nan",
                "t.toml:5:12: defaults.fallback: unknown fallback policy \"nope\" (expected builtin, drop or fail)",
                "t.toml:8:8: tenants[0].name: tenant name `default` is reserved for the [defaults] rules; choose another name",
                "t.toml:13:6: watchers[0].on: expected `input` or `results`, got `everything`",
            ]
        );
        // What passed is still there for further checks.
        assert!(config.is_some_and(|c| c.tenants.is_empty() && c.watchers.is_empty()));
        // The first problem is what `parse` reports.
        assert_eq!(Config::parse(text, Path::new("t.toml")).unwrap_err().to_string(), found[0]);
        // A syntax error stops there, every one listed in file order.
        let (config, problems) = Config::check("a = \nb = [1\nc = 2\n", Path::new("t.toml"));
        assert!(config.is_none() && problems.len() >= 2, "{problems:?}");
        assert!(problems.windows(2).all(|p| p[0].line <= p[1].line), "{problems:?}");
    }

    /// The example in this module's documentation, so that it cannot go stale.
    fn doc_example() -> String {
        let source = include_str!("config.rs");
        let mut lines = source.lines().skip_while(|l| *l != "//! ```toml").skip(1);
        let mut out = String::new();
        for line in lines.by_ref().take_while(|l| *l != "//! ```") {
            out.push_str(line.strip_prefix("//!").unwrap().strip_prefix(' ').unwrap_or(""));
            out.push('\n');
        }
        assert!(out.contains("[[tenants]]"), "example not found");
        out
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("eventpipe.toml"))
    }

    fn err(text: &str) -> ConfigError {
        match parse(text) {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => e,
        }
    }

    /// Asserts the error's line and key, and that its message contains `needle`.
    #[track_caller]
    fn assert_err(text: &str, line: usize, key: &str, needle: &str) {
        let e = err(text);
        assert_eq!((e.line, e.key.as_str()), (Some(line), key), "{e}");
        assert!(e.message.contains(needle), "{e}");
        assert_eq!(e.path, Path::new("eventpipe.toml"));
    }

    /// `[watch_cache]` gives the watch cache's settings (absent keys stay unset, for the flags
    /// or the defaults); a budget or bookmark interval must be a positive number of seconds.
    #[test]
    fn the_watch_cache_table_gives_its_settings() {
        let c = parse("[watch_cache]\nsize = 50\nevent_ttl_seconds = 120\nbudget_seconds = 0.5\n").unwrap();
        let expected = crate::watch_cache::WatchCacheSettings {
            size: Some(50),
            event_ttl_seconds: Some(120),
            budget_seconds: Some(0.5),
            ..Default::default()
        };
        assert_eq!(c.watch_cache, expected);
        assert_eq!(parse("").unwrap().watch_cache, crate::watch_cache::WatchCacheSettings::default());
        assert_err(
            "[watch_cache]\nbudget_seconds = 0\n",
            2,
            "watch_cache.budget_seconds",
            "positive number of seconds",
        );
        assert_err(
            "[watch_cache]\nsize = 1\nbookmark_interval_seconds = -1.5\n",
            3,
            "watch_cache.bookmark_interval_seconds",
            "got -1.5",
        );
        assert_err("[watch_cache]\nwindow = 3\n", 2, "watch_cache.window", "unknown field");
    }

    /// `[leader_election]` gives the election's terms (absent keys stay unset, for the flags or
    /// the defaults); seconds must be positive, the terms the file gives in client-go's order,
    /// and the Lease `NAME` or `NAMESPACE/NAME`.
    #[test]
    fn the_leader_election_table_gives_its_terms() {
        let c = parse(
            "[leader_election]\nenabled = true\nlease = \"ops/ep\"\nlease_duration_seconds = 30\nretry_period_seconds = 0.5\n",
        )
        .unwrap();
        let expected = LeaderElectionSettings {
            enabled: Some(true),
            lease: Some("ops/ep".into()),
            lease_duration: Some(Duration::from_secs(30)),
            renew_deadline: None,
            retry_period: Some(Duration::from_millis(500)),
        };
        assert_eq!(c.leader_election, expected);
        assert_eq!(parse("").unwrap().leader_election, LeaderElectionSettings::default());
        assert_err(
            "[leader_election]\nlease_duration_seconds = 15\nrenew_deadline_seconds = 15\n",
            3,
            "leader_election.renew_deadline_seconds",
            "must be less than lease_duration_seconds (15 s)",
        );
        assert_err(
            "[leader_election]\nrenew_deadline_seconds = 2.4\nretry_period_seconds = 2\n",
            2,
            "leader_election.renew_deadline_seconds",
            "greater than retry_period_seconds × 1.2",
        );
        assert_err(
            "[leader_election]\nretry_period_seconds = 0\n",
            2,
            "leader_election.retry_period_seconds",
            "positive number of seconds, got 0",
        );
        assert_err("[leader_election]\nlease = \"a/b/c\"\n", 2, "leader_election.lease", "NAMESPACE/NAME");
        assert_err("[leader_election]\nlease = \"/ep\"\n", 2, "leader_election.lease", "NAMESPACE/NAME");
        assert_err("[leader_election]\nlease_duration = 3\n", 2, "leader_election.lease_duration", "unknown field");
    }

    /// Each term comes from the flags, else the config, else client-go's default; election is on
    /// when either layer turns it on.
    #[test]
    fn leader_election_flags_win_over_the_config_and_the_config_over_the_defaults() {
        let none = LeaderElectionSettings::default();
        assert!(LeaderElectionSettings::resolve(&none, &none).unwrap().is_none());
        let off = LeaderElectionSettings { enabled: Some(false), ..Default::default() };
        assert!(LeaderElectionSettings::resolve(&off, &none).unwrap().is_none());

        let file = parse(
            "[leader_election]\nenabled = true\nlease = \"ops/from-file\"\nlease_duration_seconds = 30\nrenew_deadline_seconds = 20\n",
        )
        .unwrap()
        .leader_election;
        // The config alone: its terms, the defaults for the rest.
        let c = LeaderElectionSettings::resolve(&none, &file).unwrap().expect("the config turns election on");
        assert_eq!((c.namespace.as_str(), c.name.as_str()), ("ops", "from-file"));
        assert_eq!(c.lease_duration, Duration::from_secs(30));
        assert_eq!(c.renew_deadline, Duration::from_secs(20));
        assert_eq!(c.retry_period, leader::DEFAULT_RETRY_PERIOD);
        assert!(!c.identity.is_empty());

        // The flags win, term by term.
        let flags = LeaderElectionSettings {
            enabled: Some(true),
            lease: Some("flagged".into()),
            renew_deadline: Some(Duration::from_secs(12)),
            ..Default::default()
        };
        let c = LeaderElectionSettings::resolve(&flags, &file).unwrap().unwrap();
        assert_eq!(c.name, "flagged");
        assert_eq!(c.namespace, leader::default_namespace());
        assert_eq!((c.lease_duration, c.renew_deadline), (Duration::from_secs(30), Duration::from_secs(12)));
        // `enabled = false` in the file does not stop `--leader-elect`.
        let c =
            LeaderElectionSettings::resolve(&flags, &LeaderElectionSettings { enabled: Some(false), ..file.clone() });
        assert!(c.unwrap().is_some());

        // No layer: client-go's defaults.
        let c = LeaderElectionSettings::resolve(
            &LeaderElectionSettings { enabled: Some(true), ..Default::default() },
            &none,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (c.name.as_str(), c.lease_duration, c.renew_deadline, c.retry_period),
            (
                leader::DEFAULT_LEASE_NAME,
                leader::DEFAULT_LEASE_DURATION,
                leader::DEFAULT_RENEW_DEADLINE,
                leader::DEFAULT_RETRY_PERIOD
            )
        );
    }

    /// Terms that only break client-go's rules together (a flag against the config's or a
    /// default) are refused when `run` resolves them, naming where each came from.
    #[test]
    fn leader_election_terms_that_break_client_gos_rules_together_are_refused() {
        let file = parse("[leader_election]\nenabled = true\nrenew_deadline_seconds = 20\n").unwrap().leader_election;
        let why = LeaderElectionSettings::resolve(&LeaderElectionSettings::default(), &file).unwrap_err();
        assert!(why.contains("the lease duration (15s) must be greater than the renew deadline (20s)"), "{why}");
        assert!(why.contains("lease duration 15 s from default"), "{why}");
        assert!(why.contains("renew deadline 20 s from leader_election.renew_deadline_seconds"), "{why}");

        let flags = LeaderElectionSettings { lease_duration: Some(Duration::from_secs(10)), ..Default::default() };
        let file = LeaderElectionSettings { enabled: Some(true), ..Default::default() };
        let why = LeaderElectionSettings::resolve(&flags, &file).unwrap_err();
        assert!(why.contains("lease duration 10 s from --leader-elect-lease-duration"), "{why}");
        assert!(why.contains("renew deadline 10 s from default"), "{why}");

        let flags = LeaderElectionSettings { retry_period: Some(Duration::from_secs(9)), ..Default::default() };
        let why = LeaderElectionSettings::resolve(&flags, &file).unwrap_err();
        assert!(why.contains("must be greater than the retry period × 1.2"), "{why}");

        let flags = LeaderElectionSettings { lease: Some("a/".into()), ..Default::default() };
        let why = LeaderElectionSettings::resolve(&flags, &file).unwrap_err();
        assert_eq!(why, "--leader-elect-lease: expected NAME or NAMESPACE/NAME, got \"a/\"");
    }

    fn names(refs: &[PluginRef]) -> Vec<&str> {
        refs.iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn rules_are_named_merged_and_checked() {
        let config = parse(&doc_example()).unwrap();
        let d = &config.defaults;
        let names = |r: &Option<Vec<EventRule>>| r.iter().flatten().map(|r| r.name.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&d.drop), ["pulls"]);
        assert_eq!(names(&d.keep), ["keep[0]", "keep[1]"]);
        assert_eq!(names(&d.spam_exempt), ["spam_exempt[0]"]);
        assert_eq!(config.tenants[0].rules.drop, d.drop, "a tenant without its own rules inherits them");
        let text = "[defaults]\ndrop = [{ reasons = [\"X\"] }]\n[[tenants]]\nname = \"t\"\nmatch = { kinds = [\"Pod\"] }\nrules = { drop = [] }\n";
        assert_eq!(parse(text).unwrap().tenants[0].rules.drop, Some(Vec::new()), "`drop = []` clears the defaults'");

        assert_err("[defaults]\nkeep = []\n", 2, "defaults.keep", "drop every event");
        assert_err(
            "[defaults]\ndrop = [{ name = \"a\", kinds = [\"Pod\"] },\n  { name = \"a\", kinds = [\"Node\"] }]\n",
            3,
            "defaults.drop[1].name",
            "duplicate rule name `a`",
        );
        assert_err(
            "[defaults]\nspam_exempt = [{ message = \"(\" }]\n",
            2,
            "defaults.spam_exempt[0].message",
            "regular expression",
        );
        assert_err("[defaults]\ndrop = [{ name = \"x\" }]\n", 2, "defaults.drop[0]", "matches nothing");
        assert_err("[defaults]\ndrop = [{ colour = \"red\" }]\n", 2, "defaults.drop[0].colour", "unknown field");
        assert_err(
            "[[tenants]]\nname = \"t\"\nmatch = { name = \"m\", kinds = [\"Pod\"] }\n",
            3,
            "tenants[0].match.name",
            "drop / keep / spam_exempt rules",
        );
    }

    #[test]
    fn doc_example_parses_and_merges() {
        let config = parse(&doc_example()).unwrap();
        let d = &config.defaults;
        assert_eq!(d.aggregate_key.as_ref().unwrap().name, "by-reason");
        assert!(!d.aggregate_key.as_ref().unwrap().is_builtin());
        assert_eq!(d.message_combiner.as_ref().unwrap().name, "similar-events");
        assert_eq!(d.spam_key.as_ref().unwrap().name, "source-object");
        assert_eq!(names(&d.filters), ["my-filter"]);
        assert_eq!(d.filters[0].key, "defaults.filters[0]");
        assert_eq!(
            (d.max_events, d.max_interval_seconds, d.burst, d.lru_cache_size),
            (Some(10), Some(600), Some(25), Some(4096))
        );
        assert_eq!(d.qps, Some(0.003_333_333_3));
        assert_eq!((d.fuel_per_event, d.memory_limit_bytes), (Some(2_000_000), Some(64 << 20)));
        assert_eq!(d.fallback, Some(FallbackPolicy::Builtin));
        assert_eq!(d.sinks.as_deref(), Some(&["jsonl:out/default.jsonl".to_string()][..]));

        let plugin = &config.plugin_config["my-filter"];
        assert_eq!(plugin.get("threshold").map(String::as_str), Some("5"));
        assert_eq!(plugin.get("verbose").map(String::as_str), Some("true"));

        assert_eq!(config.tenants.len(), 2);
        let pay = &config.tenants[0];
        assert_eq!(pay.name, "payments");
        // Overridden.
        assert_eq!((pay.rules.max_events, pay.rules.burst), (Some(5), Some(10)));
        assert_eq!(pay.rules.sinks.as_deref(), Some(&["jsonl:out/payments.jsonl".to_string()][..]));
        // Inherited, with the defaults' lines.
        assert_eq!(pay.rules.max_interval_seconds, Some(600));
        assert_eq!(pay.rules.qps, d.qps);
        assert_eq!(pay.rules.message_combiner, d.message_combiner);
        assert_eq!(pay.rules.message_combiner.as_ref().unwrap().key, "defaults.message_combiner");
        assert_eq!(names(&pay.rules.filters), ["my-filter"]);
        let spec = pay.matcher.spec();
        assert_eq!(spec.namespaces.as_deref(), Some(&["payments-*".to_string(), "billing".to_string()][..]));
        assert_eq!(spec.labels.as_ref().unwrap()["team"], "pay*");
        assert_eq!(spec.headers.as_ref().unwrap()["x-eventpipe-tenant"], "payments");

        let system = &config.tenants[1];
        assert!(system.rules.filters.is_empty(), "an explicit `filters = []` clears the defaults'");
        assert_eq!(system.rules.fallback, Some(FallbackPolicy::Drop));
        assert_eq!(system.rules.max_events, Some(10));

        // Every plugin reference knows its line.
        let text = doc_example();
        for r in config.defaults.plugin_refs().chain(config.tenants.iter().flat_map(|t| t.rules.plugin_refs())) {
            let line = text.lines().nth(r.line - 1).unwrap();
            assert!(line.contains(&format!("\"{}\"", r.name)), "{r:?} → {line}");
        }

        assert_eq!(config.tenant_name(None), DEFAULT_TENANT);
        assert_eq!(config.tenant_name(Some(1)), "system");
        assert_eq!(config.rules(Some(0)), &pay.rules);
        assert_eq!(config.rules(None), d);
    }

    #[test]
    fn doc_example_routes() {
        let config = parse(&doc_example()).unwrap();
        let router = config.router();
        let mut e = Event::default();
        e.metadata.namespace = "payments-eu".into();
        e.involved_object.kind = "Pod".into();
        e.metadata.labels.insert("team".into(), "payroll".into());
        e.source.component = "kubelet".into();
        e.source.host = "node-3".into();
        let hdrs = vec![("X-EventPipe-Tenant".to_string(), "payments".to_string())];
        assert_eq!(router.route(&e, Some(&hdrs)), Some(0));
        assert_eq!(router.route(&e, None), None, "payments requires the header");
        e.metadata.namespace = "kube-system".into();
        assert_eq!(router.route(&e, Some(&hdrs)), Some(1));
        e.metadata.namespace = "search".into();
        assert_eq!(router.route(&e, Some(&hdrs)), None);
    }

    /// Top-level routes and a tenant's own, with their names (given or by place), keys and
    /// lines; `[defaults]` has no routes; names are unique in the file.
    #[test]
    fn routes_are_named_checked_and_placed() {
        let config = parse(&doc_example()).unwrap();
        let top = &config.routes[0];
        assert_eq!((&*top.route.name, top.key.as_str()), ("slack-prod", "routes[0]"));
        assert_eq!((top.route.min_count, top.route.rate.map(|r| r.to_string())), (3, Some("10/min".into())));
        let own = &config.tenants[0].own.routes.as_ref().unwrap()[0];
        assert_eq!((&*own.route.name, own.key.as_str()), ("payments/route-0", "tenants[0].rules.routes[0]"));
        assert_eq!(config.tenants[0].rules.routes, config.tenants[0].own.routes);
        assert!(config.tenants[1].rules.routes.is_none());

        let (_, problems) = Config::check(
            "[defaults]\nroutes = []\n[[routes]]\nname = \"x\"\nsinks = [\"jsonl:-\"]\n\
             [[tenants]]\nname = \"t\"\nmatch = { kinds = [\"Pod\"] }\n\
             [[tenants.rules.routes]]\nname = \"x\"\nsinks = [\"jsonl:-\"]\n\
             [[tenants.rules.routes]]\nrate = \"0/s\"\nmatch = { name = \"m\", kinds = [\"Pod\"] }\n",
            Path::new("t.toml"),
        );
        let found: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            [
                "t.toml:2:10: defaults.routes: [defaults] has no routes: routes for every tenant are top-level [[routes]] tables",
                "t.toml:14:18: tenants[0].rules.routes[1].match.name: a route's `match` has no `name` (the route has one)",
                "t.toml:13:8: tenants[0].rules.routes[1].rate: the number of \"0/s\" must be a whole number from 1 to 1000000",
                "t.toml:12:1: tenants[0].rules.routes[1].sinks: a route needs `sinks`",
                "t.toml:9: tenants[0].rules.routes[0].name: duplicate route name `x` (first defined on line 3)",
            ]
        );
    }

    #[test]
    fn empty_file_is_all_defaults() {
        let config = parse("").unwrap();
        assert_eq!(config.defaults, Rules::default());
        assert!(config.tenants.is_empty() && config.plugin_config.is_empty());
    }

    #[test]
    fn tenant_rules_inherit_and_override() {
        let config = parse(
            "[defaults]\nspam_key = \"a\"\nfilters = [\"f1\", \"f2\"]\nburst = -1\nqps = 1\n\
             [[tenants]]\nname = \"t\"\nmatch = { kinds = [\"Pod\"] }\n\
             [tenants.rules]\nspam_key = \"b\"\nqps = 0.5\nlru_cache_size = 0\n",
        )
        .unwrap();
        let r = &config.tenants[0].rules;
        assert_eq!(r.spam_key.as_ref().map(|p| (p.name.as_str(), p.line)), Some(("b", 10)));
        assert_eq!(r.spam_key.as_ref().unwrap().key, "tenants[0].rules.spam_key");
        assert_eq!(names(&r.filters), ["f1", "f2"]);
        assert_eq!((r.burst, r.qps, r.lru_cache_size), (Some(-1), Some(0.5), Some(0)));
        assert_eq!(config.defaults.qps, Some(1.0), "an integer qps is accepted");
        assert_eq!((r.max_events, r.fallback, r.sinks.as_ref()), (None, None, None), "unset anywhere");
    }

    #[test]
    fn rules_equality_ignores_lines() {
        let a = parse("[defaults]\nspam_key = \"x\"\n").unwrap();
        let b = parse("# moved\n\n[defaults]\nspam_key = \"x\"\n").unwrap();
        assert_ne!(a.defaults.spam_key.as_ref().unwrap().line, b.defaults.spam_key.as_ref().unwrap().line);
        assert_eq!(a.defaults, b.defaults);
        let c = parse("[defaults]\nspam_key = \"y\"\n").unwrap();
        assert_ne!(a.defaults, c.defaults);
    }

    #[test]
    fn plugin_values_become_strings() {
        let config = parse("[plugins.p]\ns = \"x\"\ni = -3\nf = 1.0\ng = 0.25\nb = false\n").unwrap();
        let p = &config.plugin_config["p"];
        let got: Vec<(&str, &str)> = p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, [("b", "false"), ("f", "1.0"), ("g", "0.25"), ("i", "-3"), ("s", "x")]);
        assert_err("[plugins.p]\nok = 1\nlist = [1]\n", 3, "plugins.p.list", "expected a string, integer");
    }

    #[test]
    fn pure_is_a_boolean_and_memo_max_entries_an_integer_in_range() {
        let config = parse("[plugins.p]\npure = false\n[plugins.q]\npure = \"true\"\n").unwrap();
        assert_eq!(config.plugin_config["p"]["pure"], "false");
        assert_eq!(config.plugin_config["q"]["pure"], "true");
        assert_err("[plugins.p]\nx = 1\npure = 0\n", 3, "plugins.p.pure", "expected `true` or `false`, got `0`");
        let config = parse("[plugins.p]\nmemo_max_entries = 16384\n").unwrap();
        let settings = crate::plugin::PluginSettings::default().with_plugin_table(config.plugin_config["p"].clone());
        assert_eq!(settings.memo_max_entries, 16384);
        assert!(settings.config.is_empty(), "the host's key is not passed to the plugin");
        assert_err(
            "[plugins.p]\nmemo_max_entries = 1\n",
            2,
            "plugins.p.memo_max_entries",
            "expected 2 to 16777216 answers, got 1",
        );
        assert_err(
            "[plugins.p]\nmemo_max_entries = \"many\"\n",
            2,
            "plugins.p.memo_max_entries",
            "expected an integer, got `many`",
        );
    }

    #[test]
    fn digest_is_a_pin_and_not_plugin_config() {
        let pin = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let config = parse(&format!("[plugins.p]\nx = 1\ndigest = \"{pin}\"\n")).unwrap();
        assert_eq!(config.pins["p"].to_string(), pin);
        assert_eq!(config.plugin_config["p"], BTreeMap::from([("x".to_string(), "1".to_string())]));
        assert_err("[plugins.p]\ndigest = \"sha256:9f86\"\n", 2, "plugins.p.digest", "expected `sha256:` and 64 hex");
    }

    #[test]
    fn source_is_an_oci_reference_with_a_manifest_digest() {
        let d = Sha256Digest::of(b"m");
        let config = parse(&format!("[plugins.p]\nsource = \"oci://127.0.0.1:5000/x/p:v1@{d}\"\n")).unwrap();
        assert_eq!(config.sources["p"].digest(), Some(&d));
        assert!(config.plugin_config["p"].is_empty(), "not passed to the plugin");
        let no_digest = "[plugins.p]\nsource = \"oci://127.0.0.1:5000/x/p:v1\"\n";
        assert_err(no_digest, 2, "plugins.p.source", "expected the manifest's digest");
        assert_err("[plugins.p]\nsource = \"https://h/x\"\n", 2, "plugins.p.source", "expected oci://");
    }

    #[test]
    fn pins_are_written_into_the_file_keeping_the_rest() {
        let text = "# tenants\n[defaults]\nmax_events = 5 # five\n\n[plugins.a]\nx = \"1\"\ndigest = \"sha256:00\"\n";
        let path = Path::new("eventpipe.toml");
        let pins =
            BTreeMap::from([("a".to_string(), Sha256Digest::of(b"a")), ("b".to_string(), Sha256Digest::of(b"b"))]);
        assert!(with_pins_written(text, path, &pins).is_err(), "an invalid config is not rewritten");
        let text = text.replace("sha256:00", &Sha256Digest::of(b"old").to_string());
        let written = with_pins_written(&text, path, &pins).unwrap();
        assert!(
            written.starts_with("# tenants\n[defaults]\nmax_events = 5 # five\n\n[plugins.a]\nx = \"1\"\n"),
            "{written}"
        );
        assert_eq!(Config::parse(&written, path).unwrap().pins, pins);
        assert_eq!(Config::parse(&written, path).unwrap().plugin_config["a"]["x"], "1");
        assert_eq!(with_pins_written(&written, path, &pins).unwrap(), written, "writing the same pins changes nothing");
        let fresh = with_pins_written("", path, &pins).unwrap();
        assert_eq!(Config::parse(&fresh, path).unwrap().pins, pins, "{fresh}");
    }

    #[test]
    fn display_is_file_line_column_key_message() {
        let text = "[[tenants]]\nname = \"t\"\nmatch = { kinds = [\"Pod\"] }\n[tenants.rules]\nburst = \"x\"\n";
        assert_eq!(
            err(text).to_string(),
            r#"eventpipe.toml:5:9: tenants[0].rules.burst: invalid type: string "x", expected i64"#
        );
        let io = Config::load(Path::new("/nonexistent/eventpipe.toml")).unwrap_err();
        assert_eq!((io.line, io.key.as_str()), (None, ""));
        assert!(io.to_string().starts_with("/nonexistent/eventpipe.toml: cannot read: "), "{io}");
    }

    #[test]
    fn syntax_error() {
        let e = err("[defaults]\nburst = 1\nmax_events = = 2\n");
        assert_eq!((e.line, e.key.as_str()), (Some(3), ""), "{e}");
        let e = err("[defaults]\nburst = 1\nburst = 2\n");
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("duplicate key"), "{e}");
    }

    #[test]
    fn type_errors() {
        assert_err("[defaults]\nmax_events = 1.5\n", 2, "defaults.max_events", "invalid type: floating point");
        assert_err("[defaults]\nfilters = \"f\"\n", 2, "defaults.filters", "invalid type: string");
        assert_err("[defaults]\nlru_cache_size = 1.5\n", 2, "defaults.lru_cache_size", "invalid type: floating point");
        assert_err("[defaults]\nfuel_per_event = -5\n", 2, "defaults.fuel_per_event", "expected u64");
        assert_err("[defaults]\nmemory_limit_bytes = -5\n", 2, "defaults.memory_limit_bytes", "invalid value");
        assert_err(
            "[[tenants]]\nname = \"a\"\nmatch = { kinds = [\"Pod\"] }\n[[tenants]]\nname = \"b\"\n\
             [tenants.match]\nnamespaces = [\"x\", 3]\n",
            7,
            "tenants[1].match.namespaces[1]",
            "invalid type: integer `3`",
        );
        assert_err("[[tenants]]\nmatch = { kinds = [\"Pod\"] }\n", 1, "tenants[0]", "missing field `name`");
    }

    #[test]
    fn unknown_keys() {
        assert_err("[defaults]\nburst = 1\nbrust = 2\n", 3, "defaults.brust", "unknown field `brust`");
        assert_err("[default]\n", 1, "default", "unknown field `default`");
        assert_err(
            "[[tenants]]\nname = \"t\"\n[tenants.match]\nkinds = [\"Pod\"]\nkind = \"Pod\"\n",
            5,
            "tenants[0].match.kind",
            "unknown field `kind`",
        );
        assert_err(
            "[[tenants]]\nname = \"t\"\nmatch = { kinds = [\"Pod\"] }\nrules = { nope = 1 }\n",
            4,
            "tenants[0].rules.nope",
            "unknown field",
        );
    }

    #[test]
    fn tenant_names() {
        let t = |name: &str| format!("[[tenants]]\nname = \"{name}\"\nmatch = {{ kinds = [\"Pod\"] }}\n");
        assert_err(
            &format!("{}{}", t("a"), t("a")),
            5,
            "tenants[1].name",
            "duplicate tenant name `a` (first defined on line 2)",
        );
        assert_err(&t("default"), 2, "tenants[0].name", "reserved");
        assert_err(&t(""), 2, "tenants[0].name", "must not be empty");
    }

    #[test]
    fn match_errors() {
        assert_err(
            "\n[[tenants]]\nname = \"t\"\n",
            2,
            "tenants[0].match",
            "matches nothing; give at least one criterion",
        );
        assert_err(
            "[[tenants]]\nname = \"t\"\n[tenants.match]\n[tenants.rules]\nburst = 1\n",
            3,
            "tenants[0].match",
            "matches nothing",
        );
        assert_err("[[tenants]]\nname = \"t\"\nmatch = {}\n", 3, "tenants[0].match", "matches nothing");
        assert_err(
            "[[tenants]]\nname = \"t\"\n[tenants.match]\nkinds = [\"Pod\"]\nnamespaces = [\"ok-*\",\n  \"bad[a\"]\n",
            6,
            "tenants[0].match.namespaces[1]",
            "invalid glob \"bad[a\"",
        );
        assert_err(
            "[[tenants]]\nname = \"t\"\n[tenants.match]\nheaders = { \"X.Tenant\" = \"{a\" }\n",
            4,
            "tenants[0].match.headers.\"X.Tenant\"",
            "invalid glob",
        );
        assert_err(
            "[[tenants]]\nname = \"t\"\n[tenants.match]\nkinds = [\"Pod\"]\nsource_hosts = []\n",
            5,
            "tenants[0].match.source_hosts",
            "empty",
        );
    }

    /// Every problem of a `match` is reported, each at its criterion and entry: two bad globs of
    /// one list and a bad regex beside them, in a tenant's match and in a rule list.
    #[test]
    fn every_bad_pattern_of_a_match_is_a_problem_of_its_own() {
        let text = "[[tenants]]\nname = \"t\"\n[tenants.match]\nnamespaces = [\"kube-[system\", \"ok\", \"x[\"]\n\
                    message = \"OOM(killed\"\n[tenants.rules]\ndrop = [{ reasons = [\"[a\"], message = \"(\" }]\n";
        let (_, problems) = Config::check(text, Path::new("t.toml"));
        let keys: Vec<(&str, Option<usize>)> = problems.iter().map(|p| (p.key.as_str(), p.line)).collect();
        assert_eq!(
            keys,
            [
                ("tenants[0].match.namespaces[0]", Some(4)),
                ("tenants[0].match.namespaces[2]", Some(4)),
                ("tenants[0].match.message", Some(5)),
                ("tenants[0].rules.drop[0].reasons[0]", Some(7)),
                ("tenants[0].rules.drop[0].message", Some(7)),
            ],
            "{problems:#?}"
        );
    }

    #[test]
    fn partition_key_is_a_rule_tenants_inherit() {
        let text = "[defaults]\npartition_key = \"namespace\"\n[[tenants]]\nname = \"a\"\nmatch = { kinds = [\"Pod\"] }\n\
                    [[tenants]]\nname = \"b\"\nmatch = { kinds = [\"Node\"] }\nrules = { partition_key = \"source-object\" }\n";
        let c = Config::parse(text, Path::new("t.toml")).unwrap();
        assert_eq!(c.defaults.partition_key, Some(PartitionKey::Namespace));
        assert_eq!(c.tenants[0].rules.partition_key, Some(PartitionKey::Namespace), "inherited");
        assert_eq!(c.tenants[1].rules.partition_key, Some(PartitionKey::SourceObject), "overridden");
        assert_err(
            "[defaults]\npartition_key = \"pod\"\n",
            2,
            "defaults.partition_key",
            "expected `source-object` or `namespace`",
        );
    }

    #[test]
    fn rule_value_errors() {
        assert_err("[defaults]\nfallback = \"retry\"\n", 2, "defaults.fallback", "unknown fallback policy \"retry\"");
        assert_err(
            "[[tenants]]\nname = \"t\"\nmatch = { kinds = [\"Pod\"] }\n[tenants.rules]\nfallback = \"x\"\n",
            5,
            "tenants[0].rules.fallback",
            "expected builtin, drop or fail",
        );
        assert_err(
            "[defaults]\nsinks = [\"jsonl:a\", \"kafka:x\"]\n",
            2,
            "defaults.sinks[1]",
            "invalid sink \"kafka:x\"",
        );
        assert_err("[defaults]\nsinks = [\"jsonl:\"]\n", 2, "defaults.sinks[0]", "expected a sink: jsonl:PATH");
        assert_err("[defaults]\nsinks = [\"out.jsonl\"]\n", 2, "defaults.sinks[0]", "invalid sink");
        assert_err("[defaults]\nsinks = []\n", 2, "defaults.sinks", "empty list");
        assert_err("[defaults]\nqps = nan\n", 2, "defaults.qps", "not nan");
        assert_err("[defaults]\nfilters = [\"a\", \"builtin\"]\n", 2, "defaults.filters[1]", "not a filter plugin");
        assert_err("[defaults]\naggregate_key = \"\"\n", 2, "defaults.aggregate_key", "must not be empty");
        let ok = parse(
            "[defaults]\nsinks = [\"jsonl:-\", \"plugin:jsonl\", \"plugin:x.wasm\", \"k8s\", \"k8s:ns\"]\nfallback = \"fail\"\n",
        );
        assert_eq!(ok.unwrap().defaults.fallback, Some(FallbackPolicy::Fail));
    }

    #[test]
    fn error_at_builds_caller_errors() {
        let config = parse("[defaults]\n\naggregate_key = \"nope\"\n").unwrap();
        let r = config.defaults.aggregate_key.as_ref().unwrap();
        assert_eq!(
            config.plugin_error(r, "plugin `nope` not found").to_string(),
            "eventpipe.toml:3: defaults.aggregate_key: plugin `nope` not found"
        );
        assert_eq!(config.error_at(7, "", "m").to_string(), "eventpipe.toml:7: m");
    }

    #[test]
    fn line_and_column_count_characters() {
        let ctx = Ctx { text: "é = 1\nab", path: Path::new("f") };
        assert_eq!(ctx.line_col(0), (1, 1));
        assert_eq!(ctx.line_col(2), (1, 2), "after the two-byte é");
        assert_eq!(ctx.line_col(1), (1, 1), "inside a character rounds down");
        assert_eq!(ctx.line_col(9), (2, 3));
        assert_eq!(ctx.line_col(100), (2, 3));
    }
}
