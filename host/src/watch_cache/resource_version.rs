//! Where a [`super::WatchCache`]'s resourceVersions start, so that they never go back across
//! restarts: an informer that resumes from a resourceVersion of an earlier process must find
//! it older than anything this process has (and get `410 Expired`, then list again), never
//! newer (it would wait on bookmarks with a stale store), as etcd's revisions, which outlive
//! any apiserver, guarantee for a cluster.
//!
//! Two floors, the larger wins ([`start_after`]):
//!
//! - **time**: [`time_floor`], the wall-clock time at start in microseconds since the Unix
//!   epoch (about 1.8 × 10¹⁵ in 2026: a decimal string of 16 digits, below 2⁵³ until the
//!   year 2255, so that clients parsing it as a JSON number stay exact). A process that started
//!   at `t0` and was replaced at `t1` issued `head = floor(t0) + changes`; the new floor is
//!   `floor(t0) + (t1 − t0) µs`, so the old head is overtaken only if the old process made more
//!   than one million changes per second on average over its whole life — far above what one
//!   cache sustains (each change takes the cache's lock);
//! - **high-water mark**: with at-least-once delivery, a sidecar file beside the state file
//!   ([`sidecar_path`]: `<state-file>.resource-version`) holds a ceiling the process never
//!   goes past without writing a higher one first ([`HighWaterMark`]): the start resumes above
//!   it even when the clock stepped back between the runs. The ceiling is reserved
//!   [`RESERVE`] changes ahead, so the file is written once at start and then once per
//!   [`RESERVE`] changes, not per change.
//!
//! The sidecar is this module's alone: the state file's format is not touched.

use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

/// How many resourceVersions one write of the sidecar reserves ahead of the head.
pub const RESERVE: u64 = 1 << 20;

/// The resourceVersion floor of a process starting at `now`: microseconds since the Unix
/// epoch (0 before it).
pub fn time_floor(now: DateTime<Utc>) -> u64 {
    u64::try_from(now.timestamp_micros()).unwrap_or(0)
}

/// The high-water mark's file beside `state_file`: `<state-file>.resource-version`.
pub fn sidecar_path(state_file: &Path) -> PathBuf {
    let mut name = state_file.as_os_str().to_owned();
    name.push(".resource-version");
    PathBuf::from(name)
}

/// Where a cache starting at `now` continues from: the newest resourceVersion it counts as
/// issued (its first change gets the next one) — the larger of [`time_floor`] and the
/// high-water mark `saved` (a ceiling of an earlier process).
pub fn start_after(now: DateTime<Utc>, saved: Option<u64>) -> u64 {
    time_floor(now).max(saved.unwrap_or(0))
}

/// The high-water mark file: one decimal resourceVersion (and a newline), a ceiling every
/// resourceVersion issued so far is at or below. Written durably (a temporary file beside it,
/// fsync, rename, fsync of the directory), so that after a crash it holds the old ceiling or
/// the new one, never a torn one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HighWaterMark {
    path: PathBuf,
}

impl HighWaterMark {
    /// The mark kept in `path` (see [`sidecar_path`]).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ceiling saved, `None` when there is no file yet.
    ///
    /// # Errors
    /// The file cannot be read, or does not hold a decimal number (the caller decides; a run
    /// warns and starts from the time floor).
    pub fn load(&self) -> std::io::Result<Option<u64>> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => text.trim().parse().map(Some).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: not a resourceVersion ({e}): {:?}", self.path.display(), text.trim()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Saves `ceiling` durably (see the type's docs), creating the directory when missing.
    ///
    /// # Errors
    /// Any I/O error; the previous file, if any, is then left as it was.
    pub fn store(&self, ceiling: u64) -> std::io::Result<()> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir)?;
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let written = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(format!("{ceiling}\n").as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        // The rename is durable once the directory is (not possible on every platform).
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_floor_is_microseconds_and_the_larger_floor_wins() {
        let now = DateTime::from_timestamp(1_800_000_000, 123_456_000).unwrap();
        assert_eq!(time_floor(now), 1_800_000_000_123_456);
        assert!(time_floor(now) < 1 << 53, "exact as a JSON number");
        assert_eq!(start_after(now, None), 1_800_000_000_123_456);
        assert_eq!(start_after(now, Some(5)), 1_800_000_000_123_456);
        assert_eq!(start_after(now, Some(1 << 60)), 1 << 60, "a clock stepped back: the saved mark");
    }

    #[test]
    fn the_mark_round_trips_and_refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("sub/state.json");
        let mark = HighWaterMark::new(sidecar_path(&state));
        assert_eq!(mark.path(), dir.path().join("sub/state.json.resource-version"));
        assert_eq!(mark.load().unwrap(), None);
        mark.store(42).unwrap();
        assert_eq!(mark.load().unwrap(), Some(42));
        mark.store(1 << 52).unwrap();
        assert_eq!(mark.load().unwrap(), Some(1 << 52));
        let leftovers: Vec<_> =
            std::fs::read_dir(dir.path().join("sub")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");
        std::fs::write(mark.path(), "twelve").unwrap();
        assert!(mark.load().unwrap_err().to_string().contains("not a resourceVersion"));
    }
}
