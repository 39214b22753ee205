//! `eventpipe validate`: everything `run` would check at start, without running — the config,
//! every tenant's plugins (present, of the right kind; the plugins directory's files loaded and
//! called once on a sample event), the sinks and the source — with every problem listed, as
//! `vector validate` does.
//!
//! Without `--connect` it reaches no server: a `jsonl:` file is not created or truncated (its
//! directory must exist and be writable), a Kubernetes config must be found and parse (as
//! `run` needs it for `k8s` sources and sinks) but the API server is not asked, and no address
//! is bound. With `--connect` it also reaches every server named ([`super::reach`]): the
//! Kubernetes API server, NATS servers, webhook and OTLP hosts. (OCI plugins are pulled either
//! way.)

use std::path::Path;

use crate::config::{Config, ConfigError};
use crate::k8s::KubeOptions;
use crate::pipeline::plan::{PlanError, TenantPlan, TenantRules};
use crate::plugin::PluginKind;
use crate::plugin::registry::PluginRegistry;
use crate::sink::{SinkEntry, SinkSpec};
use crate::source::SourceSpec;
use crate::watchers::WatcherSpec;

/// What to validate.
#[derive(Debug)]
pub struct ValidateOptions<'a> {
    /// The rules the command line gives (its `--sink`s included).
    pub base: &'a TenantRules,
    /// The tenant config file, if any.
    pub config: Option<&'a Path>,
    /// Plugins by name, with the plugins directory loaded.
    pub registry: &'a PluginRegistry,
    /// Files of the plugins directory that were refused (each `FILE: reason`).
    pub refused_plugins: Vec<String>,
    /// Watcher plugins of the command line (the config's are added).
    pub watchers: &'a [WatcherSpec],
    /// The source, if one is given.
    pub source: Option<&'a SourceSpec>,
    /// How `k8s` sources and sinks would reach the API server.
    pub kube: &'a KubeOptions,
    /// Also reach every server named (`validate --connect`).
    pub connect: bool,
}

/// One problem: where (the file, 1-based line and column, the config key path; each when known)
/// and what. Displays as `FILE:LINE:COLUMN: KEY: MESSAGE`, leaving out what is unknown (e.g.
/// `eventpipe.toml:7:12: tenants[0].rules.filters[0]: no plugin named …`); serialises (for
/// `validate --format json`) as `{"file", "line", "column", "key", "message"}`, `null` for what
/// is unknown and `""` for no key.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// The file the problem is in (the config file, a plugin file), when it is in one.
    pub file: Option<String>,
    /// 1-based line in `file`.
    pub line: Option<usize>,
    /// 1-based column (in characters) in `line`.
    pub column: Option<usize>,
    /// The config key path, e.g. `tenants[1].rules.burst`; empty when not about a key.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl Problem {
    /// A problem that is only a message (a plugin file refused, a source that cannot be read).
    pub fn message(message: impl Into<String>) -> Self {
        Problem { message: message.into(), ..Problem::default() }
    }

    /// A plan's problem: its `FILE:LINE` location (or `FILE`, or `command line`) split into its
    /// parts.
    fn of_plan(error: &PlanError) -> Self {
        let (location, key, message) = match error {
            PlanError::Plugin { location, key, error } => (location, key, error.to_string()),
            PlanError::Rule { location, key, message } => (location, key, message.clone()),
            PlanError::Sink(e) => return Problem::message(e.to_string()),
        };
        let problem = Problem { key: key.clone(), message, ..Problem::default() };
        if location == "command line" {
            return problem.with_place("command line");
        }
        match location.rsplit_once(':').map(|(file, line)| (file, line.parse::<usize>())) {
            Some((file, Ok(line))) => Problem { file: Some(file.to_string()), line: Some(line), ..problem },
            _ => Problem { file: Some(location.clone()), ..problem },
        }
    }

    /// A problem named by where it comes from when that is not a file (`command line`).
    fn with_place(mut self, place: &str) -> Self {
        self.key = if self.key.is_empty() { place.to_string() } else { format!("{place}: {}", self.key) };
        self
    }
}

impl From<ConfigError> for Problem {
    fn from(e: ConfigError) -> Self {
        Problem {
            file: Some(e.path.display().to_string()),
            line: e.line,
            column: e.column,
            key: e.key,
            message: e.message,
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = self.file.as_ref().map(|file| file as &dyn std::fmt::Display);
        crate::config::write_located(f, file, (self.line, self.column), &self.key, &self.message)
    }
}

/// What validation found: every problem, and what was checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidateReport {
    /// Every problem, in the order found: the plugins directory's, the config file's (syntax,
    /// then types and unknown keys, then the rules of the format), the plan's (plugins that do
    /// not exist or are of the wrong kind), the sinks', the watchers', the source's.
    pub problems: Vec<Problem>,
    /// Tenants the config declares (`[[tenants]]`; `[defaults]`, which every other event gets,
    /// is checked too but not counted).
    pub tenants: usize,
    /// Distinct sinks checked.
    pub sinks: usize,
    /// Routes the config declares (top-level `[[routes]]` and tenants' own).
    pub routes: usize,
    /// Watcher plugins checked.
    pub watchers: usize,
}

impl ValidateReport {
    /// Whether nothing is wrong.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks what `options` names and lists every problem found.
pub fn validate(options: &ValidateOptions<'_>) -> ValidateReport {
    let mut report = ValidateReport {
        problems: options.refused_plugins.iter().map(Problem::message).collect(),
        ..ValidateReport::default()
    };
    let config = match options.config {
        None => None,
        Some(path) => {
            let (config, problems) = match std::fs::read_to_string(path) {
                Ok(text) => Config::check(&text, path),
                Err(e) => (None, vec![ConfigError::unreadable(path, &e)]),
            };
            report.problems.extend(problems.into_iter().map(Problem::from));
            // A file that did not read: what it would configure is unknown.
            match config {
                Some(config) => Some(config),
                None => return report,
            }
        }
    };
    report.tenants = config.as_ref().map_or(0, |c| c.tenants.len());
    report.routes = config.as_ref().map_or(0, |c| {
        c.routes.len() + c.tenants.iter().map(|t| t.own.routes.as_ref().map_or(0, Vec::len)).sum::<usize>()
    });
    // A problem of `[defaults]` is every inheriting tenant's too: listed once.
    for problem in TenantPlan::problems(options.base, config.as_ref(), options.registry) {
        let problem = Problem::of_plan(&problem);
        if !report.problems.contains(&problem) {
            report.problems.push(problem);
        }
    }

    // Sinks: the command line's, `[defaults]`' and every tenant's, each once.
    let mut sinks: Vec<(Problem, SinkEntry)> =
        options.base.sinks.iter().map(|s| (Problem::default().with_place("command line"), s.clone())).collect();
    if let Some(config) = &config {
        let file = config.path.display().to_string();
        let rules = std::iter::once(("defaults".to_string(), &config.defaults))
            .chain(config.tenants.iter().enumerate().map(|(i, t)| (format!("tenants[{i}].rules"), &t.rules)));
        for (key, rules) in rules {
            for spec in rules.sinks.iter().flatten() {
                // The config checked that every sink parses.
                if let Ok(entry) = spec.parse::<SinkEntry>() {
                    let place = Problem { file: Some(file.clone()), key: format!("{key}.sinks"), ..Problem::default() };
                    sinks.push((place, entry));
                }
            }
        }
        // Routes' sinks, at their route's line.
        let own = config.tenants.iter().flat_map(|t| t.own.routes.iter().flatten());
        for route in config.routes.iter().chain(own) {
            for spec in &route.route.sinks {
                if let Ok(entry) = spec.parse::<SinkEntry>() {
                    let place = Problem {
                        file: Some(file.clone()),
                        line: Some(route.line),
                        key: format!("{}.sinks", route.key),
                        ..Problem::default()
                    };
                    sinks.push((place, entry));
                }
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    sinks.retain(|(_, entry)| seen.insert(entry.spec.identity()));
    report.sinks = sinks.len();
    for (place, entry) in &sinks {
        // A webhook's encoder plugin must be there and be an encoder, as `run` would load it.
        let checked = check_sink(&entry.spec, options.registry, options.connect).and_then(|()| {
            entry.body.encoder().map_or(Ok(()), |name| check_plugin(name, PluginKind::Encoder, options.registry))
        });
        if let Err(message) = checked {
            report.problems.push(Problem { message: format!("sink {}: {message}", entry.spec), ..place.clone() });
        }
    }

    let watchers: Vec<&WatcherSpec> = options.watchers.iter().chain(config.iter().flat_map(|c| &c.watchers)).collect();
    report.watchers = watchers.len();
    for w in watchers {
        if let Err(message) = check_plugin(&w.plugin, PluginKind::Watcher, options.registry) {
            report.problems.push(Problem::message(format!("watcher plugin {}: {message}", w.plugin)));
        }
    }

    if let Some(source) = options.source
        && let Err(message) = check_source(source, options.connect)
    {
        report.problems.push(Problem::message(format!("source {source}: {message}")));
    }

    // One Kubernetes client serves every `k8s` source and sink: checked once.
    let kubernetes = matches!(options.source, Some(SourceSpec::Kubernetes(_)))
        || sinks.iter().any(|(_, entry)| matches!(entry.spec, SinkSpec::Kubernetes(_)));
    if kubernetes && let Err(message) = super::reach::kubernetes(options.kube, options.connect) {
        report.problems.push(Problem::message(message));
    }
    report
}

/// Whether `plugin` (a name, or a `.wasm` file) is a plugin of `kind`: a file is loaded and
/// called once on the sample event.
fn check_plugin(plugin: &str, kind: PluginKind, registry: &PluginRegistry) -> Result<(), String> {
    if plugin.ends_with(".wasm") {
        let report = crate::plugin::check::check(registry.runtime(), Path::new(plugin), Default::default())
            .map_err(|e| e.to_string())?;
        return if report.kind == kind {
            Ok(())
        } else {
            let wrong = crate::plugin::WrongKind { plugin: report.name, actual: report.kind, expected: kind };
            Err(wrong.to_string())
        };
    }
    registry
        .handle(plugin, kind, crate::tenant::DEFAULT_TENANT, Default::default())
        .and_then(|h| crate::plugin::check_kind(&h, kind).map_err(Into::into))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Whether `spec` could be opened (and with `connect`, its server reached).
fn check_sink(spec: &SinkSpec, registry: &PluginRegistry, connect: bool) -> Result<(), String> {
    match spec {
        SinkSpec::JsonLinesFile(path) => crate::sink::jsonl::writable(path),
        SinkSpec::JsonLinesStdout | SinkSpec::Kubernetes(_) | SinkSpec::Metrics { .. } => Ok(()),
        SinkSpec::Nats(target) if connect => super::reach::nats(target),
        SinkSpec::Nats(_) => Ok(()),
        SinkSpec::Webhook(url)
        | SinkSpec::Otlp(url)
        | SinkSpec::Loki { url, .. }
        | SinkSpec::Elasticsearch { url, .. }
        | SinkSpec::Splunk { url, .. } => {
            crate::sink::webhook::check_url(url.expose()).map_err(|e| e.to_string())?;
            // A log store's credentials and CA file, as the run reads them.
            crate::sink::set::batching_config(spec, &crate::sink::endpoint::process_env)?;
            if connect { super::reach::http_host(url.expose()) } else { Ok(()) }
        }
        SinkSpec::Plugin(name) => check_plugin(name, PluginKind::Sink, registry),
    }
}

/// Whether `source` could be read (and with `connect`, its server reached).
fn check_source(source: &SourceSpec, connect: bool) -> Result<(), String> {
    match source {
        SourceSpec::Nats(target) if connect => super::reach::nats(target),
        SourceSpec::JsonLinesFile(path) => std::fs::File::open(path).map(|_| ()).map_err(|e| e.to_string()),
        SourceSpec::Http(addr) => {
            let token = crate::source::http::BearerToken::from_env().map_err(|e| e.to_string())?;
            crate::source::http::check_bind(crate::source::http::INGEST_SERVER, *addr, token.as_ref())
                .map_err(|e| e.to_string())
        }
        SourceSpec::JsonLinesStdin | SourceSpec::Kubernetes(_) | SourceSpec::Nats(_) => Ok(()),
    }
}
