//! The tenant router watcher (DESIGN's "watcher: tenant router ─ EventCorrelator(t)"): one
//! Broadcaster watcher that gives each event to its tenant's filters, then to one
//! EventCorrelator per (tenant, sink) — as client-go's `StartRecordingToSink` gives every sink its
//! own correlator — and writes the results with the `recordToSink` retry loop.
//!
//! What each tenant does is a [`TenantPlan`]: resolved rules with their plugins looked up and
//! their sinks opened, built (and validated) away from the event path. A new plan — the config
//! file changed — is taken between two batches: tenants whose rules did not change keep their
//! correlators (LRU caches, token buckets); changed or new tenants start fresh; removed tenants
//! are dropped. Plugin swaps need no new plan: plugins are called through their slots.
//!
//! Output order: results are written in input order across tenants (a batch is prepared per
//! tenant, then finished and written event by event in the order the events arrived).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::broadcaster::Watcher;
use crate::config::{Config, PluginRef, Rules};
use crate::correlator::{
    CorrelatorOptions, DEFAULT_AGGREGATE_INTERVAL_IN_SECONDS, DEFAULT_AGGREGATE_MAX_EVENTS, DEFAULT_SPAM_BURST,
    DEFAULT_SPAM_QPS, EventCorrelator, MAX_LRU_CACHE_ENTRIES, Occurrence, SourceObjectType, or_default,
};
use crate::event::Event;
use crate::event_broadcaster::{CorrelationClock, SinkStats, recv_batch};
use crate::plugin::filter::{Verdict, WasmFilter};
use crate::plugin::functions::{DEFAULT_TENANT, WasmAggregateKeyFunc, WasmMessageFunc, WasmSpamKeyFunc};
use crate::plugin::registry::{LookupError, PluginRegistry};
use crate::plugin::sink::WasmSink;
use crate::plugin::{FallbackPolicy, PluginHandle, PluginKind, PluginSettings};
use crate::run::SinkSpec;
use crate::sink::jsonl::JsonLinesSink;
use crate::sink::k8s::KubernetesSink;
use crate::sink::webhook::{WebhookConfig, WebhookSink};
use crate::sink::{EventSink, RetryPolicy, write_event};
use crate::tenant::TenantRouter;

/// Which function fills one of the correlator's key slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyChoice {
    /// The native built-in client-go function.
    Builtin,
    /// A plugin, by name (embedded or from the plugins directory).
    Plugin(String),
}

/// The concrete rules of one tenant: what the command line gives, overridden by the config's
/// `[defaults]`, overridden by the tenant's own `rules`.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantRules {
    /// The correlator's numbers (key functions are filled from the choices below).
    pub lru_cache_size: usize,
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
    /// With `spam_key: Builtin`: client-go ≥ 1.32's key (with `type`) instead of v0.26's.
    pub spam_key_with_type: bool,
    /// Filter plugins, in order.
    pub filters: Vec<String>,
    /// Fuel, memory and fallback of this tenant's plugin calls (`config` is filled per plugin).
    pub plugin: PluginSettings,
    /// Per-plugin config (`[plugins.NAME]`).
    pub plugin_config: BTreeMap<String, BTreeMap<String, String>>,
    /// Where results go.
    pub sinks: Vec<SinkSpec>,
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
        let mut sinks: Vec<SinkSpec> = match &rules.sinks {
            Some(specs) => specs
                .iter()
                .map(|s| s.parse::<SinkSpec>().map_err(|e| ("sinks".to_string(), e.to_string())))
                .collect::<Result<_, _>>()?,
            None => self.sinks.clone(),
        };
        // A sink named twice would get every result twice.
        let mut seen = std::collections::HashSet::new();
        sinks.retain(|s| seen.insert(s.to_string()));
        Ok(Self {
            lru_cache_size: rules.lru_cache_size.unwrap_or(self.lru_cache_size),
            burst: rules.burst.unwrap_or(self.burst),
            qps: rules.qps.unwrap_or(self.qps),
            max_events: rules.max_events.unwrap_or(self.max_events),
            max_interval_seconds: rules.max_interval_seconds.unwrap_or(self.max_interval_seconds),
            aggregate_key: choice(&rules.aggregate_key, &self.aggregate_key),
            message_combiner: choice(&rules.message_combiner, &self.message_combiner),
            spam_key: choice(&rules.spam_key, &self.spam_key),
            spam_key_with_type: self.spam_key_with_type,
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
                config: BTreeMap::new(),
            },
            plugin_config: self.plugin_config.clone(),
            sinks,
        })
    }

    fn settings_for(&self, plugin: &str) -> PluginSettings {
        PluginSettings { config: self.plugin_config.get(plugin).cloned().unwrap_or_default(), ..self.plugin.clone() }
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
        error: LookupError,
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
    #[error("sink {spec}: {message}")]
    Sink {
        /// The sink spec.
        spec: String,
        /// What went wrong.
        message: String,
    },
}

/// One tenant of a plan, ready to run.
pub struct PlannedTenant {
    /// Tenant name (`default` for the defaults).
    pub name: Arc<str>,
    /// Its rules (compared on reload: equal rules keep the tenant's correlator state).
    pub rules: TenantRules,
    filters: Vec<Arc<WasmFilter>>,
    options: CorrelatorOptions,
    sinks: Vec<Arc<dyn EventSink>>,
    handles: Vec<PluginHandle>,
}

impl PlannedTenant {
    /// The tenant's filters, in order.
    pub fn filters(&self) -> &[Arc<WasmFilter>] {
        &self.filters
    }

    /// The options of the tenant's correlators (numbers and key functions).
    pub fn correlator_options(&self) -> &CorrelatorOptions {
        &self.options
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
    /// Config tenants in file order, then the defaults.
    pub tenants: Vec<PlannedTenant>,
}

impl std::fmt::Debug for TenantPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantPlan").field("tenants", &self.tenants).finish_non_exhaustive()
    }
}

impl TenantPlan {
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
        let Some(config) = config else {
            let tenant = plan_tenant(DEFAULT_TENANT, base.clone(), &[], "command line", registry, sinks)?;
            return Ok(Self { router: TenantRouter::new(&[]), tenants: vec![tenant] });
        };
        let file = config.path.display().to_string();
        let mut with_config = base.clone();
        with_config.plugin_config = config.plugin_config.clone();
        let defaults = with_config.overlay(&config.defaults).map_err(|(key, message)| PlanError::Rule {
            location: file.clone(),
            key: format!("defaults.{key}"),
            message,
        })?;
        let mut tenants = Vec::with_capacity(config.tenants.len() + 1);
        for (i, t) in config.tenants.iter().enumerate() {
            let rules = with_config.overlay(&t.rules).map_err(|(key, message)| PlanError::Rule {
                location: file.clone(),
                key: format!("tenants[{i}].rules.{key}"),
                message,
            })?;
            tenants.push(plan_tenant(&t.name, rules, &refs(&t.rules), &file, registry, sinks)?);
        }
        tenants.push(plan_tenant(DEFAULT_TENANT, defaults, &refs(&config.defaults), &file, registry, sinks)?);
        Ok(Self { router: TenantRouter::new(&config.tenants), tenants })
    }

    /// The index into [`tenants`](Self::tenants) of `event`'s tenant.
    pub fn route(&self, event: &Event) -> usize {
        self.router.route(event, event.ingest_headers.get()).unwrap_or(self.tenants.len() - 1)
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
                format!(
                    "tenant `{}`: aggregate_key={} message_combiner={} spam_key={} filters=[{}] max_events={} \
                     max_interval_seconds={} burst={} qps={} lru_cache_size={} fallback={:?} sinks=[{}]",
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
                    or_default(r.lru_cache_size, MAX_LRU_CACHE_ENTRIES),
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
        self.tenants
            .iter()
            .flat_map(|t| &t.handles)
            .any(|h| h.settings().fallback == FallbackPolicy::Fail && h.stats().snapshot().drops > 0)
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
    sinks: &SinkSet,
) -> Result<PlannedTenant, PlanError> {
    let mut handles = Vec::new();
    let mut lookup = |plugin: &str, kind: PluginKind| {
        let found = registry.handle(plugin, kind, name, rules.settings_for(plugin));
        let handle = found.map_err(|error| {
            let r = refs.iter().find(|r| r.name == plugin);
            PlanError::Plugin {
                location: r.map_or_else(|| location.to_string(), |r| format!("{location}:{}", r.line)),
                key: r.map_or_else(|| plugin.to_string(), |r| r.key.clone()),
                error,
            }
        })?;
        handles.push(handle.clone());
        Ok::<_, PlanError>(handle)
    };
    let kind_error = |e: crate::plugin::functions::WrongKind| PlanError::Rule {
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
    if let KeyChoice::Plugin(p) = &rules.aggregate_key {
        let f = WasmAggregateKeyFunc::new(lookup(p, PluginKind::AggregateKey)?).map_err(kind_error)?;
        options.key_func = Some(Arc::new(f));
    }
    if let KeyChoice::Plugin(p) = &rules.message_combiner {
        let f = WasmMessageFunc::new(lookup(p, PluginKind::MessageCombiner)?).map_err(kind_error)?;
        options.message_func = Some(Arc::new(f));
    }
    match &rules.spam_key {
        KeyChoice::Plugin(p) => {
            let f = WasmSpamKeyFunc::new(lookup(p, PluginKind::SpamKey)?).map_err(kind_error)?;
            options.spam_key_func = Some(Arc::new(f));
        }
        KeyChoice::Builtin if rules.spam_key_with_type => options.spam_key_func = Some(Arc::new(SourceObjectType)),
        KeyChoice::Builtin => {}
    }
    let mut filters = Vec::new();
    for f in &rules.filters {
        filters.push(Arc::new(WasmFilter::new(lookup(f, PluginKind::Filter)?).map_err(kind_error)?));
    }
    let mut opened = Vec::new();
    for spec in &rules.sinks {
        opened.push(sinks.open(spec, name, &rules, registry)?);
    }
    if opened.is_empty() {
        return Err(PlanError::Rule {
            location: location.into(),
            key: "sinks".into(),
            message: format!("tenant `{name}` has no sink"),
        });
    }
    Ok(PlannedTenant { name: name.into(), rules, filters, options, sinks: opened, handles })
}

/// An opened sink, kept typed so it can be flushed at the end.
enum OpenSink {
    Jsonl(Arc<JsonLinesSink>),
    Plugin(Arc<WasmSink>),
    Kubernetes(Arc<KubernetesSink>),
    Webhook(Arc<WebhookSink>),
}

impl OpenSink {
    fn as_event_sink(&self) -> Arc<dyn EventSink> {
        match self {
            OpenSink::Jsonl(s) => s.clone(),
            OpenSink::Plugin(s) => s.clone(),
            OpenSink::Kubernetes(s) => s.clone(),
            OpenSink::Webhook(s) => s.clone(),
        }
    }

    fn flush(&self) -> std::io::Result<()> {
        match self {
            OpenSink::Jsonl(s) => s.flush(),
            OpenSink::Plugin(s) => s.flush(),
            // Every call of these returned only once the server acknowledged it.
            OpenSink::Kubernetes(_) | OpenSink::Webhook(_) => Ok(()),
        }
    }
}

/// The sinks of a run, opened once and shared: a JSON-lines file is opened (truncated) the first
/// time any tenant names it; a sink plugin gets one instance per tenant (it is called with the
/// tenant's limits); `k8s` sinks share the run's Kubernetes client. Config reloads reuse what is
/// open.
#[derive(Default)]
pub struct SinkSet {
    open: Mutex<HashMap<String, OpenSink>>,
    kube: Option<kube::Client>,
    append: bool,
}

impl std::fmt::Debug for SinkSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("SinkSet").field("open", &open.keys().collect::<Vec<_>>()).finish()
    }
}

impl SinkSet {
    /// An empty set; `kube` is the client `k8s` sinks use (none: they cannot be opened);
    /// `append`: JSON-lines files are appended to instead of truncated (at-least-once: what was
    /// delivered before a restart stays).
    pub fn new(kube: Option<kube::Client>, append: bool) -> Self {
        Self { open: Mutex::default(), kube, append }
    }

    fn open(
        &self,
        spec: &SinkSpec,
        tenant: &str,
        rules: &TenantRules,
        registry: &PluginRegistry,
    ) -> Result<Arc<dyn EventSink>, PlanError> {
        let key = match spec {
            SinkSpec::Plugin(name) => format!("{spec}@{tenant}:{name}"),
            _ => spec.to_string(),
        };
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = open.get(&key) {
            return Ok(s.as_event_sink());
        }
        let fail = |message: String| PlanError::Sink { spec: spec.to_string(), message };
        let sink = match spec {
            SinkSpec::JsonLinesStdout => OpenSink::Jsonl(Arc::new(JsonLinesSink::new(Box::new(std::io::stdout())))),
            SinkSpec::JsonLinesFile(path) => {
                let file = if self.append {
                    JsonLinesSink::open_append(path).map(|(file, torn)| {
                        if torn > 0 {
                            tracing::warn!(sink = %spec, bytes = torn, "cut a torn last line (an interrupted write)");
                        }
                        file
                    })
                } else {
                    std::fs::File::create(path)
                }
                .map_err(|e| fail(e.to_string()))?;
                OpenSink::Jsonl(Arc::new(JsonLinesSink::new(Box::new(file))))
            }
            SinkSpec::Webhook(url) => {
                let config = WebhookConfig::new(spec.to_string(), url.clone());
                OpenSink::Webhook(Arc::new(WebhookSink::new(config).map_err(|e| fail(e.to_string()))?))
            }
            SinkSpec::Kubernetes(namespace) => {
                let client = self.kube.clone().ok_or_else(|| fail("no Kubernetes connection".into()))?;
                OpenSink::Kubernetes(Arc::new(KubernetesSink::new(client, namespace.clone())))
            }
            SinkSpec::Plugin(name) => {
                let handle = if name.ends_with(".wasm") {
                    let path = PathBuf::from(name);
                    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                    let plugin = registry.runtime().load_file(&stem, &path).map_err(|e| fail(e.to_string()))?;
                    PluginHandle::fixed(plugin, tenant, rules.settings_for(&stem))
                } else {
                    registry
                        .handle(name, PluginKind::Sink, tenant, rules.settings_for(name))
                        .map_err(|e| fail(e.to_string()))?
                };
                OpenSink::Plugin(Arc::new(
                    WasmSink::new(handle, Box::new(std::io::stdout())).map_err(|e| fail(e.to_string()))?,
                ))
            }
        };
        let shared = sink.as_event_sink();
        open.insert(key, sink);
        Ok(shared)
    }

    /// Flushes every open sink.
    ///
    /// # Errors
    /// The first flush error, with its sink.
    pub fn flush(&self) -> Result<(), (String, std::io::Error)> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        for (key, sink) in open.iter() {
            sink.flush().map_err(|e| (key.clone(), e))?;
        }
        Ok(())
    }
}

/// What the tenant router watcher did, in total and per tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RouterStats {
    /// All tenants together.
    #[serde(flatten)]
    pub total: SinkStats,
    /// Events dropped by filter plugins.
    pub filtered: u64,
    /// Per tenant (sink calls are counted once per sink).
    pub tenants: BTreeMap<String, SinkStats>,
    /// Plans taken after the first (config reloads).
    pub reloads: u64,
}

/// One live tenant: its filters and one correlator per sink.
struct LiveTenant {
    name: Arc<str>,
    rules: TenantRules,
    filters: Vec<Arc<WasmFilter>>,
    routes: Vec<(Arc<dyn EventSink>, EventCorrelator)>,
}

impl LiveTenant {
    fn new(t: &PlannedTenant) -> Self {
        Self {
            name: t.name.clone(),
            rules: t.rules.clone(),
            filters: t.filters.clone(),
            routes: t.sinks.iter().map(|s| (s.clone(), EventCorrelator::new(t.options.clone()))).collect(),
        }
    }
}

/// Takes `plan`: tenants with unchanged rules keep their live state.
fn adopt(plan: &TenantPlan, live: Vec<LiveTenant>) -> Vec<LiveTenant> {
    let mut old: HashMap<Arc<str>, LiveTenant> = live.into_iter().map(|t| (t.name.clone(), t)).collect();
    plan.tenants
        .iter()
        .map(|t| match old.remove(&t.name) {
            Some(kept) if kept.rules == t.rules => kept,
            _ => LiveTenant::new(t),
        })
        .collect()
}

/// The tenant router watcher's loop; ends when the watcher closes. `plans` delivers the
/// current plan and every later one (config reloads). `progress` counts the events finished
/// (written to every sink of their tenant, or skipped, filtered or dropped), batch by batch;
/// `mirror` gets a copy of the stats after every batch (for `/metrics`).
pub async fn record_to_tenants(
    mut watcher: Watcher<Event>,
    mut plans: watch::Receiver<Arc<TenantPlan>>,
    retry: RetryPolicy,
    cancel: CancellationToken,
    clock: CorrelationClock,
    progress: Option<Arc<crate::delivery::Progress>>,
    mirror: Option<Arc<Mutex<RouterStats>>>,
) -> RouterStats {
    let mut stats = RouterStats::default();
    let mut plan = plans.borrow_and_update().clone();
    let mut live = adopt(&plan, Vec::new());
    while let Some(batch) = recv_batch(&mut watcher).await {
        let batch_len = batch.len() as u64;
        if plans.has_changed().unwrap_or(false) {
            plan = plans.borrow_and_update().clone();
            live = adopt(&plan, live);
            stats.reloads += 1;
        }
        // Route, then filter per tenant (one call per filter per batch).
        let owners: Vec<usize> = batch.iter().map(|e| plan.route(e)).collect();
        let mut kept = vec![true; batch.len()];
        for (t, tenant) in live.iter().enumerate() {
            let mut positions: Vec<usize> = (0..batch.len()).filter(|&i| owners[i] == t).collect();
            for filter in &tenant.filters {
                let events: Vec<&Event> = positions.iter().map(|&i| &batch[i]).collect();
                let verdicts = filter.filter(&events);
                for (&i, verdict) in positions.iter().zip(&verdicts) {
                    if let Verdict::Drop(reason) = verdict {
                        tracing::debug!(tenant = %tenant.name, filter = filter.handle().name(), reason = reason.as_deref().unwrap_or(""), "event filtered");
                        kept[i] = false;
                    }
                }
                positions.retain(|&i| kept[i]);
            }
        }
        // Prepare per (tenant, sink), in input order within each.
        let mut per_tenant: Vec<Vec<Occurrence>> = live.iter().map(|_| Vec::new()).collect();
        for (i, event) in batch.into_iter().enumerate() {
            let name = &live[owners[i]].name;
            if !stats.tenants.contains_key(&**name) {
                stats.tenants.insert(name.to_string(), SinkStats::default()); // once per tenant, not per event
            }
            stats.tenants.get_mut(&**name).expect("inserted above").received += 1;
            stats.total.received += 1;
            if kept[i] {
                per_tenant[owners[i]].push(clock.occurrence(event));
            } else {
                stats.filtered += 1;
            }
        }
        let mut prepared: Vec<Vec<VecDeque<_>>> = Vec::with_capacity(live.len());
        for (tenant, occurrences) in live.iter_mut().zip(per_tenant) {
            let n = tenant.routes.len();
            let mut routes = Vec::with_capacity(n);
            let mut occurrences = Some(occurrences);
            for (r, (_, correlator)) in tenant.routes.iter_mut().enumerate() {
                let batch = if r + 1 == n {
                    occurrences.take().unwrap_or_default()
                } else {
                    occurrences.clone().unwrap_or_default()
                };
                routes.push(VecDeque::from(correlator.prepare(batch)));
            }
            prepared.push(routes);
        }
        // Finish and write in input order.
        for (i, &t) in owners.iter().enumerate() {
            if !kept[i] {
                continue;
            }
            let tenant = &mut live[t];
            let tenant_stats = stats.tenants.get_mut(&*tenant.name).expect("counted above");
            for (r, (sink, correlator)) in tenant.routes.iter_mut().enumerate() {
                let p = prepared[t][r].pop_front().expect("one prepared event per kept event and route");
                let aggregated = u64::from(p.aggregated());
                let result = correlator.finish(p);
                let outcome = write_event(sink.as_ref(), correlator, result, &retry, &cancel).await;
                for s in [&mut stats.total, &mut *tenant_stats] {
                    s.aggregated += aggregated;
                    s.count(&outcome);
                }
            }
        }
        if let Some(progress) = &progress {
            progress.finished(batch_len);
        }
        if let Some(mirror) = &mirror {
            *mirror.lock().unwrap_or_else(|p| p.into_inner()) = stats.clone();
        }
    }
    stats
}
