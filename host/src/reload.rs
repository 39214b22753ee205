//! Watching the plugins directory, the config file and the shadow plugins' candidate files for
//! changes (`notify` with `notify-debouncer-full`), reported as [`Change`]s.
//!
//! Only events that can change content count: create, data modification, rename and removal.
//! Access events (including our own reads of a file we reload) and metadata changes are ignored,
//! so reloading never triggers another reload. Changes are debounced by [`DEBOUNCE`]: a burst of
//! writes to one file is reported once, after it goes quiet. A slow, non-atomic copy that pauses
//! longer than that is reported more than once; the consumer rejects the incomplete versions
//! (they do not compile) and takes the complete one when the last write lands.
//!
//! A `*.wasm` file renamed into the plugins directory (the recommended way to install a plugin)
//! is complete when it appears, so it is also reported at once, without waiting for the
//! debounce: that is [`DEBOUNCE`] less swap latency. The debounced report follows; by then the
//! consumer finds the content it already serves and does nothing.
//!
//! Kubernetes ConfigMap and Secret volumes update by swapping a `..data` symlink; such a swap
//! re-reads every plugin file (and the config) in that directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::{Arc, Mutex};

use notify::event::{EventKind, ModifyKind, RenameMode};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

/// How long a file must be quiet before its change is reported.
pub const DEBOUNCE: Duration = Duration::from_millis(20);

/// A change the host reacts to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A `*.wasm` file in the plugins directory was created, written, renamed in or out, or
    /// removed: its path (it may no longer exist).
    Plugin(PathBuf),
    /// The config file was created, written, replaced or removed.
    Config(PathBuf),
    /// A shadow plugin's candidate file ([`crate::plugin::shadow`]) was created, written,
    /// replaced or removed.
    Shadow(PathBuf),
}

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {path}: {error}")]
pub struct WatchError {
    /// The directory that could not be watched.
    pub path: PathBuf,
    /// notify's error.
    #[source]
    pub error: notify::Error,
}

/// A running watch; dropping it stops watching.
pub struct FileWatcher {
    _debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
    _renames: Option<RecommendedWatcher>,
}

impl std::fmt::Debug for FileWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWatcher").finish_non_exhaustive()
    }
}

impl FileWatcher {
    /// Watches `plugins_dir` (its `*.wasm` files, not recursively), `config` and the shadow
    /// `candidates` (each through its directory, so editors that replace a file by a rename are
    /// seen), calling `on_change`
    /// on notify's threads with each debounced change, in order, and at once with each
    /// `*.wasm` file renamed into `plugins_dir` (reported again when the debounce ends).
    /// `on_change` should hand the change to another thread rather than compile there.
    ///
    /// # Errors
    /// [`WatchError`] when a directory cannot be watched (missing, no permission, no inotify).
    pub fn start(
        plugins_dir: Option<&Path>,
        config: Option<&Path>,
        candidates: &[PathBuf],
        on_change: impl FnMut(Change) + Send + 'static,
    ) -> Result<Self, WatchError> {
        Self::start_with(DEBOUNCE, plugins_dir, config, candidates, on_change)
    }

    fn start_with(
        debounce: Duration,
        plugins_dir: Option<&Path>,
        config: Option<&Path>,
        candidates: &[PathBuf],
        on_change: impl FnMut(Change) + Send + 'static,
    ) -> Result<Self, WatchError> {
        let plugins_dir = plugins_dir.map(absolute);
        let config = config.map(absolute);
        // Each candidate as watched, and as given (what the registry knows it by).
        let candidates: Vec<(PathBuf, PathBuf)> = candidates.iter().map(|c| (absolute(c), c.clone())).collect();
        let candidates_for_events = candidates.clone();
        let shared = Arc::new(Mutex::new(on_change));
        let report = shared.clone();
        let mut on_change = move |change| (report.lock().unwrap_or_else(|p| p.into_inner()))(change);
        let (dir_for_events, config_for_events) = (plugins_dir.clone(), config.clone());
        let handler = move |result: DebounceEventResult| match result {
            Ok(events) => {
                let mut seen: Vec<Change> = Vec::new();
                for event in events.iter().filter(|e| counts(&e.kind)) {
                    for path in &event.paths {
                        // A Kubernetes ConfigMap / Secret volume swaps its `..data` symlink to
                        // update every file at once: re-read everything in that directory.
                        if path.file_name().is_some_and(|n| n == "..data") {
                            let dir = path.parent().map(Path::to_path_buf);
                            let changes = rescan(
                                dir.as_deref(),
                                dir_for_events.as_deref(),
                                config_for_events.as_deref(),
                                &candidates_for_events,
                            );
                            for change in changes {
                                seen.retain(|c| c != &change);
                                seen.push(change);
                            }
                            continue;
                        }
                        // What the path is (a candidate may also be a plugins directory file).
                        let changes = [
                            (config_for_events.as_deref() == Some(path.as_path()))
                                .then(|| Change::Config(path.clone())),
                            is_plugin_file(path, dir_for_events.as_deref()).then(|| Change::Plugin(path.clone())),
                            candidates_for_events
                                .iter()
                                .find(|(watched, _)| watched == path)
                                .map(|(_, given)| Change::Shadow(given.clone())),
                        ];
                        // Several events for one path in one batch: report it once, at its
                        // last position (its final state is what gets read).
                        for change in changes.into_iter().flatten() {
                            seen.retain(|c| c != &change);
                            seen.push(change);
                        }
                    }
                }
                seen.into_iter().for_each(&mut on_change);
            }
            Err(errors) => {
                for error in errors {
                    tracing::warn!(%error, "file watch error");
                }
            }
        };
        let mut debouncer = new_debouncer(debounce, Some(debounce / 4), handler)
            .map_err(|error| WatchError { path: PathBuf::new(), error })?;
        let mut dirs: Vec<PathBuf> = plugins_dir.iter().cloned().collect();
        let files = config.iter().chain(candidates.iter().map(|(watched, _)| watched));
        for parent in files.filter_map(|f| f.parent()) {
            if !dirs.iter().any(|d| d == parent) {
                dirs.push(parent.to_path_buf());
            }
        }
        for dir in dirs {
            debouncer
                .watch(&dir, RecursiveMode::NonRecursive)
                .map_err(|error| WatchError { path: dir.clone(), error })?;
        }
        let renames = plugins_dir.map(|dir| watch_renames(dir, shared)).transpose()?;
        Ok(Self { _debouncer: debouncer, _renames: renames })
    }
}

/// A second, undebounced watch on the plugins directory that reports each `*.wasm` file
/// renamed into it at once.
fn watch_renames<F: FnMut(Change) + Send + 'static>(
    dir: PathBuf,
    on_change: Arc<Mutex<F>>,
) -> Result<RecommendedWatcher, WatchError> {
    let plugins_dir = dir.clone();
    let handler = move |result: notify::Result<notify::Event>| {
        let Ok(event) = result else { return };
        // `To`: the new name, whether renamed within the directory or in from elsewhere (inotify
        // adds a `Both` for the former, which would report the file twice); `Any`: backends
        // that do not tell the two names apart.
        if !matches!(event.kind, EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Any))) {
            return;
        }
        if let Some(path) = event.paths.last()
            && is_plugin_file(path, Some(&plugins_dir))
        {
            (on_change.lock().unwrap_or_else(|p| p.into_inner()))(Change::Plugin(path.clone()));
        }
    };
    let error = |error| WatchError { path: dir.clone(), error };
    let mut watcher = notify::recommended_watcher(handler).map_err(error)?;
    watcher.watch(&dir, RecursiveMode::NonRecursive).map_err(error)?;
    Ok(watcher)
}

/// Whether `path` is a `*.wasm` file directly in `plugins_dir`.
fn is_plugin_file(path: &Path, plugins_dir: Option<&Path>) -> bool {
    plugins_dir.is_some() && plugins_dir == path.parent() && path.extension().is_some_and(|x| x == "wasm")
}

/// Every plugin file, the config file and the shadow candidates (watched, as given) in `dir`
/// (after a `..data` swap): the changes to re-read. Unchanged files are recognised by their
/// content digest downstream.
fn rescan(
    dir: Option<&Path>,
    plugins_dir: Option<&Path>,
    config: Option<&Path>,
    candidates: &[(PathBuf, PathBuf)],
) -> Vec<Change> {
    let mut changes = Vec::new();
    if dir.is_some()
        && dir == plugins_dir
        && let Ok(entries) = std::fs::read_dir(dir.expect("checked"))
    {
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
            .collect();
        files.sort();
        changes.extend(files.into_iter().map(Change::Plugin));
    }
    if let Some(config) = config
        && config.parent() == dir
    {
        changes.push(Change::Config(config.to_path_buf()));
    }
    for (watched, given) in candidates {
        if watched.parent() == dir {
            changes.push(Change::Shadow(given.clone()));
        }
    }
    changes
}

/// Whether an event kind can change a file's content or presence.
fn counts(kind: &EventKind) -> bool {
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) => true,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Modify(_) => true,
        EventKind::Access(_) | EventKind::Any | EventKind::Other => false,
    }
}

fn absolute(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    // Canonicalise the directory (symlinks such as /tmp → /private/tmp) but not the file,
    // which may not exist yet.
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => dir.canonicalize().map(|d| d.join(name)).unwrap_or(abs),
        _ => abs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn next(rx: &mpsc::Receiver<Change>) -> Change {
        rx.recv_timeout(Duration::from_secs(10)).expect("a change is reported")
    }

    #[test]
    fn reports_shadow_candidates_by_the_path_they_were_given() {
        let dir = tempfile::tempdir().unwrap();
        let candidates = dir.path().join("candidates");
        std::fs::create_dir(&candidates).unwrap();
        // Relative to the working directory would do too; the path as given is what comes back.
        let given = candidates.join("by-reason-v2.wasm");
        let (tx, rx) = mpsc::channel();
        let _watch =
            FileWatcher::start(None, None, std::slice::from_ref(&given), move |c| tx.send(c).unwrap()).unwrap();
        std::fs::write(candidates.join("other.wasm"), "x").unwrap(); // not a candidate
        std::fs::write(&given, "v2").unwrap();
        assert_eq!(next(&rx), Change::Shadow(given.clone()));
        std::fs::remove_file(&given).unwrap();
        assert_eq!(next(&rx), Change::Shadow(given));
        assert!(rx.recv_timeout(DEBOUNCE * 10).is_err(), "nothing else was reported");
    }

    #[test]
    fn reports_plugin_files_and_the_config_but_not_reads_or_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        let config = dir.path().join("eventpipe.toml");
        let (tx, rx) = mpsc::channel();
        let _watch = FileWatcher::start(Some(&plugins), Some(&config), &[], move |c| tx.send(c).unwrap()).unwrap();
        let plugins = plugins.canonicalize().unwrap();
        let config = dir.path().canonicalize().unwrap().join("eventpipe.toml");

        std::fs::write(plugins.join("notes.txt"), "x").unwrap();
        std::fs::write(plugins.join("a.wasm.tmp"), "x").unwrap();
        std::fs::rename(plugins.join("a.wasm.tmp"), plugins.join("a.wasm")).unwrap();
        // At once (the rename), then when the debounce ends.
        assert_eq!(next(&rx), Change::Plugin(plugins.join("a.wasm")));
        assert_eq!(next(&rx), Change::Plugin(plugins.join("a.wasm")));

        let _ = std::fs::read(plugins.join("a.wasm")).unwrap(); // a read is not a change
        std::fs::write(&config, "[defaults]\n").unwrap();
        assert_eq!(next(&rx), Change::Config(config.clone()));

        std::fs::remove_file(plugins.join("a.wasm")).unwrap();
        assert_eq!(next(&rx), Change::Plugin(plugins.join("a.wasm")));
        assert!(rx.recv_timeout(DEBOUNCE * 10).is_err(), "nothing else was reported");
    }

    #[test]
    fn a_rename_into_the_plugins_directory_is_reported_without_waiting_for_the_debounce() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().canonicalize().unwrap();
        let (tx, rx) = mpsc::channel();
        let debounce = Duration::from_secs(30);
        let _watch =
            FileWatcher::start_with(debounce, Some(&plugins), None, &[], move |c| tx.send(c).unwrap()).unwrap();
        // A write in place waits for the debounce…
        std::fs::write(plugins.join("slow.wasm"), "x").unwrap();
        // …a rename does not, whether within the directory or from elsewhere.
        std::fs::write(plugins.join(".a.wasm.tmp"), "x").unwrap();
        std::fs::rename(plugins.join(".a.wasm.tmp"), plugins.join("a.wasm")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("b.wasm"), "x").unwrap();
        std::fs::rename(outside.path().join("b.wasm"), plugins.join("b.wasm")).unwrap();
        // Renamed to a name that is not a plugin: nothing.
        std::fs::rename(plugins.join("a.wasm"), plugins.join("a.wasm.bak")).unwrap();
        let within = |rx: &mpsc::Receiver<Change>| rx.recv_timeout(debounce / 3).expect("reported before the debounce");
        assert_eq!(within(&rx), Change::Plugin(plugins.join("a.wasm")));
        assert_eq!(within(&rx), Change::Plugin(plugins.join("b.wasm")));
        assert!(rx.recv_timeout(Duration::from_millis(500)).is_err(), "nothing else before the debounce");
    }

    #[cfg(unix)]
    #[test]
    fn a_configmap_style_data_swap_rereads_every_file_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let data = root.join("..2026_11_21_v1");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("k.wasm"), "x").unwrap();
        std::fs::write(data.join("eventpipe.toml"), "").unwrap();
        std::os::unix::fs::symlink("..data/k.wasm", root.join("k.wasm")).unwrap();
        std::os::unix::fs::symlink("..data/eventpipe.toml", root.join("eventpipe.toml")).unwrap();
        let config = root.join("eventpipe.toml");
        let (tx, rx) = mpsc::channel();
        let _watch = FileWatcher::start(Some(&root), Some(&config), &[], move |c| tx.send(c).unwrap()).unwrap();
        // The atomic writer's last step: `..data` now points at the new version.
        std::os::unix::fs::symlink("..2026_11_21_v1", root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        let mut got = vec![next(&rx), next(&rx)];
        got.sort_by_key(|c| format!("{c:?}"));
        assert_eq!(got, [Change::Config(config.clone()), Change::Plugin(root.join("k.wasm"))]);
    }
}
