//! Tenant plans: the rules of every tenant (command line, overridden by the config's
//! `[defaults]`, overridden by each tenant's `rules`), with their plugins looked up and their
//! sinks opened, built and validated away from the event path. A [`TenantPlan`] is what the
//! tenant stages ([`crate::pipeline::stage`]) run; a config reload builds a new one.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{Config, PluginRef, Rules};
use crate::correlator::{
    CorrelatorOptions, DEFAULT_AGGREGATE_INTERVAL_IN_SECONDS, DEFAULT_AGGREGATE_MAX_EVENTS, DEFAULT_SPAM_BURST,
    DEFAULT_SPAM_QPS, MAX_LRU_CACHE_ENTRIES, SourceObjectType, or_default,
};
use crate::delivery::DeliveryMode;
use crate::event::Event;
use crate::partition::PartitionKey;
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
}

impl CommandLineRules {
    /// These rules resolved: component files are loaded into `registry` under their stems; no
    /// filters and no sinks (the caller adds its sinks).
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
            filters: Vec::new(),
            plugin: self.plugin.clone(),
            plugin_config: BTreeMap::new(),
            sinks: Vec::new(),
            partition_key: None,
            event_rules: EventRules::default(),
            suppressed_summary_seconds: 0,
        })
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
}

impl TenantRules {
    /// These rules overridden by the set fields of `rules`.
    ///
    /// # Errors
    /// A sink spec that does not parse: `(key, message)`.
    fn overlay(&self, rules: &Rules) -> Result<Self, (String, String)> {
        let choice = |r: &Option<PluginRef>, base: &KeyChoice| match r {
            Some(r) if r.is_builtin() => KeyChoice::Builtin,
            Some(r) => KeyChoice::Plugin(r.name.clone()),
            None => base.clone(),
        };
        let mut sinks: Vec<SinkEntry> = match &rules.sinks {
            Some(specs) => specs
                .iter()
                .map(|s| s.parse::<SinkEntry>().map_err(|e| ("sinks".to_string(), e.to_string())))
                .collect::<Result<_, _>>()?,
            None => self.sinks.clone(),
        };
        // A sink named twice would get every result twice.
        let mut seen = std::collections::HashSet::new();
        sinks.retain(|s| seen.insert(s.spec.identity()));
        Ok(Self {
            lru_cache_size: rules.lru_cache_size.unwrap_or(self.lru_cache_size),
            burst: rules.burst.unwrap_or(self.burst),
            qps: rules.qps.unwrap_or(self.qps),
            max_events: rules.max_events.unwrap_or(self.max_events),
            max_interval_seconds: rules.max_interval_seconds.unwrap_or(self.max_interval_seconds),
            aggregate_key: choice(&rules.aggregate_key, &self.aggregate_key),
            message_combiner: choice(&rules.message_combiner, &self.message_combiner),
            spam_key: choice(&rules.spam_key, &self.spam_key),
            builtin_spam_key: self.builtin_spam_key,
            // The config's rules come merged over `[defaults]`, where an explicit `filters = []`
            // clears them; the command line has no filters.
            filters: rules.filters.iter().map(|f| f.name.clone()).collect(),
            plugin: PluginSettings {
                // 0 means "the default", as for the correlator's numbers.
                fuel_per_event: rules.fuel_per_event.filter(|&f| f > 0).unwrap_or(self.plugin.fuel_per_event),
                memory_limit_bytes: rules
                    .memory_limit_bytes
                    .filter(|&m| m > 0)
                    .unwrap_or(self.plugin.memory_limit_bytes),
                fallback: rules.fallback.unwrap_or(self.plugin.fallback),
                // Per plugin, from its `[plugins.NAME]` table: see `settings_for`.
                config: BTreeMap::new(),
                pure: true,
                memo_max_entries: self.plugin.memo_max_entries,
            },
            plugin_config: self.plugin_config.clone(),
            sinks,
            partition_key: rules.partition_key.or(self.partition_key),
            event_rules: EventRules {
                drop: rules.drop.clone().unwrap_or_else(|| self.event_rules.drop.clone()),
                keep: rules.keep.clone().or_else(|| self.event_rules.keep.clone()),
                spam_exempt: rules.spam_exempt.clone().unwrap_or_else(|| self.event_rules.spam_exempt.clone()),
            },
            suppressed_summary_seconds: rules.suppressed_summary_seconds.unwrap_or(self.suppressed_summary_seconds),
        })
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
    /// Numbers and native key functions; plugin slots are filled per instance.
    options: CorrelatorOptions,
    aggregate_key: Option<PluginHandle>,
    message_combiner: Option<PluginHandle>,
    spam_key: Option<PluginHandle>,
    filters: Vec<PluginHandle>,
    sinks: Vec<TenantSink>,
    handles: Vec<PluginHandle>,
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
            options,
            aggregate_key: None,
            message_combiner: None,
            spam_key: None,
            filters: Vec::new(),
            sinks,
            handles: Vec::new(),
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
        Self { router, tenant_keys, tenants }
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
        let Some(config) = config else {
            let tenant = plan_tenant(DEFAULT_TENANT, base.clone(), &[], "command line", registry, sinks)?;
            return Ok(Self::new(TenantRouter::new(Vec::new()), vec![tenant]));
        };
        let file = config.path.display().to_string();
        let mut with_config = base.clone();
        with_config.plugin_config = config.plugin_config.clone();
        let mut errors = Vec::new();
        let mut tenants = Vec::with_capacity(config.tenants.len() + 1);
        let named = config.tenants.iter().enumerate().map(|(i, t)| (format!("tenants[{i}].rules"), &t.name, &t.rules));
        for (prefix, name, rules) in
            named.chain([("defaults".to_string(), &DEFAULT_TENANT.to_string(), &config.defaults)])
        {
            let planned = with_config
                .overlay(rules)
                .map_err(|(key, message)| {
                    vec![PlanError::Rule { location: file.clone(), key: format!("{prefix}.{key}"), message }]
                })
                .and_then(|overlaid| plan_tenant(name, overlaid, &refs(rules), &file, registry, sinks));
            match planned {
                Ok(t) => tenants.push(t),
                Err(e) => errors.extend(e),
            }
        }
        if errors.is_empty() { Ok(Self::new(config.router(), tenants)) } else { Err(errors) }
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

    /// Every plugin handle of every tenant (for metrics).
    pub fn handles(&self) -> impl Iterator<Item = &PluginHandle> {
        self.tenants.iter().flat_map(|t| &t.handles)
    }

    /// Whether any plugin of any tenant failed under the `fail` policy.
    pub fn failed(&self) -> bool {
        self.tenants.iter().any(PlannedTenant::failed)
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
    Ok(PlannedTenant {
        name: name.into(),
        rules,
        options,
        aggregate_key,
        message_combiner,
        spam_key,
        filters,
        sinks: opened,
        handles,
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
