//! Wasm plugins: the only module that uses wasmtime.
//!
//! A plugin is one WebAssembly component exporting one of the worlds in `wit/` (aggregate key,
//! message combiner, spam key, filter, sink, watcher). Each is compiled once
//! ([`PluginRuntime::load`]), pre-instantiated, and run in its own `Store` with a **fuel budget
//! per call** and a **memory limit**. A call that traps, runs out of fuel, hits the memory limit,
//! panics in the guest or returns garbage fails with a [`PluginCallError`] naming the plugin,
//! its kind, the tenant and the event; the caller applies the plugin's [`FallbackPolicy`], the
//! failure is counted in [`PluginStats`], and the poisoned instance is replaced (a trapped
//! component instance cannot be entered again). Nothing a plugin does panics the host.
//!
//! The key functions cross the boundary once per batch (see [`functions`]): events go in as one
//! packed buffer of the 13 key fields, keys come back as one packed buffer, hashed in place.
//! Their answers are memoized per instance (pure plugins, [`PluginSettings::pure`]): a batch
//! goes to the plugin with only the inputs it has not answered yet.

pub mod bindings;
pub mod breaker;
mod call;
pub mod check;
mod convert;
pub mod embedded;
pub mod encoder;
pub mod file;
pub mod filter;
pub mod functions;
mod memo;
pub mod pin;
mod projection;
pub mod registry;
pub mod shadow;
pub mod sink;
mod slot;
mod state;
pub mod watcher;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::component::{Component, InstancePre, Linker};
use wasmtime::{Config, Engine};

pub use call::{CallCost, CallFailure, PluginCallError};
pub use memo::{
    MEMO_BYPASS_BATCHES, MEMO_ENTRIES, MEMO_GROW_RATE, MEMO_GROWTH, MEMO_MAX_BYPASS_BATCHES, MEMO_MAX_ENTRIES,
    MEMO_MEASURED_HIT_RATE, MEMO_MIN_HIT_RATE, MEMO_PROBE_EVENTS, MEMO_WAYS,
};
pub(crate) use slot::check_kind;
pub use slot::{KindChanged, PluginHandle, PluginSlot, WrongKind};
pub use state::PluginState;

/// The plugin kinds, one per world in `wit/worlds.wit`, recognised by their batch export. As a
/// command-line value: the world's name (`aggregate-key`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum PluginKind {
    /// `aggregate-key`: event → (aggregate key, local key), client-go `EventAggregatorKeyFunc`.
    AggregateKey,
    /// `message-combiner`: event → combined message, client-go `EventAggregatorMessageFunc`.
    MessageCombiner,
    /// `spam-key`: event → token-bucket key, client-go `EventSpamKeyFunc`.
    SpamKey,
    /// `filter`: event → keep / drop, before correlation.
    Filter,
    /// `sink`: create / patch requests → results.
    Sink,
    /// `watcher`: receives every event the Broadcaster distributes to it.
    Watcher,
    /// `encoder`: a batch of writes → one HTTP request (body and headers) for the webhook sink.
    Encoder,
}

impl PluginKind {
    /// Every kind, in `wit/worlds.wit` order.
    pub const ALL: [PluginKind; 7] = [
        PluginKind::AggregateKey,
        PluginKind::MessageCombiner,
        PluginKind::SpamKey,
        PluginKind::Filter,
        PluginKind::Sink,
        PluginKind::Watcher,
        PluginKind::Encoder,
    ];

    /// The world's name in `wit/` (`"aggregate-key"`, …).
    pub fn world(self) -> &'static str {
        match self {
            PluginKind::AggregateKey => "aggregate-key",
            PluginKind::MessageCombiner => "message-combiner",
            PluginKind::SpamKey => "spam-key",
            PluginKind::Filter => "filter",
            PluginKind::Sink => "sink",
            PluginKind::Watcher => "watcher",
            PluginKind::Encoder => "encoder",
        }
    }

    /// The export the host calls on the hot path (`"aggregate-key-batch"`, …).
    pub fn batch_export(self) -> &'static str {
        match self {
            PluginKind::AggregateKey => "aggregate-key-batch",
            PluginKind::MessageCombiner => "combine-message-batch",
            PluginKind::SpamKey => "spam-key-batch",
            PluginKind::Filter => "filter-batch",
            PluginKind::Sink => "deliver-batch",
            PluginKind::Watcher => "watch-batch",
            PluginKind::Encoder => "encode",
        }
    }

    /// Whether its batch export takes a key-fields batch (aggregate key, message combiner, spam
    /// key): the kinds whose `*-projected` world declares the key fields it reads.
    pub fn reads_key_fields(self) -> bool {
        matches!(self, PluginKind::AggregateKey | PluginKind::MessageCombiner | PluginKind::SpamKey)
    }

    /// The single-event export (tools and tests).
    pub fn single_export(self) -> &'static str {
        match self {
            PluginKind::AggregateKey => "aggregate-key",
            PluginKind::MessageCombiner => "combine-message",
            PluginKind::SpamKey => "spam-key",
            PluginKind::Filter => "filter",
            PluginKind::Sink => "deliver",
            PluginKind::Watcher => "watch",
            PluginKind::Encoder => "encode",
        }
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.world())
    }
}

/// What a caller does when a plugin call fails (trap, fuel, memory, garbage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FallbackPolicy {
    /// Use the built-in client-go function for that event (the default).
    #[default]
    Builtin,
    /// Drop the event (counted).
    Drop,
    /// Drop the event and report the failure as an error (the run ends with a failure status).
    Fail,
}

impl std::str::FromStr for FallbackPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "builtin" => Ok(Self::Builtin),
            "drop" => Ok(Self::Drop),
            "fail" => Ok(Self::Fail),
            other => Err(format!("unknown fallback policy {other:?} (expected builtin, drop or fail)")),
        }
    }
}

/// Default fuel per event of a call, in wasmtime fuel units (≈ Wasm instructions). A Rust key
/// function uses a few thousand per event; Python and JS guests use 10–100× more.
pub const DEFAULT_FUEL_PER_EVENT: u64 = 2_000_000;
/// Default linear-memory limit per plugin instance, bytes (64 MiB).
pub const DEFAULT_MEMORY_LIMIT_BYTES: usize = 64 << 20;

/// Per-plugin limits and policy.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginSettings {
    /// Fuel per event; a call on a batch of `n` events gets `n ×` this much (Wasm instructions,
    /// roughly). Ignored when the runtime was built without fuel.
    pub fuel_per_event: u64,
    /// Maximum linear memory of one instance, bytes; growing past it traps.
    pub memory_limit_bytes: usize,
    /// What callers do when a call fails.
    pub fallback: FallbackPolicy,
    /// The plugin's own key/value config (WIT `config` import).
    pub config: BTreeMap<String, String>,
    /// Whether the plugin is pure, so the host may answer a repeated input from its memo
    /// instead of calling it ([`MEMO_ENTRIES`] answers per instance, growing up to
    /// [`MEMO_MAX_ENTRIES`] when evicted inputs come back). Applies to aggregate-key,
    /// message-combiner and spam-key plugins, which are pure by contract (`wit/README.md`);
    /// `pure = false` in the plugin's `[plugins.NAME]` table turns it off for a plugin that
    /// keeps state. Default `true`.
    pub pure: bool,
    /// The most answers the plugin's memo grows to, per instance (one plugin of one tenant
    /// stage), rounded down to a power of two: [`MEMO_MAX_ENTRIES`] unless its `[plugins.NAME]`
    /// table sets `memo_max_entries` (from [`MEMO_WAYS`] to [`MEMO_MAX_ENTRIES_LIMIT`]). A memo
    /// starts at [`MEMO_ENTRIES`] or this, whichever is smaller.
    pub memo_max_entries: usize,
}

/// The key of a `[plugins.NAME]` table read by the host rather than the plugin:
/// [`PluginSettings::pure`] (`"true"` or `"false"`).
pub const PURE_KEY: &str = "pure";

/// The key of a `[plugins.NAME]` table read by the host rather than the plugin:
/// [`PluginSettings::memo_max_entries`] (an integer).
pub const MEMO_MAX_ENTRIES_KEY: &str = "memo_max_entries";

/// The largest `memo_max_entries` a `[plugins.NAME]` table may set: 16,777,216 answers (1.25
/// GiB of aggregate-key answers).
pub const MEMO_MAX_ENTRIES_LIMIT: usize = 1 << 24;

impl PluginSettings {
    /// These settings for the plugin whose `[plugins.NAME]` table is `table`: the table is the
    /// plugin's [`config`](Self::config), except its [`PURE_KEY`] entry, which sets
    /// [`pure`](Self::pure) (only `"false"` turns it off; the config file accepts nothing but a
    /// boolean there), and its [`MEMO_MAX_ENTRIES_KEY`] entry, which sets
    /// [`memo_max_entries`](Self::memo_max_entries) (a value that is not an integer in range
    /// keeps the current one; the config file refuses it). Neither is passed to the plugin.
    pub fn with_plugin_table(&self, mut table: BTreeMap<String, String>) -> Self {
        let pure = table.remove(PURE_KEY).is_none_or(|v| v != "false");
        let memo_max_entries = table
            .remove(MEMO_MAX_ENTRIES_KEY)
            .and_then(|v| parse_memo_max_entries(&v).ok())
            .unwrap_or(self.memo_max_entries);
        Self { config: table, pure, memo_max_entries, ..self.clone() }
    }
}

/// A `memo_max_entries` value as a `[plugins.NAME]` table holds it (its string form), or why
/// it is refused: not an integer, or outside [`MEMO_WAYS`]..=[`MEMO_MAX_ENTRIES_LIMIT`].
pub fn parse_memo_max_entries(value: &str) -> Result<usize, String> {
    let n: usize = value.parse().map_err(|_| format!("expected an integer, got `{value}`"))?;
    if !(MEMO_WAYS..=MEMO_MAX_ENTRIES_LIMIT).contains(&n) {
        return Err(format!("expected {MEMO_WAYS} to {MEMO_MAX_ENTRIES_LIMIT} answers, got {n}"));
    }
    Ok(n)
}

impl Default for PluginSettings {
    fn default() -> Self {
        Self {
            fuel_per_event: DEFAULT_FUEL_PER_EVENT,
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
            fallback: FallbackPolicy::Builtin,
            config: BTreeMap::new(),
            pure: true,
            memo_max_entries: MEMO_MAX_ENTRIES,
        }
    }
}

/// Why a plugin could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The bytes are not a WebAssembly component (or do not compile).
    #[error("plugin `{plugin}`: not a valid WebAssembly component: {reason}")]
    Compile {
        /// Plugin name.
        plugin: String,
        /// wasmtime's explanation.
        reason: String,
    },
    /// The component exports no plugin world, or several.
    #[error("plugin `{plugin}`: {reason}")]
    World {
        /// Plugin name.
        plugin: String,
        /// What is wrong with its exports.
        reason: String,
    },
    /// The component imports something the host does not offer (filesystem, network, …).
    #[error("plugin `{plugin}`: cannot be linked: {reason}")]
    Link {
        /// Plugin name.
        plugin: String,
        /// wasmtime's explanation.
        reason: String,
    },
    /// The component file could not be read.
    #[error("plugin `{plugin}`: cannot read {}: {reason}", path.display())]
    Read {
        /// Plugin name.
        plugin: String,
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        reason: String,
    },
    /// The wasmtime engine could not be created.
    #[error("wasm runtime: {0}")]
    Runtime(String),
}

/// Counters of one use of a plugin ([`PluginHandle`]: one tenant's key function, sink, …),
/// across versions and instances. Read with [`PluginStats::snapshot`].
#[derive(Debug, Default)]
pub struct PluginStats {
    calls: AtomicU64,
    events: AtomicU64,
    fuel_consumed: AtomicU64,
    failures: AtomicU64,
    failures_by_reason: [AtomicU64; CallFailure::LABELS.len()],
    fallbacks: AtomicU64,
    drops: AtomicU64,
    instances: AtomicU64,
    memo_hits: AtomicU64,
    memo_misses: AtomicU64,
    call_nanos: AtomicU64,
    quarantines: AtomicU64,
    /// Each call's duration, nanoseconds.
    call_duration: crate::metrics::histogram::HistogramOf<crate::metrics::histogram::PluginCalls>,
}

/// A copy of [`PluginStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PluginStatsSnapshot {
    /// Calls into the plugin.
    pub calls: u64,
    /// Events passed in those calls.
    pub events: u64,
    /// Fuel consumed by successful calls (0 when fuel is off).
    pub fuel_consumed: u64,
    /// Failed calls (traps, fuel, memory, guest errors, garbage results).
    pub failures: u64,
    /// `failures` by [`CallFailure::label`], indexed as [`CallFailure::LABELS`].
    pub failures_by_reason: [u64; CallFailure::LABELS.len()],
    /// Events handled by the built-in function after a failure.
    pub fallbacks: u64,
    /// Events dropped after a failure (`drop` / `fail` policies).
    pub drops: u64,
    /// Instances created (1 + replacements after traps).
    pub instances: u64,
    /// Events a pure key plugin's memo answered without calling the plugin (inputs answered
    /// before, or repeated within their batch).
    pub memo_hits: u64,
    /// Events a pure key plugin's memo had no answer for: passed to the plugin.
    pub memo_misses: u64,
    /// Nanoseconds spent inside calls (lowering the arguments, running, lifting the results).
    pub call_nanos: u64,
    /// Times a failure of this use quarantined the plugin ([`breaker`]).
    pub quarantines: u64,
    /// 1 while the plugin is quarantined, else 0 (a gauge; filled in from the slot by
    /// [`PluginHandle::snapshot`]).
    pub quarantined: u64,
}

impl PluginStats {
    /// The counters now.
    pub fn snapshot(&self) -> PluginStatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PluginStatsSnapshot {
            calls: get(&self.calls),
            events: get(&self.events),
            fuel_consumed: get(&self.fuel_consumed),
            failures: get(&self.failures),
            failures_by_reason: std::array::from_fn(|i| get(&self.failures_by_reason[i])),
            fallbacks: get(&self.fallbacks),
            drops: get(&self.drops),
            instances: get(&self.instances),
            memo_hits: get(&self.memo_hits),
            memo_misses: get(&self.memo_misses),
            call_nanos: get(&self.call_nanos),
            quarantines: get(&self.quarantines),
            quarantined: 0,
        }
    }

    /// Counts one call of `nanos` nanoseconds (the time-inside-calls counter and the
    /// per-call histogram).
    pub(crate) fn called_for(&self, nanos: u64) {
        self.call_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.call_duration.observe(nanos);
    }

    /// Each call's duration so far (nanoseconds).
    pub fn call_durations(&self) -> crate::metrics::Counts {
        self.call_duration.counts()
    }
}

/// Where a plugin's component came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginOrigin {
    /// Carried in the binary (see [`embedded`]).
    Embedded,
    /// A component file (in the plugins directory, or named on the command line).
    File(std::path::PathBuf),
}

impl fmt::Display for PluginOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginOrigin::Embedded => f.write_str("embedded"),
            PluginOrigin::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// A compiled, linked version of a plugin, ready to instantiate: the code only. Limits, policy
/// and counters belong to each use of it ([`PluginHandle`]); hot reload swaps versions in a
/// [`PluginSlot`]. Cheap to share (`Arc<Plugin>`).
pub struct Plugin {
    name: Arc<str>,
    kind: PluginKind,
    pre: InstancePre<PluginState>,
    fuel: bool,
    origin: PluginOrigin,
    version: u64,
    release: u64,
    digest: u64,
    sha256: pin::Sha256Digest,
    compile_time: std::time::Duration,
    tier: Tier,
    /// Whether it exports `key-fields` (a key plugin of a `*-projected` world).
    declares_key_fields: bool,
    /// Whether it exports `local-key-field` (an `aggregate-key-projected` plugin).
    declares_local_key_field: bool,
    /// Whether it exports `enrichment-fields` (a `filter-enriched` plugin).
    declares_enrichment_fields: bool,
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("origin", &self.origin)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// The plugin's name (its file stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its kind, read from its exports.
    pub fn kind(&self) -> PluginKind {
        self.kind
    }

    /// Whether it declares the key fields it reads (a key plugin of a `*-projected` world,
    /// exporting `key-fields`); otherwise the host sends it all 13.
    pub fn declares_key_fields(&self) -> bool {
        self.declares_key_fields
    }

    /// Whether it can declare that its local key is one key field as it is (an aggregate-key
    /// plugin of the `aggregate-key-projected` world built since that world has
    /// `local-key-field`).
    pub fn declares_local_key_field(&self) -> bool {
        self.declares_local_key_field
    }

    /// Whether it can declare enrichment fields it reads (a filter of the `filter-enriched`
    /// world, exporting `enrichment-fields`); otherwise it gets no enrichment.
    pub fn declares_enrichment_fields(&self) -> bool {
        self.declares_enrichment_fields
    }

    /// Where its component came from.
    pub fn origin(&self) -> &PluginOrigin {
        &self.origin
    }

    /// A number unique to this compiled version within the process (increasing with each load).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// This name's load count in its runtime when this version was compiled, from 1: what logs
    /// show as `vN` (a refused file and the optimized rebuild of a quickly compiled version
    /// take a number too).
    pub fn release(&self) -> u64 {
        self.release
    }

    /// XXH3-64 of the component bytes (tells an unchanged file from a new version).
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// SHA-256 of the component bytes: what pins, OCI references and listings name it by.
    pub fn sha256(&self) -> &pin::Sha256Digest {
        &self.sha256
    }

    /// The Cranelift settings it was compiled with.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// How long compiling (or fetching from the compilation cache) and linking took.
    pub fn compile_time(&self) -> std::time::Duration {
        self.compile_time
    }
}

/// Whether calls are metered with fuel (the default) or run unmetered (benchmarks only: a
/// looping plugin then hangs its caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metering {
    /// Fuel per call, as [`PluginSettings::fuel_per_event`] says.
    Fuel,
    /// No fuel: no protection against loops.
    Unmetered,
}

/// Which Cranelift settings a plugin version was compiled with ([`PluginRuntime::load_tier`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Cranelift's default optimisation (`speed`, backtracking register allocation): what
    /// every plugin runs on in the end.
    Optimized,
    /// No mid-end optimisation and single-pass register allocation: compiles in about half
    /// the time of [`Tier::Optimized`], and its calls cost about 1.8× the instructions. Hot
    /// reload serves a new version on it only until the optimized build is ready.
    Quick,
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::Optimized => "optimized",
            Tier::Quick => "quick tier",
        })
    }
}

/// The wasmtime engines (one per [`Tier`]) and their linkers, shared by every plugin.
#[derive(Clone)]
pub struct PluginRuntime {
    optimized: Compiler,
    quick: Compiler,
    metering: Metering,
    /// With a compilation cache: what it holds optimized.
    marks: Option<OptimizedMarks>,
    /// Loads so far, per plugin name ([`Plugin::release`]).
    releases: Arc<std::sync::Mutex<std::collections::HashMap<String, u64>>>,
}

/// One engine and the linker with the host imports for it.
#[derive(Clone)]
struct Compiler {
    engine: Engine,
    linker: Arc<Linker<PluginState>>,
}

/// What the compilation cache holds at [`Tier::Optimized`], as wasmtime cannot be asked: an
/// empty marker file per component digest and engine configuration,
/// `DIR/eventpipe-optimized/XXH3-CONFIG` (in hex) beside wasmtime's own files, written once a
/// component compiled optimized through the cache. Another process with the same cache (a
/// `plugins check` before a hot reload) finds the build there, so a hot reload of checked
/// content compiles optimized at once — a cache hit — rather than at [`Tier::Quick`].
#[derive(Clone, Debug)]
struct OptimizedMarks {
    dir: std::path::PathBuf,
    /// Tells engine configurations apart: a hash of wasmtime's
    /// `Engine::precompile_compatibility_hash`, the identity of what its cache may share.
    config: u64,
}

impl OptimizedMarks {
    fn new(cache: &wasmtime::Cache, engine: &Engine) -> Self {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self { dir: cache.directory().join("eventpipe-optimized"), config: hasher.finish() }
    }

    fn path(&self, digest: u64) -> std::path::PathBuf {
        self.dir.join(format!("{digest:016x}-{:016x}", self.config))
    }

    fn contains(&self, digest: u64) -> bool {
        self.path(digest).exists()
    }

    /// Marks `digest` compiled; a marker that cannot be written costs only a quick tier later.
    fn insert(&self, digest: u64) {
        let path = self.path(digest);
        if !path.exists() && std::fs::create_dir_all(&self.dir).and_then(|()| std::fs::write(&path, b"")).is_err() {
            tracing::debug!(path = %path.display(), "cannot mark a compiled component in the compilation cache");
        }
    }
}

impl Compiler {
    fn new(metering: Metering, cache: Option<wasmtime::Cache>, tier: Tier) -> Result<Self, PluginError> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.consume_fuel(metering == Metering::Fuel);
        // No component-model-async in eventpipe: skipping its per-store state saves ~230 ns/call.
        config.concurrency_support(false);
        config.cache(cache);
        if tier == Tier::Quick {
            config.cranelift_opt_level(wasmtime::OptLevel::None);
            config.cranelift_regalloc_algorithm(wasmtime::RegallocAlgorithm::SinglePass);
        }
        let engine = Engine::new(&config).map_err(|e| PluginError::Runtime(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        bindings::Host_::add_to_linker::<PluginState, wasmtime::component::HasSelf<PluginState>>(&mut linker, |s| s)
            .map_err(|e| PluginError::Runtime(e.to_string()))?;
        Ok(Self { engine, linker: Arc::new(linker) })
    }
}

impl fmt::Debug for PluginRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginRuntime").field("metering", &self.metering).finish_non_exhaustive()
    }
}

impl PluginRuntime {
    /// Engines for components (Cranelift, no async; one per [`Tier`]), metered as `metering`
    /// says, and linkers with the host imports (`log`, `config`, `output`). No compilation
    /// cache.
    ///
    /// # Errors
    /// [`PluginError::Runtime`] if wasmtime rejects the configuration.
    pub fn new(metering: Metering) -> Result<Self, PluginError> {
        Self::build(metering, None)
    }

    /// As [`new`](Self::new), with wasmtime's compilation cache in `cache_dir` (an absolute
    /// path; `None`: wasmtime's default, e.g. `~/.cache/wasmtime`). A component compiled once is
    /// loaded from the cache afterwards (hot reloads, restarts), in ~1 ms instead of ~45 ms.
    ///
    /// # Errors
    /// [`PluginError::Runtime`] if the cache directory cannot be created or wasmtime rejects
    /// the configuration.
    pub fn with_cache(metering: Metering, cache_dir: Option<&std::path::Path>) -> Result<Self, PluginError> {
        let mut cache = wasmtime::CacheConfig::new();
        if let Some(dir) = cache_dir {
            let dir = std::path::absolute(dir).map_err(|e| PluginError::Runtime(format!("cache directory: {e}")))?;
            cache.with_directory(dir);
        }
        let cache =
            wasmtime::Cache::new(cache).map_err(|e| PluginError::Runtime(format!("compilation cache: {e:#}")))?;
        Self::build(metering, Some(cache))
    }

    fn build(metering: Metering, cache: Option<wasmtime::Cache>) -> Result<Self, PluginError> {
        let optimized = Compiler::new(metering, cache.clone(), Tier::Optimized)?;
        let marks = cache.as_ref().map(|cache| OptimizedMarks::new(cache, &optimized.engine));
        Ok(Self {
            optimized,
            quick: Compiler::new(metering, cache, Tier::Quick)?,
            metering,
            marks,
            releases: Arc::default(),
        })
    }

    /// Whether component content of XXH3-64 `digest` was compiled at [`Tier::Optimized`]
    /// through this runtime's compilation cache, by this process or another with the same
    /// cache and engine configuration (e.g. `eventpipe plugins check`): loading it again is a
    /// cache hit. Always `false` without a cache.
    pub fn has_optimized(&self, digest: u64) -> bool {
        self.marks.as_ref().is_some_and(|marks| marks.contains(digest))
    }

    /// Compiles `bytes` as plugin `name` from `origin`, reads its kind from its exports, and
    /// links it. Compiling goes through wasmtime's cache when the runtime has one.
    ///
    /// # Errors
    /// [`PluginError::Compile`] for bytes that are not a component (a half-written file, a core
    /// module, garbage); [`PluginError::World`] when it exports no plugin world or several;
    /// [`PluginError::Link`] when it imports what the host does not offer.
    pub fn load(&self, name: &str, bytes: &[u8], origin: PluginOrigin) -> Result<Arc<Plugin>, PluginError> {
        self.load_tier(name, bytes, origin, Tier::Optimized)
    }

    /// As [`load`](Self::load), compiled at `tier`.
    ///
    /// # Errors
    /// As [`load`](Self::load).
    pub fn load_tier(
        &self,
        name: &str,
        bytes: &[u8],
        origin: PluginOrigin,
        tier: Tier,
    ) -> Result<Arc<Plugin>, PluginError> {
        static VERSIONS: AtomicU64 = AtomicU64::new(1);
        let started = std::time::Instant::now();
        let compiler = match tier {
            Tier::Optimized => &self.optimized,
            Tier::Quick => &self.quick,
        };
        let component = {
            let _notice = SlowCompileNotice::start(name, bytes.len());
            Component::new(&compiler.engine, bytes)
                .map_err(|e| PluginError::Compile { plugin: name.into(), reason: one_line(&format!("{e:#}")) })?
        };
        let digest = xxhash_rust::xxh3::xxh3_64(bytes);
        if let (Tier::Optimized, Some(marks)) = (tier, &self.marks) {
            marks.insert(digest);
        }
        let exports: Vec<String> =
            component.component_type().exports(&compiler.engine).map(|(name, _)| name.to_string()).collect();
        let kind = kind_from_exports(&exports).map_err(|reason| PluginError::World { plugin: name.into(), reason })?;
        let pre = compiler.linker.instantiate_pre(&component).map_err(|e| {
            let imports: Vec<String> =
                component.component_type().imports(&compiler.engine).map(|(name, _)| name.to_string()).collect();
            PluginError::Link {
                plugin: name.into(),
                reason: forbidden_imports(&imports).unwrap_or_else(|| format!("{e:#}")),
            }
        })?;
        Ok(Arc::new(Plugin {
            name: name.into(),
            kind,
            pre,
            fuel: self.metering == Metering::Fuel,
            origin,
            version: VERSIONS.fetch_add(1, Ordering::Relaxed),
            release: {
                let mut releases = self.releases.lock().unwrap_or_else(|p| p.into_inner());
                let n = releases.entry(name.to_string()).or_default();
                *n += 1;
                *n
            },
            digest,
            sha256: pin::Sha256Digest::of(bytes),
            compile_time: started.elapsed(),
            tier,
            declares_key_fields: kind.reads_key_fields() && exports.iter().any(|e| e == KEY_FIELDS_EXPORT),
            declares_local_key_field: kind == PluginKind::AggregateKey
                && exports.iter().any(|e| e == KEY_FIELDS_EXPORT)
                && exports.iter().any(|e| e == LOCAL_KEY_FIELD_EXPORT),
            declares_enrichment_fields: kind == PluginKind::Filter
                && exports.iter().any(|e| e == ENRICHMENT_FIELDS_EXPORT),
        }))
    }

    /// The names component `bytes` (plugin `name`, for errors) imports and exports at its top
    /// level, e.g. `eventpipe:plugin/host@0.1.0`: what the Wasm OCI artifact's config lists
    /// (`component.imports` / `component.exports`, as wasm-pkg-tools writes them). Compiles it at
    /// [`Tier::Quick`] (through the compilation cache).
    ///
    /// # Errors
    /// [`PluginError::Compile`] when `bytes` are not a component.
    pub fn component_names(&self, name: &str, bytes: &[u8]) -> Result<(Vec<String>, Vec<String>), PluginError> {
        let engine = &self.quick.engine;
        let component = Component::new(engine, bytes)
            .map_err(|e| PluginError::Compile { plugin: name.into(), reason: one_line(&format!("{e:#}")) })?;
        let ty = component.component_type();
        let imports = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        Ok((imports, exports))
    }

    /// Reads (a regular file of at most [`file::DEFAULT_MAX_PLUGIN_BYTES`], see [`file`]) and
    /// loads the component file `path` as plugin `name`.
    ///
    /// # Errors
    /// [`PluginError::Read`] when the file cannot be read; otherwise as [`load`](Self::load).
    pub fn load_file(&self, name: &str, path: &std::path::Path) -> Result<Arc<Plugin>, PluginError> {
        let bytes = file::read_plugin_file(path, file::DEFAULT_MAX_PLUGIN_BYTES).map_err(|e| PluginError::Read {
            plugin: name.into(),
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        self.load(name, &bytes, PluginOrigin::File(path.to_path_buf()))
    }
}

/// What the host does not offer, by WASI package, in plain words: the reason a component
/// importing it cannot be linked.
const FORBIDDEN: [(&str, &str); 6] = [
    ("wasi:filesystem", "plugins have no file system"),
    ("wasi:sockets", "plugins have no network"),
    ("wasi:http", "plugins have no network"),
    ("wasi:cli", "plugins have no environment, arguments, standard streams or exit"),
    ("wasi:clocks", "plugins have no clock (events carry their times)"),
    ("wasi:random", "plugins have no random source"),
];

/// The WASI imports among `imports` (a component's import names) in plain words, e.g.
/// `imports wasi:filesystem/types@0.2.6: plugins have no file system`; `wasi:io` is named only
/// when nothing else is (every other WASI interface pulls it in). `None` when no import is WASI.
fn forbidden_imports(imports: &[String]) -> Option<String> {
    let mut said: Vec<String> = FORBIDDEN
        .iter()
        .filter_map(|(package, words)| {
            let used: Vec<&str> = imports.iter().filter(|i| i.starts_with(package)).map(String::as_str).collect();
            (!used.is_empty()).then(|| format!("imports {}: {words}", used.join(", ")))
        })
        .collect();
    if said.is_empty() {
        let io: Vec<&str> = imports.iter().filter(|i| i.starts_with("wasi:")).map(String::as_str).collect();
        if io.is_empty() {
            return None;
        }
        said.push(format!("imports {}: plugins have no WASI streams or polling", io.join(", ")));
    }
    Some(format!(
        "{}; build it without WASI (a Rust plugin: no std file, network, clock or random use)",
        said.join("; ")
    ))
}

/// The export of a key plugin's `*-projected` world that lists the key fields it reads.
pub(crate) const KEY_FIELDS_EXPORT: &str = "key-fields";

/// The export of the `aggregate-key-projected` world that names the key field the local key is.
pub(crate) const LOCAL_KEY_FIELD_EXPORT: &str = "local-key-field";

/// The export of the `filter-enriched` world that lists the enrichment fields a filter reads.
pub(crate) const ENRICHMENT_FIELDS_EXPORT: &str = "enrichment-fields";

/// The kind of a component exporting `exports` (names of its top-level exports), or why it is
/// none: no world, several, or a world of an older WIT (a sink's `send-batch`, a filter without
/// `fields`).
fn kind_from_exports(exports: &[String]) -> Result<PluginKind, String> {
    let kinds: Vec<PluginKind> =
        PluginKind::ALL.into_iter().filter(|k| exports.iter().any(|e| e == k.batch_export())).collect();
    match kinds.as_slice() {
        [PluginKind::Filter] if !exports.iter().any(|e| e == "fields") => Err(format!(
            "a filter built against an older `filter` world (no `fields` export: filters now declare \
             the fields they read and get a projected batch): rebuild it with the current SDK or WIT; \
             it exports: [{}]",
            exports.join(", ")
        )),
        [kind] => Ok(*kind),
        [] if exports.iter().any(|e| e == "send-batch") => Err(format!(
            "a sink built against an older WIT (exports `send-batch`, now `deliver-batch`): rebuild it; \
             it exports: [{}]",
            exports.join(", ")
        )),
        [] => Err(format!(
            "exports no eventpipe plugin world (expected one of: {}); it exports: [{}]",
            PluginKind::ALL.map(|k| k.world()).join(", "),
            exports.join(", ")
        )),
        several => Err(format!(
            "exports several plugin worlds at once: {}",
            several.iter().map(|k| k.world()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// `text` on one line: each line trimmed, joined by spaces, with no space inside brackets
/// (wasmparser's errors print byte arrays one element per line).
fn one_line(text: &str) -> String {
    let joined = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
    joined.replace("[ ", "[").replace(", ]", "]").replace(" ]", "]")
}

/// How long a compile may take before eventpipe says that it is compiling (a cache hit or a
/// small plugin never does).
pub const SLOW_COMPILE_NOTICE: std::time::Duration = std::time::Duration::from_secs(1);

/// While a compile runs: after [`SLOW_COMPILE_NOTICE`], one line on stderr
/// (`eventpipe: compiling plugin `X` (18.4 MB)…`), and when it ends, its time; nothing for a
/// faster compile. A Python plugin compiles for ~14 s once (then the cache has it), which is
/// otherwise a silent pause.
struct SlowCompileNotice {
    done: Option<std::sync::mpsc::Sender<()>>,
    watcher: Option<std::thread::JoinHandle<()>>,
}

impl SlowCompileNotice {
    fn start(name: &str, bytes: usize) -> Self {
        Self::start_with(name, bytes, SLOW_COMPILE_NOTICE, |line| eprintln!("eventpipe: {line}"))
    }

    fn start_with(name: &str, bytes: usize, after: std::time::Duration, say: impl Fn(String) + Send + 'static) -> Self {
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let name = name.to_string();
        let started = std::time::Instant::now();
        let watcher = std::thread::Builder::new().name("eventpipe-compile-notice".into()).spawn(move || {
            if finished.recv_timeout(after) != Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                return;
            }
            say(format!("compiling plugin `{name}` ({:.1} MB)…", bytes as f64 / 1e6));
            let _ = finished.recv();
            say(format!("compiled plugin `{name}` in {:.1} s", started.elapsed().as_secs_f64()));
        });
        Self { done: Some(done), watcher: watcher.ok() }
    }
}

impl Drop for SlowCompileNotice {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_filter_without_fields_is_from_the_older_world_and_says_rebuild() {
        let old = kind_from_exports(&names(&["filter", "filter-batch"])).unwrap_err();
        assert!(old.contains("older `filter` world") && old.contains("rebuild"), "{old}");
        assert_eq!(kind_from_exports(&names(&["filter", "fields", "filter-batch"])), Ok(PluginKind::Filter));
        assert_eq!(kind_from_exports(&names(&["spam-key", "spam-key-batch"])), Ok(PluginKind::SpamKey));
        assert!(kind_from_exports(&names(&["send-batch"])).unwrap_err().contains("older WIT"));
        assert!(kind_from_exports(&names(&["filter-batch", "watch-batch"])).unwrap_err().contains("several"));
    }
}

#[cfg(test)]
mod import_tests {
    use super::*;

    /// The imports of a Rust component that reads a file with `std::fs` (wasm32-wasip2): the
    /// file system is named, in plain words, and `wasi:io/poll` (the first import wasmtime
    /// could not link) is not.
    #[test]
    fn a_forbidden_import_is_named_in_plain_words() {
        let imports: Vec<String> = [
            "wasi:io/poll@0.2.6",
            "wasi:io/error@0.2.6",
            "wasi:io/streams@0.2.6",
            "wasi:filesystem/types@0.2.6",
            "wasi:filesystem/preopens@0.2.6",
            "eventpipe:plugin/log@0.1.0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let said = forbidden_imports(&imports).unwrap();
        assert!(
            said.starts_with(
                "imports wasi:filesystem/types@0.2.6, wasi:filesystem/preopens@0.2.6: plugins have no file system"
            ),
            "{said}"
        );
        assert!(!said.contains("wasi:io"), "{said}");
        let only_io = forbidden_imports(&imports[..1]).unwrap();
        assert!(only_io.contains("wasi:io/poll@0.2.6"), "{only_io}");
        assert_eq!(forbidden_imports(&imports[5..]), None, "the host's own imports are not forbidden");
    }
}

#[cfg(test)]
mod slow_compile_tests {
    use super::*;

    #[test]
    fn a_slow_compile_is_announced_and_timed_and_a_fast_one_is_not() {
        let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = said.clone();
        let notice = SlowCompileNotice::start_with("py", 18_400_000, std::time::Duration::from_millis(20), move |l| {
            log.lock().unwrap().push(l)
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(notice);
        let lines = said.lock().unwrap().clone();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0], "compiling plugin `py` (18.4 MB)…");
        assert!(lines[1].starts_with("compiled plugin `py` in 0.1 s"), "{lines:?}");

        let quiet = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = quiet.clone();
        drop(SlowCompileNotice::start_with("k", 1000, std::time::Duration::from_secs(5), move |l| {
            log.lock().unwrap().push(l)
        }));
        assert!(quiet.lock().unwrap().is_empty(), "a compile under the threshold says nothing");
    }
}

impl crate::metrics::Snapshot {
    /// Adds one plugin use (its name, tenant and counters).
    pub fn add_plugin(&mut self, handle: &PluginHandle) {
        self.add_plugin_stats(handle.name(), handle.tenant(), &handle.snapshot());
        self.add_histogram(
            &crate::metrics::PLUGIN_CALL_DURATION,
            &[("plugin", handle.name()), ("tenant", handle.tenant())],
            &handle.stats().call_durations(),
        );
    }

    /// Adds plugin counters under (`plugin`, `tenant`): calls, events, fuel, time inside calls,
    /// failures per reason ([`CallFailure::LABELS`]), fallbacks, drops, instances, memo hits
    /// and misses, quarantines; and whether it is quarantined (a gauge: the largest of its uses).
    pub fn add_plugin_stats(&mut self, plugin: &str, tenant: &str, s: &PluginStatsSnapshot) {
        use crate::metrics::{
            PLUGIN_CALL_SECONDS, PLUGIN_CALLS, PLUGIN_DROPS, PLUGIN_EVENTS, PLUGIN_FAILURES, PLUGIN_FALLBACKS,
            PLUGIN_FUEL, PLUGIN_INSTANCES, PLUGIN_MEMO_HITS, PLUGIN_MEMO_MISSES, PLUGIN_QUARANTINED,
            PLUGIN_QUARANTINES,
        };
        let labels = [("plugin", plugin), ("tenant", tenant)];
        for (family, n) in [
            (&PLUGIN_CALLS, s.calls),
            (&PLUGIN_EVENTS, s.events),
            (&PLUGIN_FUEL, s.fuel_consumed),
            (&PLUGIN_CALL_SECONDS, s.call_nanos),
            (&PLUGIN_FALLBACKS, s.fallbacks),
            (&PLUGIN_DROPS, s.drops),
            (&PLUGIN_INSTANCES, s.instances),
            (&PLUGIN_MEMO_HITS, s.memo_hits),
            (&PLUGIN_MEMO_MISSES, s.memo_misses),
            (&PLUGIN_QUARANTINES, s.quarantines),
        ] {
            self.add(family, &labels, n);
        }
        let quarantined = self.get(&PLUGIN_QUARANTINED, &labels).unwrap_or(0).max(s.quarantined);
        self.set(&PLUGIN_QUARANTINED, &labels, quarantined);
        for (reason, n) in CallFailure::LABELS.iter().zip(s.failures_by_reason) {
            self.add(&PLUGIN_FAILURES, &[("plugin", plugin), ("tenant", tenant), ("reason", reason)], n);
        }
    }
}
