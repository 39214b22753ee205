//! Tenant plans: the rules of every tenant (command line, overridden by the config's
//! `[defaults]`, overridden by each tenant's `rules`), with their plugins looked up and their
//! sinks opened, built and validated away from the event path. A [`TenantPlan`] is what the
//! tenant stages ([`crate::pipeline::stage`]) run; a config reload builds a new one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::config::{Config, PluginRef, RouteConfig, Rules};
use crate::correlator::{
    CorrelatorOptions, DEFAULT_AGGREGATE_INTERVAL_IN_SECONDS, DEFAULT_AGGREGATE_MAX_EVENTS, DEFAULT_SPAM_BURST,
    DEFAULT_SPAM_QPS, MAX_LRU_CACHE_ENTRIES, SourceObjectType, or_default,
};
use crate::delivery::DeliveryMode;
use crate::event::Event;
use crate::partition::PartitionKey;
use crate::pipeline::routes::PlannedRoute;
use crate::plugin::filter::WasmFilter;
use crate::plugin::functions::{
    DEFAULT_AGGREGATE_KEY_PLUGIN, DEFAULT_MESSAGE_COMBINER_PLUGIN, DEFAULT_SPAM_KEY_PLUGIN, WasmAggregateKeyFunc,
    WasmMessageFunc, WasmSpamKeyFunc,
};
use crate::plugin::registry::{LookupError, PluginRegistry};
use crate::plugin::{FallbackPolicy, PluginHandle, PluginKind, PluginSettings};
use crate::sink::set::{SinkBuildError, SinkSet};
use crate::sink::{EventSink, SinkEntry};
use crate::tenant::rules::EventRules;
use crate::tenant::{DEFAULT_TENANT, TenantRouter};

/// Which function fills one of the correlator's key slots.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KeyChoice {
    /// The native built-in client-go function.
    #[default]
    Builtin,
    /// A plugin, by name (embedded or from the plugins directory).
    Plugin(String),
}

/// The built-in spam-key function (`--spam-key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BuiltinSpamKey {
    /// Source + involved object: client-go v0.26 `getSpamKey` (the default).
    #[default]
    SourceObject,
    /// Source + involved object + type: client-go ≥ 1.32, where Normal and Warning events of one
    /// object get separate token buckets.
    SourceObjectType,
}

/// The rules as `run` and `replay` take them on the command line, before any config: client-go's
/// numbers (0: client-go's default), the key functions, and the plugin limits.
/// [`rules`](Self::rules) resolves them into the [`TenantRules`] a config then overrides.
#[derive(Debug, Clone, Default)]
pub struct CommandLineRules {
    /// Entries in each LRU cache (client-go `LRUCacheSize`, default 4096; negative: the caches
    /// keep nothing, as in client-go).
    pub lru_cache_size: i64,
    /// Spam filter burst, events (client-go `BurstSize`, default 25).
    pub burst: i64,
    /// Spam filter refill, events per second (client-go `QPS`, default 1/300).
    pub qps: f32,
    /// Distinct messages before aggregating (client-go `MaxEvents`, default 10).
    pub max_events: i64,
    /// Aggregation window, seconds (client-go `MaxIntervalInSeconds`, default 600).
    pub max_interval_seconds: i64,
    /// The native built-in key functions instead of the (identical) default plugins.
    pub builtin: bool,
    /// An aggregate-key plugin (name or component file) instead of the default `by-reason`.
    pub aggregate_key_plugin: Option<String>,
    /// A message-combiner plugin instead of the default `similar-events`.
    pub message_combiner_plugin: Option<String>,
    /// A spam-key plugin instead of the default `source-object`.
    pub spam_key_plugin: Option<String>,
    /// The built-in spam key; [`BuiltinSpamKey::SourceObjectType`] has no plugin, so it is
    /// native even without `builtin`.
    pub spam_key: BuiltinSpamKey,
    /// Fuel, memory and fallback of every plugin call.
    pub plugin: PluginSettings,
    /// Filter plugins (`--filter NAME|FILE.wasm`, in order); empty: none given.
    pub filters: Vec<String>,
    /// The config keys the command line gave (`burst`, `fallback`, …; `filters` and `sinks`
    /// count as given when their lists are not empty): these win over the config's
    /// `[defaults]` ([`TenantRules::command_line`]).
    pub given: BTreeSet<&'static str>,
}

impl CommandLineRules {
    /// These rules resolved: component files (key functions and filters) are loaded into
    /// `registry` under their stems; no sinks (the caller adds its sinks).
    ///
    /// # Errors
    /// [`PlanError::Rule`] for a component file that cannot be loaded, or a spam-key plugin
    /// with the built-in `source-object-type` key.
    pub fn rules(&self, registry: &PluginRegistry) -> Result<TenantRules, PlanError> {
        let rule =
            |key: &str, message: String| PlanError::Rule { location: "command line".into(), key: key.into(), message };
        let choice = |key: &str, given: &Option<String>, default: &str| {
            if self.builtin {
                return Ok(KeyChoice::Builtin);
            }
            let reference = given.as_deref().unwrap_or(default);
            registry.name_or_load(reference).map(KeyChoice::Plugin).map_err(|message| rule(key, message))
        };
        let spam_key = match self.spam_key {
            BuiltinSpamKey::SourceObjectType if self.spam_key_plugin.is_some() => {
                return Err(rule(
                    "--spam-key-plugin",
                    "--spam-key source-object-type is built in; it cannot be combined with a spam-key plugin".into(),
                ));
            }
            BuiltinSpamKey::SourceObjectType => KeyChoice::Builtin,
            BuiltinSpamKey::SourceObject => {
                choice("--spam-key-plugin", &self.spam_key_plugin, DEFAULT_SPAM_KEY_PLUGIN)?
            }
        };
        Ok(TenantRules {
            lru_cache_size: self.lru_cache_size,
            burst: self.burst,
            qps: self.qps,
            max_events: self.max_events,
            max_interval_seconds: self.max_interval_seconds,
            aggregate_key: choice("--aggregate-key-plugin", &self.aggregate_key_plugin, DEFAULT_AGGREGATE_KEY_PLUGIN)?,
            message_combiner: choice(
                "--message-combiner-plugin",
                &self.message_combiner_plugin,
                DEFAULT_MESSAGE_COMBINER_PLUGIN,
            )?,
            spam_key,
            builtin_spam_key: self.spam_key,
            filters: self
                .filters
                .iter()
                .map(|f| registry.name_or_load(f).map_err(|message| rule("--filter", message)))
                .collect::<Result<_, _>>()?,
            plugin: self.plugin.clone(),
            plugin_config: BTreeMap::new(),
            sinks: Vec::new(),
            partition_key: None,
            event_rules: EventRules::default(),
            suppressed_summary_seconds: 0,
            command_line: self.given.clone(),
        })
    }
}

/// Where a setting of a tenant comes from. One precedence rule: the command line, then the
/// config file, then the built-in default; a tenant's own keys stay its own (the command line
/// replaces what `[defaults]` gives), as `kubectl` flags override a kubeconfig's values.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "from", content = "at")]
pub enum Origin {
    /// A command-line flag, e.g. `--sink`.
    Flag(String),
    /// The config file, `FILE:LINE` (`FILE` when the line is not known).
    File(String),
    /// Drop-in: a filter plugin of the plugins directory (this path).
    Directory(String),
    /// The built-in default.
    Default,
}

impl Origin {
    /// `key` of `config`: `FILE:LINE`, or `FILE` when its line is not known.
    fn in_config(config: &Config, key: &str) -> Self {
        let file = config.path.display();
        match config.key_line(key) {
            Some(line) => Origin::File(format!("{file}:{line}")),
            None => Origin::File(file.to_string()),
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Flag(flag) => write!(f, "flag {flag}"),
            Origin::File(at) => f.write_str(at),
            Origin::Directory(dir) => write!(f, "plugins directory {dir}"),
            Origin::Default => f.write_str("default"),
        }
    }
}

/// The keys whose origin [`PlannedTenant::origins`] tells.
pub const ORIGIN_KEYS: [&str; 13] = [
    "aggregate_key",
    "message_combiner",
    "spam_key",
    "filters",
    "sinks",
    "max_events",
    "max_interval_seconds",
    "burst",
    "qps",
    "lru_cache_size",
    "fuel_per_event",
    "memory_limit_bytes",
    "fallback",
];

/// The command-line flag of a config key, for [`Origin::Flag`].
fn flag_of(key: &str) -> String {
    match key {
        "aggregate_key" | "message_combiner" | "spam_key" => format!("--{}-plugin", key.replace('_', "-")),
        "filters" => "--filter".into(),
        "sinks" => "--sink".into(),
        "fallback" => "--plugin-fallback".into(),
        other => format!("--{}", other.replace('_', "-")),
    }
}

/// The concrete rules of one tenant: what the command line gives, overridden by the config's
/// `[defaults]`, overridden by the tenant's own `rules`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TenantRules {
    /// The correlator's numbers (key functions are filled from the choices below).
    pub lru_cache_size: i64,
    /// Spam filter burst, events (client-go `BurstSize`).
    pub burst: i64,
    /// Spam filter refill, events per second (client-go `QPS`).
    pub qps: f32,
    /// Distinct messages before aggregating (client-go `MaxEvents`).
    pub max_events: i64,
    /// Aggregation window, seconds (client-go `MaxIntervalInSeconds`).
    pub max_interval_seconds: i64,
    /// The aggregate-key function.
    pub aggregate_key: KeyChoice,
    /// The message combiner.
    pub message_combiner: KeyChoice,
    /// The spam-key function.
    pub spam_key: KeyChoice,
    /// With `spam_key: Builtin`: which built-in key.
    pub builtin_spam_key: BuiltinSpamKey,
    /// Filter plugins, in order.
    pub filters: Vec<String>,
    /// Fuel, memory and fallback of this tenant's plugin calls (`config` and `pure` are filled
    /// per plugin).
    pub plugin: PluginSettings,
    /// Per-plugin config (`[plugins.NAME]`).
    pub plugin_config: BTreeMap<String, BTreeMap<String, String>>,
    /// Where results go, each with its own delivery mode if it has one.
    pub sinks: Vec<SinkEntry>,
    /// What this tenant's events are partitioned by; `None`: the router's default.
    pub partition_key: Option<PartitionKey>,
    /// Declarative `drop` / `keep` / `spam_exempt` rules ([`crate::tenant::rules`]).
    pub event_rules: EventRules,
    /// Seconds of an "N suppressed" summary window ([`crate::pipeline::suppressed`]); 0: no summaries.
    pub suppressed_summary_seconds: u64,
    /// The config keys the command line gave ([`CommandLineRules::given`]): for these, its
    /// value replaces the config's `[defaults]` (a tenant's own value stays).
    pub command_line: BTreeSet<&'static str>,
}

/// Where each key of a tenant's rules came from, by config key.
type Origins = BTreeMap<&'static str, Origin>;

/// The layers one tenant's rules come from, as [`TenantRules::overlay`] reads them.
struct Layers<'a> {
    /// The tenant's own `rules` (empty for `[defaults]`).
    own: &'a Rules,
    /// The config's `[defaults]`.
    defaults: &'a Rules,
    /// Key path prefix of the tenant's own keys (`tenants[0].rules`), for lines.
    prefix: &'a str,
    /// The config file's path and its key lines.
    config: &'a Config,
    /// The drop-in filters of the plugins directory, in file-name order.
    directory_filters: &'a [String],
    /// The plugins directory, for [`Origin::Directory`].
    directory: Option<&'a std::path::Path>,
}

/// Where one key of a tenant's rules is taken from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layer {
    Own,
    CommandLine,
    Defaults,
    Builtin,
}

impl TenantRules {
    /// These rules (the command line's) with a tenant's config layers over them, each key by
    /// the one precedence rule: the tenant's own key, else the command line's when it gave
    /// one, else `[defaults]`, else the built-in default (for `filters`: the drop-in filters of
    /// the plugins directory). Returns the rules and where each key came from.
    ///
    /// # Errors
    /// A sink spec that does not parse: `(key, message)`.
    fn overlay(&self, layers: &Layers<'_>) -> Result<(Self, Origins), (String, String)> {
        let Layers { own, defaults, prefix, config, directory_filters, directory } = *layers;
        let at = |key: String| Origin::in_config(config, &key);
        let mut origins = BTreeMap::new();
        let mut layer = |key: &'static str, own_set: bool, defaults_set: bool| {
            let (layer, origin) = if own_set {
                (Layer::Own, at(format!("{prefix}.{key}")))
            } else if self.gives(key) {
                (Layer::CommandLine, Origin::Flag(flag_of(key)))
            } else if defaults_set {
                (Layer::Defaults, at(format!("defaults.{key}")))
            } else {
                (Layer::Builtin, Origin::Default)
            };
            origins.insert(key, origin);
            layer
        };
        macro_rules! pick {
            ($key:ident, $base:expr, $map:expr) => {{
                match layer(stringify!($key), own.$key.is_some(), defaults.$key.is_some()) {
                    Layer::Own => own.$key.as_ref().map($map).expect("set"),
                    Layer::Defaults => defaults.$key.as_ref().map($map).expect("set"),
                    Layer::CommandLine | Layer::Builtin => $base,
                }
            }};
        }
        // The event rules' origins (their values are picked below, by the same precedence).
        layer("drop", own.drop.is_some(), defaults.drop.is_some());
        layer("keep", own.keep.is_some(), defaults.keep.is_some());
        layer("spam_exempt", own.spam_exempt.is_some(), defaults.spam_exempt.is_some());
        let choice =
            |r: &PluginRef| if r.is_builtin() { KeyChoice::Builtin } else { KeyChoice::Plugin(r.name.clone()) };
        let sink_specs = pick!(sinks, None, |s: &Vec<String>| Some(s.clone()));
        let mut sinks: Vec<SinkEntry> = match sink_specs {
            Some(specs) => specs
                .iter()
                .map(|s| s.parse::<SinkEntry>().map_err(|e| ("sinks".to_string(), e.to_string())))
                .collect::<Result<_, _>>()?,
            None => self.sinks.clone(),
        };
        // A sink named twice would get every result twice.
        let mut seen = std::collections::HashSet::new();
        sinks.retain(|s| seen.insert(s.spec.identity()));
        let names = |r: &Rules| r.filters.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        let filters_layer = layer("filters", own.filters_listed, defaults.filters_listed);
        let filters = match filters_layer {
            Layer::Own => names(own),
            Layer::Defaults => names(defaults),
            Layer::CommandLine => self.filters.clone(),
            Layer::Builtin => directory_filters.to_vec(),
        };
        let rules = Self {
            lru_cache_size: pick!(lru_cache_size, self.lru_cache_size, |v| *v),
            burst: pick!(burst, self.burst, |v| *v),
            qps: pick!(qps, self.qps, |v| *v),
            max_events: pick!(max_events, self.max_events, |v| *v),
            max_interval_seconds: pick!(max_interval_seconds, self.max_interval_seconds, |v| *v),
            aggregate_key: pick!(aggregate_key, self.aggregate_key.clone(), choice),
            message_combiner: pick!(message_combiner, self.message_combiner.clone(), choice),
            spam_key: pick!(spam_key, self.spam_key.clone(), choice),
            builtin_spam_key: self.builtin_spam_key,
            filters,
            plugin: PluginSettings {
                // 0 means "the default", as for the correlator's numbers.
                fuel_per_event: match pick!(fuel_per_event, self.plugin.fuel_per_event, |v| *v) {
                    0 => self.plugin.fuel_per_event,
                    f => f,
                },
                memory_limit_bytes: match pick!(memory_limit_bytes, self.plugin.memory_limit_bytes, |v| *v) {
                    0 => self.plugin.memory_limit_bytes,
                    m => m,
                },
                fallback: pick!(fallback, self.plugin.fallback, |v| *v),
                // Per plugin, from its `[plugins.NAME]` table: see `settings_for`.
                config: BTreeMap::new(),
                pure: true,
                memo_max_entries: self.plugin.memo_max_entries,
            },
            plugin_config: self.plugin_config.clone(),
            sinks,
            partition_key: own.partition_key.or(defaults.partition_key).or(self.partition_key),
            event_rules: EventRules {
                drop: own
                    .drop
                    .clone()
                    .or_else(|| defaults.drop.clone())
                    .unwrap_or_else(|| self.event_rules.drop.clone()),
                keep: own.keep.clone().or_else(|| defaults.keep.clone()).or_else(|| self.event_rules.keep.clone()),
                spam_exempt: own
                    .spam_exempt
                    .clone()
                    .or_else(|| defaults.spam_exempt.clone())
                    .unwrap_or_else(|| self.event_rules.spam_exempt.clone()),
            },
            suppressed_summary_seconds: own
                .suppressed_summary_seconds
                .or(defaults.suppressed_summary_seconds)
                .unwrap_or(self.suppressed_summary_seconds),
            command_line: self.command_line.clone(),
        };
        if filters_layer == Layer::Builtin && !directory_filters.is_empty() {
            let dir = directory.map(|d| d.display().to_string()).unwrap_or_default();
            origins.insert("filters", Origin::Directory(dir));
        }
        Ok((rules, origins))
    }

    /// Whether the command line gave config key `key` (non-empty `sinks` and `filters` always
    /// come from it).
    fn gives(&self, key: &str) -> bool {
        self.command_line.contains(key)
            || (key == "sinks" && !self.sinks.is_empty())
            || (key == "filters" && !self.filters.is_empty())
    }

    /// Where each key of these rules came from without a config file: the command line, the
    /// plugins directory (drop-in filters) or the built-in default.
    fn command_line_origins(&self, directory: Option<&std::path::Path>) -> BTreeMap<&'static str, Origin> {
        let mut origins = BTreeMap::new();
        for key in ORIGIN_KEYS {
            let origin = if self.gives(key) { Origin::Flag(flag_of(key)) } else { Origin::Default };
            origins.insert(key, origin);
        }
        if !self.gives("filters") && !self.filters.is_empty() {
            origins
                .insert("filters", Origin::Directory(directory.map(|d| d.display().to_string()).unwrap_or_default()));
        }
        origins
    }

    /// The plugin settings a call of `plugin` gets under these rules: the limits and fallback,
    /// with its `[plugins.NAME]` config and purity ([`PluginSettings::with_plugin_table`]).
    pub fn settings_for(&self, plugin: &str) -> PluginSettings {
        self.plugin.with_plugin_table(self.plugin_config.get(plugin).cloned().unwrap_or_default())
    }
}

/// Why a plan could not be built (the previous plan keeps serving).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A rule names a plugin that does not exist or is of the wrong kind.
    #[error("{location}: {key}: {error}")]
    Plugin {
        /// `FILE:LINE` of the reference (or `command line`).
        location: String,
        /// The config key, e.g. `tenants[0].rules.aggregate_key`.
        key: String,
        /// What is wrong.
        #[source]
        error: Box<LookupError>,
    },
    /// A rule's value is invalid.
    #[error("{location}: {key}: {message}")]
    Rule {
        /// `FILE` of the config (or `command line`).
        location: String,
        /// The config key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A sink could not be opened.
    #[error(transparent)]
    Sink(#[from] SinkBuildError),
}

/// One tenant of a plan, ready to run: its rules, the plugins they name (looked up and checked
/// to be of the right kind), and its opened sinks.
pub struct PlannedTenant {
    /// Tenant name (`default` for the defaults).
    pub name: Arc<str>,
    /// Its rules (compared on reload: equal rules keep the tenant's correlator state).
    pub rules: TenantRules,
    /// Where each key of [`ORIGIN_KEYS`] came from (empty for a tenant not planned from
    /// rules).
    pub origins: BTreeMap<&'static str, Origin>,
    /// Numbers and native key functions; plugin slots are filled per instance.
    options: CorrelatorOptions,
    aggregate_key: Option<PluginHandle>,
    message_combiner: Option<PluginHandle>,
    spam_key: Option<PluginHandle>,
    filters: Vec<PluginHandle>,
    sinks: Vec<TenantSink>,
    /// The label of each sink for per-sink counts: its spec, `watch-cache` for the watch
    /// cache's tap, `sink N` for a sink given as an object.
    sink_labels: Vec<Arc<str>>,
    handles: Vec<PluginHandle>,
    /// The routes of this tenant's writes: the top-level ones, then its own.
    routes: Vec<TenantRoute>,
}

/// One route of a tenant: the route (an index into [`TenantPlan::routes`]) and its sinks,
/// opened for this tenant as the tenant's own are.
#[derive(Clone)]
pub struct TenantRoute {
    /// The route, an index into [`TenantPlan::routes`].
    pub route: usize,
    /// Its sinks, in the route's order.
    pub sinks: Vec<TenantSink>,
    /// The label of each sink in per-sink counts (its spec, as the tenant's sinks are labelled).
    pub labels: Vec<Arc<str>>,
}

/// The per-sink label of the watch cache's tap (`run --serve`): its writes are counted apart
/// from the sinks' ([`crate::pipeline::router::RouterStats::watch_cache`]).
pub const WATCH_CACHE_LABEL: &str = "watch-cache";

/// The per-sink labels of `sinks` opened from `entries` (the watch cache's tap after them).
fn sink_labels(entries: &[SinkEntry], sinks: usize) -> Vec<Arc<str>> {
    (0..sinks)
        .map(|i| match entries.get(i) {
            Some(entry) => entry.spec.to_string().into(),
            None if !entries.is_empty() => WATCH_CACHE_LABEL.into(),
            None => format!("sink {i}").into(),
        })
        .collect()
}

/// One opened sink of a tenant, with its own delivery mode (`None`: the run's).
#[derive(Clone)]
pub struct TenantSink {
    /// The sink.
    pub sink: Arc<dyn EventSink>,
    /// Its delivery mode, if the rule gave one ([`SinkEntry`]).
    pub delivery: Option<DeliveryMode>,
}

impl PlannedTenant {
    /// A tenant with no plugins: `options` as given (native or any key functions), no filter,
    /// one sink — what client-go's `StartRecordingToSink` runs.
    pub fn fixed(name: &str, options: CorrelatorOptions, sink: Arc<dyn EventSink>) -> Self {
        Self::fixed_sinks(name, options, vec![TenantSink { sink, delivery: None }])
    }

    /// As [`fixed`](Self::fixed), with several sinks, each with its own delivery mode.
    pub fn fixed_sinks(name: &str, options: CorrelatorOptions, sinks: Vec<TenantSink>) -> Self {
        Self {
            name: name.into(),
            rules: TenantRules::default(),
            origins: BTreeMap::new(),
            options,
            aggregate_key: None,
            message_combiner: None,
            spam_key: None,
            filters: Vec::new(),
            sink_labels: sink_labels(&[], sinks.len()),
            sinks,
            handles: Vec::new(),
            routes: Vec::new(),
        }
    }

    /// Fresh filter adapters and correlator options for one running copy of this tenant (a
    /// tenant stage): each copy calls its plugins through instances of its own, so partitions
    /// on different cores never wait for each other's plugin calls.
    pub fn instantiate(&self) -> (Vec<WasmFilter>, CorrelatorOptions) {
        const CHECKED: &str = "the plugin's kind was checked when the plan was built";
        let mut options = self.options.clone();
        if let Some(h) = &self.aggregate_key {
            options.key_func = Some(Arc::new(WasmAggregateKeyFunc::new(h.clone()).expect(CHECKED)));
        }
        if let Some(h) = &self.message_combiner {
            options.message_func = Some(Arc::new(WasmMessageFunc::new(h.clone()).expect(CHECKED)));
        }
        if let Some(h) = &self.spam_key {
            options.spam_key_func = Some(Arc::new(WasmSpamKeyFunc::new(h.clone()).expect(CHECKED)));
        }
        let filters = self.filters.iter().map(|h| WasmFilter::new(h.clone()).expect(CHECKED)).collect();
        (filters, options)
    }

    /// The tenant's sinks, in rule order; each gets every result of the tenant's correlator.
    pub fn sinks(&self) -> &[TenantSink] {
        &self.sinks
    }

    /// The label of each of [`sinks`](Self::sinks) in per-sink counts (its spec as written,
    /// credentials redacted; `watch-cache` for the watch cache).
    pub fn sink_labels(&self) -> &[Arc<str>] {
        &self.sink_labels
    }

    /// The routes of this tenant's writes, each with its sinks opened for this tenant.
    pub fn routes(&self) -> &[TenantRoute] {
        &self.routes
    }

    /// Opens the sinks of the routes `routes` (indices into `all`) for this tenant, when
    /// `sinks` is given (else only records the routes: `validate` and `config show` open
    /// nothing).
    ///
    /// # Errors
    /// [`PlanError::Sink`] for each sink that cannot be opened.
    fn open_routes(
        &mut self,
        routes: impl IntoIterator<Item = usize>,
        all: &[PlannedRoute],
        registry: &PluginRegistry,
        sinks: Option<&SinkSet>,
    ) -> Result<(), Vec<PlanError>> {
        let mut errors = Vec::new();
        for route in routes {
            let entries: Vec<SinkEntry> = all[route].route.sinks.iter().filter_map(|s| s.parse().ok()).collect();
            let mut opened = Vec::new();
            if let Some(set) = sinks {
                for entry in &entries {
                    match set.open(entry, &self.name, &|p| self.rules.settings_for(p), registry) {
                        Ok(sink) => opened.push(TenantSink { sink, delivery: entry.delivery }),
                        Err(e) => errors.push(e.into()),
                    }
                }
            }
            let labels = entries.iter().map(|e| e.spec.to_string().into()).collect();
            self.routes.push(TenantRoute { route, sinks: opened, labels });
        }
        if errors.is_empty() { Ok(()) } else { Err(errors) }
    }

    /// A tenant `name` with `rules` whose sinks are not opened (`replay` writes results
    /// itself): plugins looked up in `registry` as [`TenantPlan::build`] does.
    ///
    /// # Errors
    /// [`PlanError`] for a missing plugin or one of the wrong kind.
    pub fn without_sinks(name: &str, mut rules: TenantRules, registry: &PluginRegistry) -> Result<Self, PlanError> {
        rules.sinks.clear();
        plan_tenant(name, rules, &[], "command line", registry, None).map_err(|mut errors| errors.swap_remove(0))
    }

    /// Whether a plugin of this tenant failed under the `fail` policy.
    pub fn failed(&self) -> bool {
        self.handles.iter().any(|h| h.settings().fallback == FallbackPolicy::Fail && h.stats().snapshot().drops > 0)
    }
}

impl std::fmt::Debug for PlannedTenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlannedTenant").field("name", &self.name).field("rules", &self.rules).finish_non_exhaustive()
    }
}

/// Every tenant (config order, then `default`) and how events are routed to them.
pub struct TenantPlan {
    router: TenantRouter,
    /// Whether some tenant sets its own partition key (then events are routed to partition).
    tenant_keys: bool,
    /// Config tenants in file order, then the defaults.
    pub tenants: Vec<PlannedTenant>,
    /// Every route: the top-level `[[routes]]` in file order, then each tenant's own
    /// ([`PlannedTenant::routes`] points into these).
    pub routes: Vec<PlannedRoute>,
}

impl std::fmt::Debug for TenantPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantPlan").field("tenants", &self.tenants).finish_non_exhaustive()
    }
}

impl TenantPlan {
    /// A plan of one tenant ([`DEFAULT_TENANT`]) that gets every event.
    pub fn single(tenant: PlannedTenant) -> Self {
        Self::new(TenantRouter::new(Vec::new()), vec![tenant])
    }

    fn new(router: TenantRouter, tenants: Vec<PlannedTenant>) -> Self {
        let tenant_keys = tenants.iter().any(|t| t.rules.partition_key.is_some());
        Self { router, tenant_keys, tenants, routes: Vec::new() }
    }

    /// The plan for `config` (or only the defaults when `None`) over the command line's `base`
    /// rules: plugins looked up in `registry`, sinks opened in `sinks`.
    ///
    /// # Errors
    /// [`PlanError`] for a missing plugin, a plugin of the wrong kind, a bad rule or a sink that
    /// cannot be opened; nothing is changed then.
    pub fn build(
        base: &TenantRules,
        config: Option<&Config>,
        registry: &PluginRegistry,
        sinks: &SinkSet,
    ) -> Result<Self, PlanError> {
        Self::build_checked(base, config, registry, Some(sinks)).map_err(|mut errors| errors.swap_remove(0))
    }

    /// As [`build`](Self::build) without opening any sink (`eventpipe bench` runs the stages
    /// only).
    ///
    /// # Errors
    /// As [`build`](Self::build).
    pub fn build_unopened(
        base: &TenantRules,
        config: Option<&Config>,
        registry: &PluginRegistry,
    ) -> Result<Self, PlanError> {
        Self::build_checked(base, config, registry, None).map_err(|mut errors| errors.swap_remove(0))
    }

    /// Every problem [`build`](Self::build) would meet (each tenant's first), without opening
    /// any sink: what `eventpipe validate` lists. Empty when the plan can be built.
    pub fn problems(base: &TenantRules, config: Option<&Config>, registry: &PluginRegistry) -> Vec<PlanError> {
        Self::build_checked(base, config, registry, None).err().unwrap_or_default()
    }

    /// The plan, or every tenant's first problem (in file order, `[defaults]` last).
    fn build_checked(
        base: &TenantRules,
        config: Option<&Config>,
        registry: &PluginRegistry,
        sinks: Option<&SinkSet>,
    ) -> Result<Self, Vec<PlanError>> {
        let directory_filters = registry.directory_plugins(PluginKind::Filter);
        let Some(config) = config else {
            let mut rules = base.clone();
            if !rules.gives("filters") {
                rules.filters = directory_filters;
            }
            let origins = rules.command_line_origins(registry.dir());
            let mut tenant = plan_tenant(DEFAULT_TENANT, rules, &[], "command line", registry, sinks)?;
            tenant.origins = origins;
            return Ok(Self::new(TenantRouter::new(Vec::new()), vec![tenant]));
        };
        let file = config.path.display().to_string();
        let mut with_config = base.clone();
        with_config.plugin_config = config.plugin_config.clone();
        let mut errors = Vec::new();
        let mut tenants = Vec::with_capacity(config.tenants.len() + 1);
        let none = Rules::default();
        let named =
            config.tenants.iter().enumerate().map(|(i, t)| (format!("tenants[{i}].rules"), &t.name, &t.own, &t.rules));
        let defaults = ("defaults".to_string(), &DEFAULT_TENANT.to_string(), &none, &config.defaults);
        // Every route: the top-level ones, then each tenant's own (in tenant order).
        let mut routes: Vec<PlannedRoute> = config.routes.iter().map(|r| PlannedRoute::new(r, &file)).collect();
        let everyone = 0..routes.len();
        let own_routes: Vec<Vec<usize>> = config
            .tenants
            .iter()
            .map(|t| {
                let own: &[RouteConfig] = t.own.routes.as_deref().unwrap_or_default();
                let first = routes.len();
                routes.extend(own.iter().map(|r| PlannedRoute::new(r, &file)));
                (first..routes.len()).collect()
            })
            .chain([Vec::new()])
            .collect();
        for ((prefix, name, own, merged), own_routes) in named.chain([defaults]).zip(own_routes) {
            let layers = Layers {
                own,
                defaults: &config.defaults,
                prefix: &prefix,
                config,
                directory_filters: &directory_filters,
                directory: registry.dir(),
            };
            let planned = with_config
                .overlay(&layers)
                .map_err(|(key, message)| {
                    vec![PlanError::Rule { location: file.clone(), key: format!("{prefix}.{key}"), message }]
                })
                .and_then(|(overlaid, mut origins)| {
                    let mut tenant = plan_tenant(name, overlaid, &refs(merged), &file, registry, sinks)?;
                    tenant.open_routes(everyone.clone().chain(own_routes), &routes, registry, sinks)?;
                    if let Some(tenant_key) = prefix.strip_suffix(".rules") {
                        origins.insert("match", Origin::in_config(config, &format!("{tenant_key}.match")));
                    }
                    tenant.origins = origins;
                    Ok(tenant)
                });
            match planned {
                Ok(t) => tenants.push(t),
                Err(e) => errors.extend(e),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Self { routes, ..Self::new(config.router(), tenants) })
    }

    /// Takes over the gates of `previous`'s routes (their buckets and what they held back) for
    /// the routes of this plan that are the same ([`PlannedRoute::keep_state_of`]): a config
    /// reload restarts only the routes it changed.
    pub fn keep_route_state(&mut self, previous: &TenantPlan) {
        for route in &mut self.routes {
            if let Some(old) = previous.routes.iter().find(|old| old.route.name == route.route.name) {
                route.keep_state_of(old);
            }
        }
    }

    /// The index into [`tenants`](Self::tenants) of `event`'s tenant.
    pub fn route(&self, event: &Event) -> usize {
        self.router.route(event, event.ingest_headers.get()).unwrap_or(self.tenants.len() - 1)
    }

    /// The partition of `event` among `partitions`: by its tenant's partition key, else by
    /// `default` (events are routed only when some tenant sets its own key).
    pub fn partition(&self, event: &Event, default: PartitionKey, partitions: usize) -> usize {
        let key = if self.tenant_keys {
            self.tenants[self.route(event)].rules.partition_key.unwrap_or(default)
        } else {
            default
        };
        key.partition(event, partitions)
    }

    /// One line per tenant for logs: name, plugins and numbers.
    pub fn describe(&self) -> Vec<String> {
        self.tenants
            .iter()
            .map(|t| {
                let r = &t.rules;
                let name = |c: &KeyChoice| match c {
                    KeyChoice::Builtin => "builtin".to_string(),
                    KeyChoice::Plugin(p) => p.clone(),
                };
                // What only some tenants set, when set: rules, summaries, plugin config.
                let mut extra = String::new();
                let rules = &r.event_rules;
                let names = |rules: &[crate::tenant::rules::EventRule]| {
                    rules.iter().map(|r| r.name.to_string()).collect::<Vec<_>>().join(", ")
                };
                if !rules.drop.is_empty() {
                    extra += &format!(" drop=[{}]", names(&rules.drop));
                }
                if let Some(keep) = &rules.keep {
                    extra += &format!(" keep=[{}]", names(keep));
                }
                if !rules.spam_exempt.is_empty() {
                    extra += &format!(" spam_exempt=[{}]", names(&rules.spam_exempt));
                }
                if r.suppressed_summary_seconds > 0 {
                    extra += &format!(" suppressed_summary_seconds={}", r.suppressed_summary_seconds);
                }
                if !t.routes.is_empty() {
                    let names: Vec<&str> = t.routes.iter().map(|tr| &*self.routes[tr.route].route.name).collect();
                    extra += &format!(" routes=[{}]", names.join(", "));
                }
                let used = [&r.aggregate_key, &r.message_combiner, &r.spam_key]
                    .into_iter()
                    .filter_map(|c| match c {
                        KeyChoice::Plugin(p) => Some(p),
                        KeyChoice::Builtin => None,
                    })
                    .chain(&r.filters);
                for plugin in used {
                    if let Some(config) = r.plugin_config.get(plugin).filter(|c| !c.is_empty()) {
                        let pairs: Vec<String> = config.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
                        extra += &format!(" plugins.{plugin}={{{}}}", pairs.join(", "));
                    }
                }
                format!(
                    "tenant `{}`: aggregate_key={} message_combiner={} spam_key={} filters=[{}] max_events={} \
                     max_interval_seconds={} burst={} qps={} lru_cache_size={} fallback={:?} sinks=[{}]{extra}",
                    t.name,
                    name(&r.aggregate_key),
                    name(&r.message_combiner),
                    name(&r.spam_key),
                    r.filters.join(", "),
                    // What the correlator applies: 0 is client-go's default.
                    or_default(r.max_events, DEFAULT_AGGREGATE_MAX_EVENTS),
                    or_default(r.max_interval_seconds, DEFAULT_AGGREGATE_INTERVAL_IN_SECONDS),
                    or_default(r.burst, DEFAULT_SPAM_BURST),
                    or_default(r.qps, DEFAULT_SPAM_QPS),
                    or_default(r.lru_cache_size, MAX_LRU_CACHE_ENTRIES as i64),
                    r.plugin.fallback,
                    r.sinks.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                )
            })
            .collect()
    }

    /// Events the key-function plugins dropped by their fallback policy, per plugin and policy
    /// (`drop`, `fail`), over every tenant.
    pub fn plugin_drops(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        let mut drops: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for t in &self.tenants {
            for h in [&t.aggregate_key, &t.message_combiner, &t.spam_key].into_iter().flatten() {
                let n = h.stats().snapshot().drops;
                if n > 0 {
                    let policy = format!("{:?}", h.settings().fallback).to_lowercase();
                    *drops.entry(h.name().to_string()).or_default().entry(policy).or_default() += n;
                }
            }
        }
        drops
    }

    /// Every plugin handle of every tenant (for metrics).
    pub fn handles(&self) -> impl Iterator<Item = &PluginHandle> {
        self.tenants.iter().flat_map(|t| &t.handles)
    }

    /// Whether any plugin of any tenant failed under the `fail` policy.
    pub fn failed(&self) -> bool {
        self.tenants.iter().any(PlannedTenant::failed)
    }
}

/// What a running pipeline builds its plans from: the command line's rules, the config last
/// accepted, and the drop-in filters of the plugins directory. A plugin file added or removed
/// builds a new plan when it changes the drop-in filters (the router takes it between two
/// batches: nothing lost, the tenants' correlator state kept); a config change builds one
/// over the new config.
pub struct Replanner {
    base: TenantRules,
    config: std::sync::Mutex<Option<Config>>,
    /// The drop-in filters the current plan was built with.
    directory_filters: std::sync::Mutex<Vec<String>>,
    /// Plugins already warned about as used by no tenant (each is warned about once).
    warned: std::sync::Mutex<BTreeSet<String>>,
}

impl Replanner {
    /// Plans over `base` and `config` (the one the first plan was built from).
    pub fn new(base: TenantRules, config: Option<Config>, registry: &PluginRegistry) -> Self {
        Self {
            base,
            config: std::sync::Mutex::new(config),
            directory_filters: std::sync::Mutex::new(registry.directory_plugins(PluginKind::Filter)),
            warned: std::sync::Mutex::new(BTreeSet::new()),
        }
    }

    /// After a plugin file changed: a new plan when the drop-in filters changed, else `None`.
    ///
    /// # Errors
    /// As [`TenantPlan::build`] (the current plan keeps serving).
    pub fn plugins_changed(&self, registry: &PluginRegistry, sinks: &SinkSet) -> Option<Result<TenantPlan, PlanError>> {
        let now = registry.directory_plugins(PluginKind::Filter);
        let mut filters = self.directory_filters.lock().unwrap_or_else(|p| p.into_inner());
        if *filters == now {
            return None;
        }
        *filters = now;
        let config = self.config.lock().unwrap_or_else(|p| p.into_inner());
        Some(TenantPlan::build(&self.base, config.as_ref(), registry, sinks))
    }

    /// After the config file changed: the plan over `config`, which becomes the current config.
    ///
    /// # Errors
    /// As [`TenantPlan::build`]; the previous config stays then.
    pub fn config_changed(
        &self,
        config: Config,
        registry: &PluginRegistry,
        sinks: &SinkSet,
    ) -> Result<TenantPlan, PlanError> {
        let plan = TenantPlan::build(&self.base, Some(&config), registry, sinks)?;
        *self.config.lock().unwrap_or_else(|p| p.into_inner()) = Some(config);
        *self.directory_filters.lock().unwrap_or_else(|p| p.into_inner()) =
            registry.directory_plugins(PluginKind::Filter);
        Ok(plan)
    }

    /// One line for each drop-in filter or watcher of the plugins directory that nothing uses
    /// (because the config's `filters`, `--filter`, `--watcher` or `[[watchers]]` took control)
    /// and was not told about before, saying how to enable it. `watchers`: the watcher plugins
    /// attached.
    pub fn unused(&self, plan: &TenantPlan, registry: &PluginRegistry, watchers: &[String]) -> Vec<String> {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        let dir = registry.dir().map(|d| d.display().to_string()).unwrap_or_default();
        let mut lines = Vec::new();
        for name in registry.directory_plugins(PluginKind::Filter) {
            if plan.tenants.iter().any(|t| t.rules.filters.contains(&name)) || !warned.insert(name.clone()) {
                continue;
            }
            let how = if self.base.gives("filters") {
                format!("--filter replaces the drop-in filters; add --filter {name} to run it")
            } else {
                format!("the config lists `filters`; add \"{name}\" to `filters` in [defaults] or a tenant's rules")
            };
            lines.push(format!("filter plugin `{name}` in the plugins directory {dir} is used by no tenant: {how}"));
        }
        for name in registry.directory_plugins(PluginKind::Watcher) {
            if watchers.contains(&name) || !warned.insert(name.clone()) {
                continue;
            }
            lines.push(format!(
                "watcher plugin `{name}` in the plugins directory {dir} is not attached: --watcher and [[watchers]] \
                 replace the drop-in watchers; add --watcher {name} or a [[watchers]] table with plugin = \"{name}\""
            ));
        }
        lines
    }
}

/// One setting of a tenant's effective plan, as `eventpipe config show` prints it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Setting {
    /// The config key (`burst`, `aggregate_key`, `filters[0]`, `sinks[1]`).
    pub key: String,
    /// Its value (a number, a plugin name, a sink spec).
    pub value: String,
    /// Where it came from.
    pub origin: Origin,
    /// For a plugin: the SHA-256 of its component (hex) and where that is (`embedded` or its
    /// file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// For a plugin: `embedded` or the component file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
}

/// One tenant's effective plan: every setting with its origin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TenantView {
    /// The tenant's name.
    pub tenant: String,
    /// The correlator's numbers and the plugin limits (what the correlator applies: 0 shows as
    /// client-go's default).
    pub rules: Vec<Setting>,
    /// The key functions (a plugin, or `builtin`).
    pub plugins: Vec<Setting>,
    /// The filters, in the order they run.
    pub filters: Vec<Setting>,
    /// The sinks.
    pub sinks: Vec<Setting>,
    /// Which events it gets (`match`; the defaults get what no tenant matches) and its
    /// declarative rules (`drop[i]`, `keep[i]`, `spam_exempt[i]`: `NAME: CRITERIA`).
    pub routing: Vec<Setting>,
}

impl TenantPlan {
    /// Every tenant's settings with where each came from, and the plugins' SHA-256 digests
    /// (from `registry`): what `eventpipe config show` prints.
    pub fn effective(&self, registry: &PluginRegistry) -> Vec<TenantView> {
        self.tenants
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let r = &t.rules;
                let origin = |key: &str| t.origins.get(key).cloned().unwrap_or(Origin::Default);
                let setting = |key: &str, value: String| Setting {
                    key: key.into(),
                    value,
                    origin: origin(key),
                    sha256: None,
                    component: None,
                };
                let plugin = |key: String, origin_key: &str, name: &str| {
                    let digest = registry.sha256(name);
                    Setting {
                        key,
                        value: name.into(),
                        origin: origin(origin_key),
                        component: digest.as_ref().map(|(_, o)| o.to_string()),
                        sha256: digest.map(|(d, _)| d),
                    }
                };
                let rules = vec![
                    setting("max_events", or_default(r.max_events, DEFAULT_AGGREGATE_MAX_EVENTS).to_string()),
                    setting(
                        "max_interval_seconds",
                        or_default(r.max_interval_seconds, DEFAULT_AGGREGATE_INTERVAL_IN_SECONDS).to_string(),
                    ),
                    setting("burst", or_default(r.burst, DEFAULT_SPAM_BURST).to_string()),
                    setting("qps", or_default(r.qps, DEFAULT_SPAM_QPS).to_string()),
                    setting("lru_cache_size", or_default(r.lru_cache_size, MAX_LRU_CACHE_ENTRIES as i64).to_string()),
                    setting("fuel_per_event", r.plugin.fuel_per_event.to_string()),
                    setting("memory_limit_bytes", r.plugin.memory_limit_bytes.to_string()),
                    setting("fallback", format!("{:?}", r.plugin.fallback).to_lowercase()),
                ];
                let plugins = [
                    ("aggregate_key", &r.aggregate_key),
                    ("message_combiner", &r.message_combiner),
                    ("spam_key", &r.spam_key),
                ]
                .into_iter()
                .map(|(key, choice)| match choice {
                    KeyChoice::Plugin(name) => plugin(key.into(), key, name),
                    KeyChoice::Builtin => setting(key, "builtin".into()),
                })
                .collect();
                let filters =
                    r.filters.iter().enumerate().map(|(i, f)| plugin(format!("filters[{i}]"), "filters", f)).collect();
                let sinks = r
                    .sinks
                    .iter()
                    .enumerate()
                    .map(|(i, s)| Setting {
                        key: format!("sinks[{i}]"),
                        value: s.to_string(),
                        origin: origin("sinks"),
                        sha256: None,
                        component: None,
                    })
                    .collect();
                let mut routing = vec![match self.router.matchers().get(i) {
                    Some(m) => setting("match", m.spec().to_string()),
                    None => Setting {
                        value: "every event no tenant above matches".into(),
                        origin: Origin::Default,
                        ..setting("match", String::new())
                    },
                }];
                let e = &r.event_rules;
                let lists = [
                    ("drop", &e.drop[..]),
                    ("keep", e.keep.as_deref().unwrap_or_default()),
                    ("spam_exempt", &e.spam_exempt[..]),
                ];
                for (list, rules) in lists {
                    routing.extend(rules.iter().enumerate().map(|(n, rule)| {
                        let key = format!("{list}[{n}]");
                        let value = match *rule.name == key {
                            true => rule.matcher.spec().to_string(),
                            false => format!("{}: {}", rule.name, rule.matcher.spec()),
                        };
                        Setting { key, ..setting(list, value) }
                    }));
                }
                routing.extend(t.routes.iter().map(|tr| {
                    let planned = &self.routes[tr.route];
                    let sinks: Vec<String> = tr.labels.iter().map(|l| format!("{:?}", &**l)).collect();
                    let value =
                        format!("{}: {}, sinks = [{}]", planned.route.name, planned.route.describe(), sinks.join(", "));
                    Setting {
                        key: planned.key.clone(),
                        value,
                        origin: Origin::File(planned.at.clone()),
                        sha256: None,
                        component: None,
                    }
                }));
                TenantView { tenant: t.name.to_string(), rules, plugins, filters, sinks, routing }
            })
            .collect()
    }
}

/// The plugin references of `rules` with their config keys and lines.
fn refs(rules: &Rules) -> Vec<PluginRef> {
    [&rules.aggregate_key, &rules.message_combiner, &rules.spam_key]
        .into_iter()
        .flatten()
        .chain(&rules.filters)
        .cloned()
        .collect()
}

fn plan_tenant(
    name: &str,
    rules: TenantRules,
    refs: &[PluginRef],
    location: &str,
    registry: &PluginRegistry,
    sinks: Option<&SinkSet>,
) -> Result<PlannedTenant, Vec<PlanError>> {
    let mut handles = Vec::new();
    let mut lookup = |plugin: &str, kind: PluginKind| {
        let found = registry.handle(plugin, kind, name, rules.settings_for(plugin));
        let handle = found.map_err(|error| {
            let r = refs.iter().find(|r| r.name == plugin);
            PlanError::Plugin {
                location: r.map_or_else(|| location.to_string(), |r| format!("{location}:{}", r.line)),
                key: r.map_or_else(|| plugin.to_string(), |r| r.key.clone()),
                error: Box::new(error),
            }
        })?;
        handles.push(handle.clone());
        Ok::<_, PlanError>(handle)
    };
    let kind_error = |e: crate::plugin::WrongKind| PlanError::Rule {
        location: location.into(),
        key: e.plugin.clone(),
        message: e.to_string(),
    };
    let mut options = CorrelatorOptions {
        lru_cache_size: rules.lru_cache_size,
        burst_size: rules.burst,
        qps: rules.qps,
        max_events: rules.max_events,
        max_interval_in_seconds: rules.max_interval_seconds,
        ..CorrelatorOptions::default()
    };
    let mut slot = |choice: &KeyChoice, kind: PluginKind| match choice {
        KeyChoice::Plugin(p) => {
            let handle = lookup(p, kind)?;
            crate::plugin::check_kind(&handle, kind).map_err(kind_error)?;
            Ok(Some(handle))
        }
        KeyChoice::Builtin => Ok::<_, PlanError>(None),
    };
    // Every problem of the tenant is collected (`eventpipe validate` lists them all).
    let mut errors = Vec::new();
    let mut take = |r: Result<Option<PluginHandle>, PlanError>| {
        r.unwrap_or_else(|e| {
            errors.push(e);
            None
        })
    };
    let aggregate_key = take(slot(&rules.aggregate_key, PluginKind::AggregateKey));
    let message_combiner = take(slot(&rules.message_combiner, PluginKind::MessageCombiner));
    let spam_key = take(slot(&rules.spam_key, PluginKind::SpamKey));
    let filters: Vec<PluginHandle> =
        rules.filters.iter().filter_map(|f| take(slot(&KeyChoice::Plugin(f.clone()), PluginKind::Filter))).collect();
    if spam_key.is_none() && rules.builtin_spam_key == BuiltinSpamKey::SourceObjectType {
        options.spam_key_func = Some(Arc::new(SourceObjectType));
    }
    let mut opened = Vec::new();
    if let Some(sinks) = sinks {
        for entry in &rules.sinks {
            match sinks.open(entry, name, &|p| rules.settings_for(p), registry) {
                Ok(sink) => opened.push(TenantSink { sink, delivery: entry.delivery }),
                Err(e) => errors.push(e.into()),
            }
        }
        // The watch cache (`run --serve`) gets every tenant's writes; its writes end at once and
        // never hold back an at-least-once position (`wait`).
        if let Some(tap) = sinks.tap().filter(|_| !rules.sinks.is_empty()) {
            opened.push(TenantSink { sink: tap, delivery: Some(DeliveryMode::Wait) });
        }
        if rules.sinks.is_empty() {
            errors.push(PlanError::Rule {
                location: location.into(),
                key: "sinks".into(),
                message: format!("tenant `{name}` has no sink"),
            });
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let labels = sink_labels(&rules.sinks, opened.len());
    Ok(PlannedTenant {
        name: name.into(),
        rules,
        origins: BTreeMap::new(),
        options,
        aggregate_key,
        message_combiner,
        spam_key,
        filters,
        sink_labels: labels,
        sinks: opened,
        handles,
        routes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::{Metering, PluginRuntime};

    /// The lines printed at start and at each config reload show what a tenant sets beyond
    /// the common rules: its drop / keep / exempt rules, summaries, and its plugins' config (so a
    /// `[plugins.NAME]` change shows in the reload lines).
    #[test]
    fn describe_shows_rules_summaries_and_plugin_config() {
        let text = "[defaults]\naggregate_key = \"by-reason\"\ndrop = [{ name = \"pulls\", reasons = [\"Pulled\"] }]\n\
                    suppressed_summary_seconds = 60\n[plugins.by-reason]\nmode = \"strict\"\n";
        let config = Config::parse(text, std::path::Path::new("t.toml")).unwrap();
        let registry = PluginRegistry::new(PluginRuntime::new(Metering::Fuel).unwrap()).unwrap();
        let base = TenantRules { sinks: vec!["jsonl:-".parse().unwrap()], ..TenantRules::default() };
        let plan = TenantPlan::problems(&base, Some(&config), &registry);
        assert!(plan.is_empty(), "{plan:?}");
        let plan = TenantPlan::build(&base, Some(&config), &registry, &SinkSet::default()).unwrap();
        let line = &plan.describe()[0];
        for part in [
            "aggregate_key=by-reason",
            "drop=[pulls]",
            "suppressed_summary_seconds=60",
            "plugins.by-reason={mode=\"strict\"}",
        ] {
            assert!(line.contains(part), "{part} missing from {line}");
        }
        assert!(!line.contains("keep="), "unset rules are not shown: {line}");
    }
}
