//! Where a plugin lives while it runs: a [`PluginSlot`] holds the current compiled version of one
//! plugin name and swaps it atomically on hot reload; a [`PluginHandle`] is that slot as one
//! tenant uses it, with the tenant's limits, policy and counters.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwapOption;

use super::{Plugin, PluginKind, PluginSettings, PluginStats};

/// One plugin name's current version (or none, after its file was removed and no embedded
/// default exists). Readers take the version once per call (`load`), so a call that started on
/// a version finishes on it while the slot already serves the next one.
pub struct PluginSlot {
    name: Arc<str>,
    kind: PluginKind,
    current: ArcSwapOption<Plugin>,
    swaps: AtomicU64,
    shadow: ArcSwapOption<super::shadow::Shadow>,
    breaker: super::breaker::Breaker,
    /// Set while the name is pinned and its file is gone ([`withdraw`](Self::withdraw)).
    withdrawn: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for PluginSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginSlot")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("version", &self.load().map(|p| p.version()))
            .finish()
    }
}

/// A new version of another kind than the slot's: the name's users (key function, sink, …)
/// could not call it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin `{plugin}` is {} {slot} plugin; the new file is {} {new} plugin (use another file name)", article(*slot), article(*new))]
pub struct KindChanged {
    /// Plugin name.
    pub plugin: String,
    /// The slot's kind, fixed when the name was first loaded.
    pub slot: PluginKind,
    /// The new file's kind.
    pub new: PluginKind,
}

impl PluginSlot {
    /// A slot serving `plugin`; its kind is fixed from now on.
    pub fn new(plugin: Arc<Plugin>) -> Arc<Self> {
        Arc::new(Self {
            name: plugin.name.clone(),
            kind: plugin.kind,
            current: ArcSwapOption::new(Some(plugin)),
            swaps: AtomicU64::new(0),
            shadow: ArcSwapOption::empty(),
            breaker: super::breaker::Breaker::default(),
            withdrawn: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The plugin name (the file stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kind every version of this name must have.
    pub fn kind(&self) -> PluginKind {
        self.kind
    }

    /// The version serving now; `None` when the name's file was removed and there is no
    /// embedded default (callers then use the built-in client-go function).
    pub fn load(&self) -> Option<Arc<Plugin>> {
        self.current.load_full()
    }

    /// Atomically replaces the serving version with `plugin` (or unloads it with `None`) and
    /// returns the previous one. Calls in flight finish on the previous version. A quarantine
    /// ([`super::breaker`]) is lifted: the new version gets its chance.
    ///
    /// # Errors
    /// [`KindChanged`] when `plugin` is not of the slot's kind; the slot is unchanged.
    pub fn swap(&self, plugin: Option<Arc<Plugin>>) -> Result<Option<Arc<Plugin>>, KindChanged> {
        if let Some(p) = &plugin
            && p.kind != self.kind
        {
            return Err(KindChanged { plugin: self.name.to_string(), slot: self.kind, new: p.kind });
        }
        self.swaps.fetch_add(1, Ordering::Relaxed);
        let previous = self.current.swap(plugin);
        self.withdrawn.store(false, Ordering::Relaxed);
        self.breaker.reset();
        Ok(previous)
    }

    /// Unloads the serving version of a pinned name whose file is gone: unlike an unloaded
    /// name, whose users use the built-in function, its users apply their fallback policy
    /// (`builtin`, `drop` or `fail`) until a version of the pinned digest is swapped in. Returns
    /// the previous version.
    pub fn withdraw(&self) -> Option<Arc<Plugin>> {
        let previous = self.swap(None).expect("unloading never changes the kind");
        self.withdrawn.store(true, Ordering::Relaxed);
        previous
    }

    /// Whether the name was [withdrawn](Self::withdraw) and nothing serves since.
    pub fn is_withdrawn(&self) -> bool {
        self.withdrawn.load(Ordering::Relaxed)
    }

    /// Replaces `current` by `new` if `current` still serves (the same compiled version, not an
    /// equal one), atomically; `false` (and no change) otherwise. For a rebuild of the same
    /// content (a [`Tier`](super::Tier) change), not counted in [`swaps`](Self::swaps).
    pub fn replace(&self, current: &Arc<Plugin>, new: Arc<Plugin>) -> bool {
        if new.kind != self.kind {
            return false;
        }
        let expected = Some(current.clone());
        let previous = self.current.compare_and_swap(&expected, Some(new));
        previous.as_ref().is_some_and(|p| Arc::ptr_eq(p, current))
    }

    /// Sets a candidate version to run beside this one ([`super::shadow`]): adapters made from
    /// now on compare the two.
    ///
    /// # Errors
    /// [`KindChanged`] when the candidate is of another kind.
    pub fn set_shadow(&self, shadow: Arc<super::shadow::Shadow>) -> Result<(), KindChanged> {
        let new = shadow.candidate().kind();
        if new != self.kind {
            return Err(KindChanged { plugin: self.name.to_string(), slot: self.kind, new });
        }
        self.shadow.store(Some(shadow));
        Ok(())
    }

    /// The candidate set beside this plugin, if any.
    pub fn shadow(&self) -> Option<Arc<super::shadow::Shadow>> {
        self.shadow.load_full()
    }

    /// The plugin's circuit breaker ([`super::breaker`]).
    pub fn breaker(&self) -> &super::breaker::Breaker {
        &self.breaker
    }

    /// How many times the slot's version was replaced or unloaded.
    pub fn swaps(&self) -> u64 {
        self.swaps.load(Ordering::Relaxed)
    }
}

/// A plugin slot as one tenant uses it: the tenant's name, the limits and fallback policy its
/// rules give the plugin, and the counters of its calls. Cheap to clone (clones share the
/// counters).
#[derive(Debug, Clone)]
pub struct PluginHandle {
    slot: Arc<PluginSlot>,
    tenant: Arc<str>,
    settings: Arc<PluginSettings>,
    stats: Arc<PluginStats>,
}

impl PluginHandle {
    /// `slot` used by `tenant` with `settings`, with fresh counters.
    pub fn new(slot: Arc<PluginSlot>, tenant: &str, settings: PluginSettings) -> Self {
        Self { slot, tenant: tenant.into(), settings: Arc::new(settings), stats: Arc::default() }
    }

    /// A handle on a plugin that is never swapped (tests, `plugins check`, one-off files).
    pub fn fixed(plugin: Arc<Plugin>, tenant: &str, settings: PluginSettings) -> Self {
        Self::new(PluginSlot::new(plugin), tenant, settings)
    }

    /// The slot.
    pub fn slot(&self) -> &Arc<PluginSlot> {
        &self.slot
    }

    /// The plugin name.
    pub fn name(&self) -> &str {
        self.slot.name()
    }

    /// The plugin kind.
    pub fn kind(&self) -> PluginKind {
        self.slot.kind()
    }

    /// The tenant.
    pub fn tenant(&self) -> &Arc<str> {
        &self.tenant
    }

    /// The limits and policy of this use.
    pub fn settings(&self) -> &PluginSettings {
        &self.settings
    }

    /// The counters of this use.
    pub fn stats(&self) -> &PluginStats {
        &self.stats
    }

    /// The counters of this use now, with whether the plugin is quarantined now
    /// ([`super::breaker`]).
    pub fn snapshot(&self) -> super::PluginStatsSnapshot {
        let quarantined = self.slot.breaker.is_quarantined(std::time::Instant::now());
        super::PluginStatsSnapshot { quarantined: u64::from(quarantined), ..self.stats.snapshot() }
    }
}

/// A plugin was given to an adapter of another kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin `{plugin}` is {} {actual} plugin, not {} {expected} plugin", article(*actual), article(*expected))]
pub struct WrongKind {
    /// Plugin name.
    pub plugin: String,
    /// Its kind.
    pub actual: PluginKind,
    /// The kind the adapter needs.
    pub expected: PluginKind,
}

/// "a" or "an" before a kind's name.
fn article(kind: PluginKind) -> &'static str {
    if kind.to_string().starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" }
}

/// [`WrongKind`] unless `handle` is a plugin of kind `expected`.
pub(crate) fn check_kind(handle: &PluginHandle, expected: PluginKind) -> Result<(), WrongKind> {
    if handle.kind() != expected {
        return Err(WrongKind { plugin: handle.name().into(), actual: handle.kind(), expected });
    }
    Ok(())
}
