//! The tenant plan and its reloader: the plan built from the command line's rules and the
//! config, shadow plugins set, and (with `watch`) the plugins directory and the config file
//! watched and hot-reloaded on a thread of their own.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::pipeline::plan::{Replanner, TenantPlan, TenantRules};
use crate::plugin::registry::{PluginRegistry, ReloadOutcome};
use crate::reload::{Change, FileWatcher};
use crate::sink::set::SinkSet;

use super::options::precedence;
use super::{Role, RunError, announce};

fn announce_plan(plan: &TenantPlan) {
    for line in plan.describe() {
        announce(&line);
    }
}

/// Sets the shadow plugins of the command line and of the config ([`crate::plugin::shadow`]),
/// all writing their first divergences to one diffs file.
///
/// # Errors
/// [`RunError::Shadow`] for a plugin that is missing, a candidate that does not load or is of
/// another kind, or a diffs file that cannot be created.
pub(super) fn set_shadows(
    registry: &PluginRegistry,
    shadows: Vec<(String, PathBuf)>,
    diffs: Option<PathBuf>,
    max: Option<u64>,
    config: Option<&Config>,
) -> Result<(), RunError> {
    let all: Vec<(String, PathBuf)> =
        shadows.into_iter().chain(config.iter().flat_map(|c| c.shadows.clone())).collect();
    if all.is_empty() {
        return Ok(());
    }
    let diffs = diffs.or_else(|| config.and_then(|c| c.shadow_diffs.clone()));
    let max = precedence(max, config.and_then(|c| c.shadow_diffs_max), crate::plugin::shadow::DEFAULT_SHADOW_DIFFS_MAX);
    let out: Option<Box<dyn std::io::Write + Send>> = match &diffs {
        Some(path) => Some(Box::new(std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| {
            RunError::Shadow { plugin: path.display().to_string(), message: format!("diffs file: {e}") }
        })?))),
        None => None,
    };
    let log = crate::plugin::shadow::ShadowLog::new(out, max);
    for (name, file) in all {
        let shadow = registry
            .set_shadow(&name, &file, log.clone())
            .map_err(|message| RunError::Shadow { plugin: name.clone(), message })?;
        announce(&format!(
            "shadow: {} runs beside plugin `{name}`; divergences {}",
            file.display(),
            match &diffs {
                Some(path) => format!("counted, the first {max} written to {}", path.display()),
                None => "counted".to_string(),
            }
        ));
        drop(shadow);
    }
    Ok(())
}

/// The plan piece: the tenant plan the router runs, and its hot reload.
pub(super) struct Plans {
    /// The plans the router (or the publish tier) takes, newest first.
    pub to_router: Option<watch::Receiver<Arc<TenantPlan>>>,
    /// The newest plan (the summary reads whether a plugin failed under `fail`).
    pub latest: watch::Receiver<Arc<TenantPlan>>,
    /// Config versions refused by hot reload.
    pub rejected_configs: Arc<AtomicU64>,
    /// Plugin swaps the registry made before the run (not the run's).
    pub swaps_before: u64,
    registry: Arc<PluginRegistry>,
    /// Watches the plugins directory and the config file; dropped at the end of the run.
    watcher: Option<FileWatcher>,
    /// Without a reloader, the plans' sender is kept until the run ends (the router's plans
    /// stay open).
    _unchanging: Option<watch::Sender<Arc<TenantPlan>>>,
}

impl Plans {
    /// Builds the first plan from `base` and `config` (the publish tier routes tenants only:
    /// their sinks are the workers', not opened here) and, with `watch`, starts the reloader of
    /// the plugins directory, `config_path` and the shadow candidates. Announces the live
    /// plugins and the plan once the watch runs (a change made after these lines is seen), and
    /// warns once of each drop-in plugin nothing uses (`watchers`: the watcher plugins attached).
    ///
    /// # Errors
    /// [`RunError::Plan`] for rules that cannot be put together, [`RunError::Watch`] when the
    /// files cannot be watched.
    pub fn build(
        role: &Role,
        base: &TenantRules,
        (config_path, config): (Option<&Path>, Option<&Config>),
        registry: &Arc<PluginRegistry>,
        sinks: &Arc<SinkSet>,
        (watch, watchers): (bool, Vec<String>),
        swaps_before: u64,
    ) -> Result<Self, RunError> {
        let plan = if role.publishes() {
            TenantPlan::build_unopened(&TenantRules { sinks: Vec::new(), ..base.clone() }, config, registry)?
        } else {
            TenantPlan::build(base, config, registry, sinks)?
        };
        let replanner = Arc::new(Replanner::new(base.clone(), config.cloned(), registry));
        for line in replanner.unused(&plan, registry, &watchers) {
            tracing::warn!("{line}");
        }
        let (plans_tx, plans_rx) = watch::channel(Arc::new(plan));
        let latest = plans_tx.subscribe();
        let rejected_configs = Arc::new(AtomicU64::new(0));
        let (watcher, unchanging) = if watch {
            let reloader = Reloader {
                registry: registry.clone(),
                replanner,
                watchers,
                sinks: sinks.clone(),
                plans: plans_tx,
                rejected_configs: rejected_configs.clone(),
            };
            (Some(reloader.start(config_path)?), None)
        } else {
            (None, Some(plans_tx))
        };
        for (name, live) in registry.live() {
            match live {
                Some(p) => announce(&format!("{p} is live")),
                None => announce(&format!("plugin `{name}` is not loaded")),
            }
        }
        announce_plan(&latest.borrow());
        Ok(Plans {
            to_router: Some(plans_rx),
            latest,
            rejected_configs,
            swaps_before,
            registry: registry.clone(),
            watcher,
            _unchanging: unchanging,
        })
    }

    /// Registers the registry's counters (swaps, refusals, shadows), the config versions
    /// refused (`eventpipe_config_reloads_total{result="rejected"}`) and the counters of the
    /// current plan's plugins on `metrics`.
    pub fn register(&self, metrics: &Metrics) {
        let (registry, plans) = (self.registry.clone(), self.latest.clone());
        let rejected_configs = self.rejected_configs.clone();
        metrics.add_source(move |s| {
            s.add(&crate::metrics::CONFIG_RELOADS, &[("result", "rejected")], rejected_configs.load(Ordering::Relaxed));
            s.add_registry(&registry);
            for handle in plans.borrow().handles() {
                s.add_plugin(handle);
            }
        });
    }

    /// Stops watching the files.
    pub fn stop_watching(&mut self) {
        self.watcher = None;
    }

    /// Plugin versions swapped in (or reverted) during the run.
    pub fn swaps(&self) -> u64 {
        self.registry.swaps() - self.swaps_before
    }

    /// Plugin files and config versions refused during the run.
    pub fn rejected(&self) -> u64 {
        self.registry.rejected() + self.rejected_configs.load(Ordering::Relaxed)
    }

    /// Per shadowed plugin: events compared, and on how many the candidate answered otherwise.
    pub fn shadows(&self) -> std::collections::BTreeMap<String, crate::plugin::shadow::ShadowStats> {
        self.registry.shadows().into_iter().map(|(name, shadow)| (name, shadow.stats())).collect()
    }
}

/// Applies file changes on the reload thread: plugins through the registry, the config by
/// building a new plan and handing it to the router watcher.
struct Reloader {
    registry: Arc<PluginRegistry>,
    /// Builds the plans of a changed config or set of drop-in filters.
    replanner: Arc<Replanner>,
    /// The watcher plugins attached (for the warning about drop-in plugins nothing uses).
    watchers: Vec<String>,
    sinks: Arc<SinkSet>,
    plans: watch::Sender<Arc<TenantPlan>>,
    rejected_configs: Arc<AtomicU64>,
}

impl Reloader {
    /// Watches the plugins directory, `config` and the shadow candidates, and applies their
    /// changes on a thread of its own until the returned watcher is dropped.
    ///
    /// # Errors
    /// [`RunError::Watch`] when the files cannot be watched.
    fn start(self, config: Option<&Path>) -> Result<FileWatcher, RunError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let candidates: Vec<PathBuf> = self.registry.shadows().iter().map(|(_, s)| s.file().to_path_buf()).collect();
        let watcher = FileWatcher::start(self.registry.dir(), config, &candidates, move |c| {
            let _ = tx.send(c);
        })?;
        // Sinks opened by a reloaded config (a webhook's worker, an events.k8s.io series timer)
        // spawn their tasks on the run's runtime.
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("eventpipe-reload".into())
            .spawn(move || {
                let _runtime = runtime.enter();
                rx.into_iter().for_each(|change| self.apply(change))
            })
            .expect("spawning the reload thread");
        Ok(watcher)
    }

    fn apply(&self, change: Change) {
        match change {
            Change::Plugin(path) => {
                let outcome = self.registry.hot_reload_file(&path, |p| announce(&format!("{p} is live")));
                report_reload("", &path, &outcome);
                // A drop-in filter added or removed: a plan with the new filters.
                match self.replanner.plugins_changed(&self.registry, &self.sinks) {
                    Some(Ok(plan)) => self.adopt(plan, "drop-in filters changed"),
                    Some(Err(error)) => {
                        eprintln!("eventpipe: drop-in filters not applied, previous plan kept: {error}")
                    }
                    None => {}
                }
            }
            Change::Shadow(path) => {
                for outcome in self.registry.reload_shadow_file(&path) {
                    report_reload("shadow candidate: ", &path, &outcome);
                }
            }
            Change::Config(path) => {
                let plan = Config::load(&path).map_err(|e| e.to_string()).and_then(|c| {
                    self.replanner.config_changed(c, &self.registry, &self.sinks).map_err(|e| e.to_string())
                });
                match plan {
                    Ok(plan) => self.adopt(plan, &format!("config {} reloaded", path.display())),
                    Err(error) => {
                        self.rejected_configs.fetch_add(1, Ordering::Relaxed);
                        eprintln!("eventpipe: config rejected, previous config kept: {error}");
                        tracing::info!(%error, "config rejected, previous config kept");
                    }
                }
            }
        }
    }
}

impl Reloader {
    /// Hands `plan` to the router watcher, telling `why` and the plan. Its routes that did not
    /// change keep their state (bucket, writes held back).
    fn adopt(&self, mut plan: TenantPlan, why: &str) {
        plan.keep_route_state(&self.plans.borrow());
        let plan = Arc::new(plan);
        // Sent before it is announced: events sent after these lines meet the new plan.
        let _ = self.plans.send(plan.clone());
        announce(why);
        announce_plan(&plan);
        for line in self.replanner.unused(&plan, &self.registry, &self.watchers) {
            tracing::warn!("{line}");
        }
    }
}

/// Tells what a hot reload of `path` did (`what`: a prefix naming what was reloaded): a new
/// version (or a revert) as an `eventpipe:` line, a refusal once on stderr and in the log at
/// info like those lines (at the default level not printed twice); nothing when nothing changed.
fn report_reload(what: &str, path: &Path, outcome: &ReloadOutcome) {
    match outcome {
        ReloadOutcome::Live(_) | ReloadOutcome::Reverted { .. } => announce(&format!("{what}{outcome}")),
        ReloadOutcome::Rejected { .. } => {
            eprintln!("eventpipe: {what}{outcome}");
            tracing::info!(path = %path.display(), "{what}{outcome}");
        }
        ReloadOutcome::Unchanged { .. } | ReloadOutcome::StillRejected { .. } | ReloadOutcome::Ignored => {}
    }
}
