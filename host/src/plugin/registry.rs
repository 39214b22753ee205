//! The plugins a process knows by name: the embedded defaults plus every `NAME.wasm` of the
//! plugins directory, each in a [`PluginSlot`] that hot reload swaps.
//!
//! [`PluginRegistry::reload_file`] is what a file change does: compile (through wasmtime's
//! cache), validate (instantiate and call once on a sample event), then swap atomically. A file
//! that fails any step never replaces a working version; a removed file reverts its name to the
//! embedded default of that name, or unloads it (users fall back to the built-in client-go
//! function). Compiling is slow (tens of ms), so callers run this off the event path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::check::validate;
pub use super::file::plugin_name;
use super::file::{DEFAULT_MAX_PLUGIN_BYTES, ReadError, read_plugin_file};
use super::pin::{PinError, Sha256Digest};
use super::shadow::{Shadow, ShadowLog};
use super::{
    Plugin, PluginError, PluginHandle, PluginKind, PluginOrigin, PluginRuntime, PluginSettings, PluginSlot, Tier,
};
use super::{WrongKind, embedded};

/// What one file change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// A new version is live (a new name, or a swap).
    Live(LivePlugin),
    /// The file's content is what already serves (e.g. a touch, or our own read of it).
    Unchanged {
        /// Plugin name.
        name: String,
    },
    /// The file was removed: the name serves the embedded default again (`Some`) or nothing
    /// (`None`: users fall back to the built-in function).
    Reverted {
        /// Plugin name.
        name: String,
        /// The version now serving.
        now: Option<LivePlugin>,
    },
    /// The file was refused; the previous version (if any) keeps serving.
    Rejected {
        /// Plugin name.
        name: String,
        /// The file.
        path: PathBuf,
        /// Why: compile, world, link, validation or kind-change error.
        error: String,
        /// Whether a version of that name serves on (else the name has no plugin).
        kept: bool,
    },
    /// The file's content is what was refused last for this name (e.g. the debounced report of
    /// a file already refused when it was renamed in): not compiled, counted or logged again.
    StillRejected {
        /// Plugin name.
        name: String,
    },
    /// Not a plugin file (not `*.wasm`, or outside the plugins directory).
    Ignored,
}

impl std::fmt::Display for ReloadOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReloadOutcome::Live(p) => write!(f, "{p} is live"),
            ReloadOutcome::Unchanged { name } => write!(f, "plugin `{name}` unchanged"),
            ReloadOutcome::Reverted { name, now: Some(p) } => write!(f, "plugin `{name}` removed; {p} is live"),
            ReloadOutcome::Reverted { name, now: None } => {
                write!(f, "plugin `{name}` removed; its users use the built-in function")
            }
            ReloadOutcome::Rejected { name, path, error, kept: true } => {
                write!(f, "plugin `{name}` from {} rejected, previous version kept: {error}", path.display())
            }
            ReloadOutcome::Rejected { name, path, error, kept: false } => {
                write!(f, "plugin `{name}` from {} rejected: {error}", path.display())
            }
            ReloadOutcome::StillRejected { name } => {
                write!(f, "plugin `{name}` unchanged since it was rejected, previous version kept")
            }
            ReloadOutcome::Ignored => f.write_str("not a plugin file"),
        }
    }
}

/// One serving plugin version, for listings and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivePlugin {
    /// Plugin name.
    pub name: String,
    /// Its kind.
    pub kind: PluginKind,
    /// Where it came from.
    pub origin: PluginOrigin,
    /// Process-unique version number.
    pub version: u64,
    /// This name's load count, from 1 (shown as `vN`).
    pub release: u64,
    /// XXH3-64 of the component bytes.
    pub digest: u64,
    /// SHA-256 of the component bytes (logged in its short form, as pins and `config show` name
    /// components).
    pub sha256: Sha256Digest,
    /// Time to compile it (or fetch it from the compilation cache).
    pub compile_time: Duration,
    /// The Cranelift settings it was compiled with.
    pub tier: Tier,
}

impl std::fmt::Display for LivePlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plugin `{}` ({}) v{} digest {} from {} ({}, compiled in {:.1} ms)",
            self.name,
            self.kind,
            self.release,
            self.sha256.short(),
            self.origin,
            self.tier,
            self.compile_time.as_secs_f64() * 1e3
        )
    }
}

impl LivePlugin {
    fn of(plugin: &Plugin) -> Self {
        Self {
            name: plugin.name().into(),
            kind: plugin.kind(),
            origin: plugin.origin().clone(),
            version: plugin.version(),
            release: plugin.release(),
            digest: plugin.digest(),
            sha256: plugin.sha256().clone(),
            compile_time: plugin.compile_time(),
            tier: plugin.tier(),
        }
    }
}

/// Told about a hot-reloaded version's optimized build once it serves.
type TierUpListener = Box<dyn FnOnce(&LivePlugin) + Send>;

/// A name no slot has (neither embedded nor in the plugins directory), or a slot of the wrong
/// kind for its use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// No plugin of that name.
    #[error(
        "no plugin named `{name}`{} (embedded: {embedded}; or {name}.wasm in {searched})",
        suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default()
    )]
    NotFound {
        /// The name asked for.
        name: String,
        /// The embedded names, for the message.
        embedded: String,
        /// Where files were looked for: the plugins directory, or that there is none.
        searched: String,
        /// The loaded name closest to `name`, when one is close (Jaro-Winkler ≥ 0.8).
        suggestion: Option<String>,
    },
    /// The plugin's file was refused (and no version of that name serves): the reason, not a
    /// misleading "no plugin named".
    #[error("plugin `{name}` was refused: {reason}")]
    Refused {
        /// The name asked for.
        name: String,
        /// Why its file was refused.
        reason: String,
    },
    /// The plugin is of another kind.
    #[error(transparent)]
    WrongKind(#[from] WrongKind),
}

/// The embedded defaults and the plugins directory, by name.
#[derive(Debug)]
pub struct PluginRegistry {
    runtime: PluginRuntime,
    dir: Option<PathBuf>,
    embedded: BTreeMap<String, Arc<Plugin>>,
    slots: RwLock<BTreeMap<String, Arc<PluginSlot>>>,
    validation: PluginSettings,
    swaps: AtomicU64,
    rejected: AtomicU64,
    /// Per name, the XXH3-64 digest of the content refused last (cleared when a version of
    /// that name goes live).
    refused: Mutex<BTreeMap<String, (u64, String)>>,
    /// Digests of the content compiled at [`Tier::Optimized`] in this process (so in
    /// wasmtime's cache): a hot reload of one of them skips the quick tier.
    optimized: Mutex<std::collections::HashSet<u64>>,
    tier_ups: AtomicU64,
    /// The largest plugin file read, bytes (`--max-plugin-bytes`).
    max_plugin_bytes: u64,
    /// Pinned names and the digest of the only bytes each may load ([`super::pin`]).
    pins: BTreeMap<String, Sha256Digest>,
    /// Per pinned name, the last refusal for a digest mismatch (cleared when a version of that
    /// name goes live or its file is removed).
    pin_refusals: Mutex<BTreeMap<String, PinError>>,
    pin_mismatches: AtomicU64,
}

impl PluginRegistry {
    /// A registry with the embedded defaults compiled and live, and no directory.
    ///
    /// # Errors
    /// [`PluginError`] if an embedded component fails to load (a broken build).
    pub fn new(runtime: PluginRuntime) -> Result<Self, PluginError> {
        let mut embedded = BTreeMap::new();
        for (name, bytes) in embedded::ALL {
            embedded.insert(name.to_string(), runtime.load(name, bytes, PluginOrigin::Embedded)?);
        }
        let slots = embedded.iter().map(|(n, p)| (n.clone(), PluginSlot::new(p.clone()))).collect();
        let optimized = embedded.values().map(|p| p.digest()).collect();
        Ok(Self {
            runtime,
            dir: None,
            embedded,
            slots: RwLock::new(slots),
            validation: PluginSettings::default(),
            swaps: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            refused: Mutex::new(BTreeMap::new()),
            optimized: Mutex::new(optimized),
            tier_ups: AtomicU64::new(0),
            max_plugin_bytes: DEFAULT_MAX_PLUGIN_BYTES,
            pins: BTreeMap::new(),
            pin_refusals: Mutex::new(BTreeMap::new()),
            pin_mismatches: AtomicU64::new(0),
        })
    }

    /// Reads plugin files of at most `max_bytes` bytes (`--max-plugin-bytes`; default
    /// [`DEFAULT_MAX_PLUGIN_BYTES`]); a larger one is refused. Set it before
    /// [`with_dir`](Self::with_dir).
    pub fn with_max_plugin_bytes(mut self, max_bytes: u64) -> Self {
        self.max_plugin_bytes = max_bytes;
        self
    }

    /// The largest plugin file read, bytes.
    pub fn max_plugin_bytes(&self) -> u64 {
        self.max_plugin_bytes
    }

    /// Validates new versions (the call on a sample event before a version may serve) with
    /// `settings` instead of the defaults: give Python and JavaScript plugins a larger fuel budget
    /// here (`--fuel-per-event`), or their first call may run out of the default 2,000,000.
    pub fn with_validation(mut self, settings: PluginSettings) -> Self {
        self.validation = settings;
        self
    }

    /// Pins plugin names to the SHA-256 digest of their component bytes (plugin name → digest):
    /// from now on a version of a pinned name whose bytes have another digest is refused, as a
    /// file that does not compile is (counted in [`pin_mismatches`](Self::pin_mismatches) too).
    /// Give the pins before [`with_dir`](Self::with_dir), then call
    /// [`verify_pins`](Self::verify_pins).
    pub fn with_pins(mut self, pins: BTreeMap<String, Sha256Digest>) -> Self {
        self.pins = pins;
        self
    }

    /// The pins given to [`with_pins`](Self::with_pins).
    pub fn pins(&self) -> &BTreeMap<String, Sha256Digest> {
        &self.pins
    }

    /// Whether every pinned name serves bytes of its digest: a file refused for its digest, an
    /// embedded default of another digest serving a pinned name, or a pinned name no plugin
    /// has is an error (what `run` exits on at start).
    ///
    /// # Errors
    /// The first [`PinError`] in name order: [`PinError::Mismatch`] (naming the plugin and
    /// both digests) or [`PinError::Missing`].
    pub fn verify_pins(&self) -> Result<(), PinError> {
        for (name, pinned) in &self.pins {
            if let Some(refusal) = self.pin_refusals().get(name) {
                return Err(refusal.clone());
            }
            let serving = self.slot(name).and_then(|s| s.load()).ok_or_else(|| PinError::Missing(name.clone()))?;
            // A file was checked when it loaded; an embedded default never was.
            if *serving.origin() == PluginOrigin::Embedded
                && let Some((_, bytes)) = embedded::ALL.iter().find(|(n, _)| n == name)
            {
                let actual = Sha256Digest::of(bytes);
                if actual != *pinned {
                    return Err(PinError::Mismatch {
                        name: name.clone(),
                        from: "the embedded default".into(),
                        pinned: pinned.clone(),
                        actual,
                    });
                }
            }
        }
        Ok(())
    }

    /// Versions refused so far because their bytes did not match their name's pin (also counted
    /// in [`rejected`](Self::rejected)).
    pub fn pin_mismatches(&self) -> u64 {
        self.pin_mismatches.load(Ordering::Relaxed)
    }

    fn pin_refusals(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PinError>> {
        self.pin_refusals.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds the plugins directory `dir` and loads every `*.wasm` in it (in name order); a file
    /// that fails is reported in the outcomes and left out, as is anything that is not a
    /// regular file (a FIFO, a device, a socket: a [`ReloadOutcome::Rejected`] saying what it
    /// is, see [`super::file`]). A missing directory is an error.
    ///
    /// # Errors
    /// The I/O error of listing `dir`.
    pub fn with_dir(mut self, dir: &Path) -> std::io::Result<(Self, Vec<ReloadOutcome>)> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
            .collect();
        files.sort();
        self.dir = Some(dir.to_path_buf());
        let outcomes = files.iter().map(|f| self.reload_file(f)).collect();
        Ok((self, outcomes))
    }

    /// The runtime plugins are compiled with.
    pub fn runtime(&self) -> &PluginRuntime {
        &self.runtime
    }

    /// The plugins directory, when there is one.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The slot of `name`, if any plugin of that name was ever loaded.
    pub fn slot(&self, name: &str) -> Option<Arc<PluginSlot>> {
        self.slots.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    /// A handle on plugin `name` for `tenant` with `settings`, checked to be of kind `kind`.
    ///
    /// # Errors
    /// [`LookupError`] when there is no such plugin or it is of another kind.
    pub fn handle(
        &self,
        name: &str,
        kind: PluginKind,
        tenant: &str,
        settings: PluginSettings,
    ) -> Result<PluginHandle, LookupError> {
        let slot = self.slot(name).ok_or_else(|| self.not_found(name))?;
        if slot.kind() != kind {
            return Err(WrongKind { plugin: name.into(), actual: slot.kind(), expected: kind }.into());
        }
        Ok(PluginHandle::new(slot, tenant, settings))
    }

    /// Loads the component `file` as a candidate for plugin `name` and sets it beside the
    /// serving version ([`super::shadow`]); adapters made afterwards compare the two, writing
    /// divergences to `log`.
    ///
    /// # Errors
    /// One line: no plugin `name`, a file that does not load, or a candidate of another kind.
    pub fn set_shadow(&self, name: &str, file: &Path, log: Arc<ShadowLog>) -> Result<Arc<Shadow>, String> {
        let slot = self.slot(name).ok_or_else(|| self.not_found(name).to_string())?;
        let candidate = self.runtime.load_file(name, file).map_err(|e| e.to_string())?;
        let shadow = Shadow::new(candidate, file.to_path_buf(), log);
        slot.set_shadow(shadow.clone()).map_err(|e| e.to_string())?;
        Ok(shadow)
    }

    /// Hot reload of a shadow candidate's file: every shadow whose candidate is `path` (as set,
    /// or the same file) takes the new version, unless it is unchanged, does not load, or is of
    /// another kind (then the candidate in use stays, and the refusal counts among the rejected
    /// reloads). One outcome per such shadow; none when `path` is no candidate.
    pub fn reload_shadow_file(&self, path: &Path) -> Vec<ReloadOutcome> {
        let same = |file: &Path| file == path || std::fs::canonicalize(file).ok() == std::fs::canonicalize(path).ok();
        let mut outcomes = Vec::new();
        for (name, shadow) in self.shadows().into_iter().filter(|(_, s)| same(s.file())) {
            let slot = shadow.candidate();
            let refused = |error: String| {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                ReloadOutcome::Rejected { name: name.clone(), path: path.to_path_buf(), error, kept: true }
            };
            let bytes = match read_plugin_file(path, self.max_plugin_bytes) {
                Ok(bytes) => bytes,
                Err(e) => {
                    outcomes.push(refused(e.to_string()));
                    continue;
                }
            };
            if slot.load().is_some_and(|p| p.digest() == xxhash_rust::xxh3::xxh3_64(&bytes)) {
                outcomes.push(ReloadOutcome::Unchanged { name: name.clone() });
                continue;
            }
            let outcome = self
                .runtime
                .load(&name, &bytes, PluginOrigin::File(path.to_path_buf()))
                .map_err(|e| e.to_string())
                .and_then(|plugin| {
                    let live = LivePlugin::of(&plugin);
                    slot.swap(Some(plugin)).map(|_| live).map_err(|e| e.to_string())
                });
            outcomes.push(match outcome {
                Ok(live) => ReloadOutcome::Live(live),
                Err(error) => refused(error),
            });
        }
        outcomes
    }

    /// Every plugin name with a shadow, and its shadow.
    pub fn shadows(&self) -> Vec<(String, Arc<Shadow>)> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        slots.iter().filter_map(|(n, s)| s.shadow().map(|sh| (n.clone(), sh))).collect()
    }

    /// [`LookupError::NotFound`] for `name`, with the closest loaded name as a suggestion.
    fn not_found(&self, name: &str) -> LookupError {
        if let Some((_, reason)) = self.refused().get(name) {
            return LookupError::Refused { name: name.into(), reason: reason.clone() };
        }
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        let suggestion = crate::suggest::closest(name, slots.keys().map(String::as_str)).map(str::to_string);
        LookupError::NotFound {
            name: name.into(),
            embedded: self.embedded.keys().cloned().collect::<Vec<_>>().join(", "),
            searched: match &self.dir {
                Some(dir) => format!("the plugins directory {}", dir.display()),
                None => "a plugins directory (none given)".into(),
            },
            suggestion,
        }
    }

    /// Every name and the version serving it (`None`: unloaded), in name order.
    pub fn live(&self) -> Vec<(String, Option<LivePlugin>)> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        slots.iter().map(|(n, s)| (n.clone(), s.load().map(|p| LivePlugin::of(&p)))).collect()
    }

    /// The names of the plugins of kind `kind` that a file of the plugins directory serves now,
    /// in file-name order (byte order of `NAME.wasm`): the drop-in filters and watchers. Names
    /// whose file was removed (unloaded, or back to an embedded default) are not among them.
    pub fn directory_plugins(&self, kind: PluginKind) -> Vec<String> {
        let Some(dir) = &self.dir else { return Vec::new() };
        let canonical = std::fs::canonicalize(dir).ok();
        let in_dir = |path: &Path| {
            let parent = path.parent();
            parent == Some(dir.as_path())
                || (canonical.is_some() && parent.and_then(|p| std::fs::canonicalize(p).ok()) == canonical)
        };
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<String> = slots
            .iter()
            .filter(|(_, slot)| {
                slot.load()
                    .is_some_and(|p| p.kind() == kind && matches!(p.origin(), PluginOrigin::File(path) if in_dir(path)))
            })
            .map(|(name, _)| name.clone())
            .collect();
        names.sort_by_key(|n| format!("{n}.wasm"));
        names
    }

    /// The SHA-256 of the component serving `name` (hex), with where it came from: the
    /// embedded bytes, or the file as it is now. `None` when nothing serves the name or its
    /// file cannot be read.
    pub fn sha256(&self, name: &str) -> Option<(String, PluginOrigin)> {
        use sha2::Digest;
        let plugin = self.slot(name)?.load()?;
        let bytes = match plugin.origin() {
            PluginOrigin::Embedded => embedded::ALL.iter().find(|(n, _)| *n == name).map(|(_, b)| b.to_vec())?,
            PluginOrigin::File(path) => std::fs::read(path).ok()?,
        };
        let digest = sha2::Sha256::digest(&bytes);
        Some((digest.iter().map(|b| format!("{b:02x}")).collect(), plugin.origin().clone()))
    }

    /// Swaps served so far (new versions and reverts).
    pub fn swaps(&self) -> u64 {
        self.swaps.load(Ordering::Relaxed)
    }

    /// Files refused so far.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Quick-tier versions replaced by their optimized build so far.
    pub fn tier_ups(&self) -> u64 {
        self.tier_ups.load(Ordering::Relaxed)
    }

    /// Applies the current state of `path` (a `NAME.wasm` that was created, changed, renamed in
    /// or removed): load, validate and swap in; or revert on removal. Blocking (compiles at
    /// [`Tier::Optimized`]).
    pub fn reload_file(&self, path: &Path) -> ReloadOutcome {
        self.reload(path, None)
    }

    /// The plugin `reference` names: a plugin name as it is, or a component file
    /// (`…/NAME.wasm`) loaded now under its stem `NAME` (as [`reload_file`](Self::reload_file)).
    ///
    /// # Errors
    /// The reason a file could not be loaded (missing, refused), as one line.
    pub fn name_or_load(&self, reference: &str) -> Result<String, String> {
        if !reference.ends_with(".wasm") {
            return Ok(reference.to_string());
        }
        match self.reload_file(Path::new(reference)) {
            ReloadOutcome::Live(p) => Ok(p.name),
            ReloadOutcome::Unchanged { name } => Ok(name),
            other => Err(other.to_string()),
        }
    }

    /// As [`reload_file`](Self::reload_file), for a change seen while events flow, where swap
    /// latency counts: content not compiled optimized before (in this process, or into the
    /// compilation cache: [`PluginRuntime::has_optimized`]) is compiled at
    /// [`Tier::Quick`] (about half the compile time) and swapped in, then a background thread
    /// builds it at [`Tier::Optimized`] and swaps that in, unless another version was swapped
    /// in meanwhile. The second swap restarts the plugin's instances (guest memory starts
    /// fresh), as any swap does. Content compiled optimized before (a rollback) swaps in
    /// optimized at once (a compilation-cache hit). `on_tier_up` is called (on the background
    /// thread) with the optimized build once it serves.
    pub fn hot_reload_file(
        self: &Arc<Self>,
        path: &Path,
        on_tier_up: impl FnOnce(&LivePlugin) + Send + 'static,
    ) -> ReloadOutcome {
        self.reload(path, Some((self, Box::new(on_tier_up))))
    }

    /// `hot`: the registry to tier up in the background (hot reload) and what to tell when that
    /// is done, or `None` (optimized at once).
    fn reload(&self, path: &Path, hot: Option<(&Arc<Self>, TierUpListener)>) -> ReloadOutcome {
        let Some(name) = plugin_name(path) else { return ReloadOutcome::Ignored };
        let bytes = match read_plugin_file(path, self.max_plugin_bytes) {
            Ok(bytes) => bytes,
            Err(e) if e.is_not_found() => return self.revert(&name, path),
            Err(e @ (ReadError::NotRegular { .. } | ReadError::TooLarge { .. })) => {
                // Remembered by the file's identity (and size): the next event for the same
                // FIFO, device or oversized file is not reported again (the caller reports
                // this refusal once).
                let (dev, ino, len) = match e {
                    ReadError::NotRegular { identity: (dev, ino), .. } => (dev, ino, 0),
                    ReadError::TooLarge { identity, .. } => identity,
                    ReadError::Io(_) => unreachable!("matched above"),
                };
                let digest =
                    xxhash_rust::xxh3::xxh3_64(&[dev.to_le_bytes(), ino.to_le_bytes(), len.to_le_bytes()].concat());
                if self.refused().get(&name).is_some_and(|(d, _)| *d == digest) {
                    return ReloadOutcome::StillRejected { name };
                }
                return self.refuse(&name, path, digest, e.to_string());
            }
            Err(e) => return self.reject(&name, path, e.to_string()),
        };
        let digest = xxhash_rust::xxh3::xxh3_64(&bytes);
        let slot = self.slot(&name);
        if slot.as_ref().and_then(|s| s.load()).is_some_and(|p| p.digest() == digest) {
            return ReloadOutcome::Unchanged { name };
        }
        if self.refused().get(&name).is_some_and(|(d, _)| *d == digest) {
            return ReloadOutcome::StillRejected { name };
        }
        if let Some(pinned) = self.pins.get(&name) {
            let actual = Sha256Digest::of(&bytes);
            if actual != *pinned {
                self.pin_mismatches.fetch_add(1, Ordering::Relaxed);
                let error = format!("pinned to {pinned}, but its bytes are {actual}");
                let from = path.display().to_string();
                let refusal = PinError::Mismatch { name: name.clone(), from, pinned: pinned.clone(), actual };
                self.pin_refusals().insert(name.clone(), refusal);
                return self.refuse(&name, path, digest, error);
            }
        }
        // Built optimized before, here or by another process through the same compilation
        // cache (`plugins check`): optimized at once, a cache hit.
        let tier = match hot {
            Some(_) if !self.optimized_digests().contains(&digest) && !self.runtime.has_optimized(digest) => {
                Tier::Quick
            }
            _ => Tier::Optimized,
        };
        let plugin = match self.runtime.load_tier(&name, &bytes, PluginOrigin::File(path.to_path_buf()), tier) {
            Ok(plugin) => plugin,
            Err(e) => return self.refuse(&name, path, digest, e.to_string()),
        };
        if let Err(e) = validate(plugin.clone(), self.validation.clone()) {
            return self.refuse(&name, path, digest, e.to_string());
        }
        let live = LivePlugin::of(&plugin);
        let serving = plugin.clone();
        match slot {
            Some(slot) => {
                if let Err(e) = slot.swap(Some(plugin)) {
                    return self.refuse(&name, path, digest, e.to_string());
                }
                self.swaps.fetch_add(1, Ordering::Relaxed);
            }
            // A new name: a first version, not a swap.
            None => {
                self.slots.write().unwrap_or_else(|p| p.into_inner()).insert(name, PluginSlot::new(plugin));
            }
        }
        self.refused().remove(&live.name);
        self.pin_refusals().remove(&live.name);
        if tier == Tier::Optimized {
            self.optimized_digests().insert(digest);
        } else if let Some((registry, on_tier_up)) = hot {
            let registry = registry.clone();
            let spawned = std::thread::Builder::new()
                .name("eventpipe-tier-up".into())
                .spawn(move || registry.tier_up(&serving, &bytes, on_tier_up));
            if let Err(error) = spawned {
                tracing::warn!(plugin = %live.name, %error, "cannot start the optimized build; the quick tier keeps serving");
            }
        }
        ReloadOutcome::Live(live)
    }

    /// Builds `quick`'s content (`bytes`) at [`Tier::Optimized`], validates it and swaps it in
    /// if `quick` still serves, then calls `on_tier_up`.
    fn tier_up(&self, quick: &Arc<Plugin>, bytes: &[u8], on_tier_up: TierUpListener) {
        let name = quick.name();
        if !self.slot(name).and_then(|s| s.load()).is_some_and(|p| Arc::ptr_eq(&p, quick)) {
            return; // superseded before its optimized build started: not worth compiling
        }
        let optimized = self
            .runtime
            .load_tier(name, bytes, quick.origin().clone(), Tier::Optimized)
            .map_err(|e| e.to_string())
            .and_then(|p| validate(p.clone(), self.validation.clone()).map(|_| p).map_err(|e| e.to_string()));
        let optimized = match optimized {
            Ok(optimized) => optimized,
            Err(error) => {
                tracing::warn!(plugin = name, %error, "optimized build failed; the quick tier keeps serving");
                return;
            }
        };
        self.optimized_digests().insert(optimized.digest());
        let live = LivePlugin::of(&optimized);
        match self.slot(name) {
            Some(slot) if slot.replace(quick, optimized) => {
                self.tier_ups.fetch_add(1, Ordering::Relaxed);
                on_tier_up(&live);
            }
            _ => tracing::debug!(plugin = name, "optimized build dropped: another version serves"),
        }
    }

    fn optimized_digests(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<u64>> {
        self.optimized.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `name`'s file at `path` is gone: the embedded default serves again, or nothing. A pinned
    /// name is never served other bytes: unless its embedded default has the pinned digest, it
    /// is [withdrawn](PluginSlot::withdraw) and the removal is refused as an error.
    fn revert(&self, name: &str, path: &Path) -> ReloadOutcome {
        self.refused().remove(name);
        self.pin_refusals().remove(name);
        let Some(slot) = self.slot(name) else { return ReloadOutcome::Ignored };
        let default = self.embedded.get(name).cloned();
        let embedded_digest =
            || embedded::ALL.iter().find(|(n, _)| *n == name).map(|(_, bytes)| Sha256Digest::of(bytes));
        if let Some(pinned) = self.pins.get(name)
            && (default.is_none() || embedded_digest().as_ref() != Some(pinned))
        {
            if slot.is_withdrawn() {
                return ReloadOutcome::StillRejected { name: name.into() };
            }
            slot.withdraw();
            self.swaps.fetch_add(1, Ordering::Relaxed);
            let error = format!(
                "the file is gone, and the name is pinned to {pinned}: its users apply their \
                 fallback policy until a file of that digest is back"
            );
            return self.reject(name, path, error);
        }
        if let (Some(current), Some(default)) = (slot.load(), &default)
            && Arc::ptr_eq(&current, default)
        {
            return ReloadOutcome::Unchanged { name: name.into() };
        }
        let now = default.as_ref().map(|p| LivePlugin::of(p));
        slot.swap(default).expect("an embedded default has its slot's kind");
        self.swaps.fetch_add(1, Ordering::Relaxed);
        ReloadOutcome::Reverted { name: name.into(), now }
    }

    /// Rejects content with `digest`, remembered so that the same content is not tried again.
    fn refuse(&self, name: &str, path: &Path, digest: u64, error: String) -> ReloadOutcome {
        self.refused().insert(name.into(), (digest, error.clone()));
        self.reject(name, path, error)
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (u64, String)>> {
        self.refused.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn reject(&self, name: &str, path: &Path, error: String) -> ReloadOutcome {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        let kept = self.slot(name).is_some_and(|s| s.load().is_some());
        ReloadOutcome::Rejected { name: name.into(), path: path.to_path_buf(), error, kept }
    }
}

impl crate::metrics::Snapshot {
    /// Adds the registry's swaps, tier-ups and refused files, and its shadows' comparisons.
    pub fn add_registry(&mut self, registry: &PluginRegistry) {
        use crate::metrics::{
            PLUGIN_PIN_MISMATCHES, PLUGIN_RELOADS_REJECTED, PLUGIN_SWAPS, PLUGIN_TIER_UPS, SHADOW_COMPARED,
            SHADOW_DIVERGENCES,
        };
        self.add(&PLUGIN_SWAPS, &[], registry.swaps());
        self.add(&PLUGIN_TIER_UPS, &[], registry.tier_ups());
        self.add(&PLUGIN_RELOADS_REJECTED, &[], registry.rejected());
        self.add(&PLUGIN_PIN_MISMATCHES, &[], registry.pin_mismatches());
        for (name, shadow) in registry.shadows() {
            let stats = shadow.stats();
            self.add(&SHADOW_COMPARED, &[("plugin", &name)], stats.compared);
            self.add(&SHADOW_DIVERGENCES, &[("plugin", &name)], stats.diverged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::Metering;

    fn registry(dir: &Path) -> PluginRegistry {
        PluginRegistry::new(PluginRuntime::new(Metering::Fuel).unwrap()).unwrap().with_dir(dir).unwrap().0
    }

    #[test]
    fn versions_are_numbered_per_name() {
        let dir = tempfile::tempdir().unwrap();
        let reg = registry(dir.path());
        for (name, live) in reg.live() {
            assert_eq!(live.unwrap().release, 1, "{name}: the first load of every embedded plugin is v1");
        }
        let path = dir.path().join("keys.wasm");
        std::fs::write(&path, embedded::BY_REASON).unwrap();
        let ReloadOutcome::Live(first) = reg.reload_file(&path) else { panic!("keys loads") };
        assert_eq!(first.release, 1, "a new name starts at v1");
        assert!(first.to_string().contains(" v1 "), "{first}");
        // The next version of the name is v2, whatever other names loaded in between.
        let again = reg.runtime().load("keys", embedded::BY_REASON, PluginOrigin::Embedded).unwrap();
        assert_eq!(again.release(), 2);
    }

    #[test]
    fn names_of_plugin_files() {
        assert_eq!(plugin_name(Path::new("/p/by-reason.wasm")).as_deref(), Some("by-reason"));
        assert_eq!(plugin_name(Path::new("/p/by-reason.wasm.tmp")), None);
        assert_eq!(plugin_name(Path::new("/p/.by-reason.wasm")), None);
        assert_eq!(plugin_name(Path::new("/p/notes.txt")), None);
    }

    #[test]
    fn a_file_overrides_the_embedded_default_and_removing_it_reverts() {
        let dir = tempfile::tempdir().unwrap();
        let reg = registry(dir.path());
        let embedded_version = reg.slot("by-reason").unwrap().load().unwrap().version();
        // Another component of the same kind under the default's name: `similar-events` is a
        // combiner, so it is refused; an aggregate-key component is accepted.
        let path = dir.path().join("by-reason.wasm");
        std::fs::write(&path, embedded::SIMILAR_EVENTS).unwrap();
        assert!(
            matches!(reg.reload_file(&path), ReloadOutcome::Rejected { ref error, .. } if error.contains("aggregate-key plugin; the new file is a message-combiner"))
        );
        assert_eq!(reg.slot("by-reason").unwrap().load().unwrap().version(), embedded_version);

        let mut bytes = embedded::BY_REASON.to_vec();
        bytes.extend_from_slice(&[0, 4, 3, b'e', b'p', b'1']); // a custom section: new bytes, same code
        std::fs::write(&path, &bytes).unwrap();
        let ReloadOutcome::Live(live) = reg.reload_file(&path) else { panic!("the new version goes live") };
        assert_eq!(reg.slot("by-reason").unwrap().load().unwrap().version(), live.version);
        assert_eq!(reg.reload_file(&path), ReloadOutcome::Unchanged { name: "by-reason".into() });

        std::fs::remove_file(&path).unwrap();
        assert!(matches!(reg.reload_file(&path), ReloadOutcome::Reverted { now: Some(_), .. }));
        assert_eq!(reg.slot("by-reason").unwrap().load().unwrap().version(), embedded_version);
        assert_eq!(reg.swaps(), 2);
    }

    #[test]
    fn broken_files_never_replace_a_working_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.wasm");
        std::fs::write(&path, embedded::BY_REASON).unwrap();
        let reg = registry(dir.path());
        let serving = reg.slot("keys").unwrap().load().unwrap().version();
        for broken in [&embedded::BY_REASON[..embedded::BY_REASON.len() / 2], b"not wasm at all".as_slice()] {
            std::fs::write(&path, broken).unwrap();
            let outcome = reg.reload_file(&path);
            assert!(matches!(outcome, ReloadOutcome::Rejected { .. }), "{outcome}");
            assert!(outcome.to_string().contains("keys.wasm"), "{outcome}");
            assert_eq!(reg.slot("keys").unwrap().load().unwrap().version(), serving);
        }
        assert_eq!(reg.rejected(), 2);
        // A removed file with no embedded default unloads the name.
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(reg.reload_file(&path), ReloadOutcome::Reverted { now: None, .. }));
        assert!(reg.slot("keys").unwrap().load().is_none());
    }

    #[test]
    fn refused_content_is_not_tried_again_until_the_name_changes_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.wasm");
        std::fs::write(&path, embedded::BY_REASON).unwrap();
        let reg = registry(dir.path());
        std::fs::write(&path, b"not wasm at all").unwrap();
        assert!(matches!(reg.reload_file(&path), ReloadOutcome::Rejected { .. }));
        // The same content reported again (the debounced report after a rename): no new error.
        let again = reg.reload_file(&path);
        assert_eq!(again, ReloadOutcome::StillRejected { name: "keys".into() });
        assert!(again.to_string().contains("previous version kept"), "{again}");
        assert_eq!(reg.rejected(), 1);
        // Other broken content is a new rejection.
        std::fs::write(&path, b"not wasm either").unwrap();
        assert!(matches!(reg.reload_file(&path), ReloadOutcome::Rejected { .. }));
        // Once a good version went live, the old broken content is tried (and refused) again.
        std::fs::write(&path, embedded::SIMILAR_EVENTS).unwrap();
        assert!(matches!(reg.reload_file(&path), ReloadOutcome::Rejected { .. }), "another kind");
        std::fs::write(&path, embedded::SOURCE_OBJECT).unwrap();
        assert!(matches!(reg.reload_file(&path), ReloadOutcome::Rejected { .. }), "another kind");
        assert_eq!(reg.rejected(), 4);
        std::fs::write(&path, variant_of_by_reason()).unwrap();
        assert!(matches!(reg.reload_file(&path), ReloadOutcome::Live(_)));
        std::fs::write(&path, b"not wasm either").unwrap();
        assert!(matches!(reg.reload_file(&path), ReloadOutcome::Rejected { .. }));
        assert_eq!(reg.rejected(), 5);
    }

    #[test]
    fn a_hot_reload_serves_new_content_at_the_quick_tier_until_its_optimized_build_takes_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("by-reason.wasm");
        let reg = Arc::new(registry(dir.path()));
        let slot = reg.slot("by-reason").unwrap();
        let embedded_version = slot.load().unwrap();

        std::fs::write(&path, variant_of_by_reason()).unwrap();
        let (told_tx, told) = std::sync::mpsc::channel();
        let ReloadOutcome::Live(live) = reg.hot_reload_file(&path, move |p| told_tx.send(p.clone()).unwrap()) else {
            panic!("not live")
        };
        assert_eq!(live.tier, Tier::Quick);
        assert!(live.to_string().contains("quick tier"), "{live}");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while slot.load().unwrap().tier() != Tier::Optimized {
            assert!(std::time::Instant::now() < deadline, "the optimized build never took over");
            std::thread::sleep(Duration::from_millis(5));
        }
        let optimized = slot.load().unwrap();
        assert_eq!(told.recv().unwrap(), LivePlugin::of(&optimized), "the listener is told");
        assert_eq!(optimized.digest(), live.digest, "the same content");
        assert!(optimized.version() > live.version);
        assert_eq!((reg.swaps(), reg.tier_ups()), (1, 1), "a tier-up is not a swap");
        // Content compiled optimized before (the embedded default): optimized at once.
        std::fs::write(&path, embedded::BY_REASON).unwrap();
        let ReloadOutcome::Live(rollback) = reg.hot_reload_file(&path, |_| panic!("no tier-up")) else {
            panic!("not live")
        };
        assert_eq!(rollback.tier, Tier::Optimized);
        assert_eq!(rollback.digest, embedded_version.digest());
        // The blocking path never uses the quick tier.
        let mut another = variant_of_by_reason();
        another.extend_from_slice(&[0, 3, 1, b'z', b'z']);
        std::fs::write(&path, another).unwrap();
        let ReloadOutcome::Live(blocking) = reg.reload_file(&path) else { panic!("not live") };
        assert_eq!(blocking.tier, Tier::Optimized);
    }

    #[test]
    fn a_tier_up_never_replaces_a_version_swapped_in_meanwhile() {
        let runtime = PluginRuntime::new(Metering::Fuel).unwrap();
        let load = |tier| runtime.load_tier("k", embedded::BY_REASON, PluginOrigin::Embedded, tier).unwrap();
        let (quick, newer, optimized) = (load(Tier::Quick), load(Tier::Optimized), load(Tier::Optimized));
        let slot = PluginSlot::new(quick.clone());
        slot.swap(Some(newer.clone())).unwrap();
        assert!(!slot.replace(&quick, optimized.clone()));
        assert!(Arc::ptr_eq(&slot.load().unwrap(), &newer));
        assert!(slot.replace(&newer, optimized.clone()));
        assert!(Arc::ptr_eq(&slot.load().unwrap(), &optimized));
    }

    #[test]
    fn a_pinned_name_takes_only_bytes_of_its_digest_and_keeps_serving_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("by-reason.wasm");
        let variant = variant_of_by_reason();
        std::fs::write(&path, &variant).unwrap();
        let pins = |bytes: &[u8]| BTreeMap::from([("by-reason".to_string(), Sha256Digest::of(bytes))]);
        let load = |pinned: &[u8]| {
            PluginRegistry::new(PluginRuntime::new(Metering::Fuel).unwrap())
                .unwrap()
                .with_pins(pins(pinned))
                .with_dir(dir.path())
                .unwrap()
        };
        // Pinned to the embedded default's bytes: the file is refused, naming both digests.
        let (reg, outcomes) = load(embedded::BY_REASON);
        assert!(matches!(&outcomes[..], [ReloadOutcome::Rejected { .. }]), "{outcomes:?}");
        let err = reg.verify_pins().unwrap_err();
        let (pinned, actual) = (Sha256Digest::of(embedded::BY_REASON), Sha256Digest::of(&variant));
        assert_eq!(
            err.to_string(),
            format!(
                "plugin `by-reason` from {} refused: pinned to {pinned}, but its bytes are {actual}",
                path.display()
            )
        );
        assert_eq!((reg.pin_mismatches(), reg.rejected()), (1, 1));

        // Pinned to the file's own bytes: it serves; other bytes later are refused and it serves on.
        let (reg, outcomes) = load(&variant);
        assert!(matches!(&outcomes[..], [ReloadOutcome::Live(_)]), "{outcomes:?}");
        reg.verify_pins().unwrap();
        let serving = reg.slot("by-reason").unwrap().load().unwrap().version();
        std::fs::write(&path, embedded::BY_REASON).unwrap();
        let outcome = reg.reload_file(&path);
        assert!(matches!(outcome, ReloadOutcome::Rejected { kept: true, .. }), "{outcome}");
        assert!(outcome.to_string().contains(&format!("pinned to {actual}, but its bytes are {pinned}")), "{outcome}");
        assert_eq!(reg.slot("by-reason").unwrap().load().unwrap().version(), serving);
        assert_eq!((reg.pin_mismatches(), reg.swaps()), (1, 1), "the file's own swap at start only");

        // The pinned file removed: the name is withdrawn (never the embedded default of other
        // bytes), an error; its file back goes live again.
        std::fs::write(&path, &variant).unwrap();
        std::fs::remove_file(&path).unwrap();
        let outcome = reg.reload_file(&path);
        assert!(matches!(outcome, ReloadOutcome::Rejected { kept: false, .. }), "{outcome}");
        assert!(outcome.to_string().contains(&format!("pinned to {actual}")), "{outcome}");
        let slot = reg.slot("by-reason").unwrap();
        assert!(slot.load().is_none() && slot.is_withdrawn());
        assert_eq!(reg.reload_file(&path), ReloadOutcome::StillRejected { name: "by-reason".into() });
        assert!(reg.verify_pins().is_err());
        std::fs::write(&path, &variant).unwrap();
        assert!(matches!(reg.reload_file(&path), ReloadOutcome::Live(_)));
        assert!(!slot.is_withdrawn() && slot.load().is_some());
        reg.verify_pins().unwrap();

        // A pin of an embedded default with other bytes, or of a name nothing has, fails the check.
        let reg = PluginRegistry::new(PluginRuntime::new(Metering::Fuel).unwrap()).unwrap().with_pins(pins(&variant));
        assert!(
            matches!(reg.verify_pins(), Err(PinError::Mismatch { ref from, .. }) if from == "the embedded default")
        );
        let reg = reg.with_pins(BTreeMap::from([("nope".into(), actual)]));
        assert_eq!(reg.verify_pins(), Err(PinError::Missing("nope".into())));
    }

    /// `by-reason` with one extra custom section: new bytes, the same plugin.
    fn variant_of_by_reason() -> Vec<u8> {
        let mut bytes = embedded::BY_REASON.to_vec();
        bytes.extend_from_slice(&[0, 3, 1, b'x', b'y']);
        bytes
    }

    /// A name whose file was refused is looked up as refused, with the reason, never as "no
    /// plugin named".
    #[test]
    fn a_lookup_of_a_refused_plugin_gives_the_refusal() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("escape.wasm"), b"\0asm not a component").unwrap();
        let reg = registry(dir.path());
        let err = reg.handle("escape", PluginKind::Filter, "t", PluginSettings::default()).unwrap_err();
        let said = err.to_string();
        assert!(matches!(err, LookupError::Refused { .. }), "{said}");
        assert!(said.starts_with("plugin `escape` was refused: ") && !said.contains("no plugin named"), "{said}");
    }

    #[test]
    fn lookups_check_the_kind() {
        let dir = tempfile::tempdir().unwrap();
        let reg = registry(dir.path());
        let settings = PluginSettings::default();
        assert!(reg.handle("by-reason", PluginKind::AggregateKey, "t", settings.clone()).is_ok());
        let err = reg.handle("by-reason", PluginKind::SpamKey, "t", settings.clone()).unwrap_err();
        assert!(matches!(err, LookupError::WrongKind(_)), "{err}");
        let err = reg.handle("nope", PluginKind::SpamKey, "t", settings).unwrap_err();
        assert!(err.to_string().contains("no plugin named `nope`"), "{err}");
    }
}
