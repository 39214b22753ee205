//! Reading a plugin file: regular files only, never blocking, never more than a size cap.
//!
//! Anyone who can write the plugins directory can drop in something that is not a component
//! file: a symlink to `/dev/zero` (reading it never ends and fills memory), a FIFO (opening it
//! blocks until a writer comes, which stopped the reload thread for good), a socket or a
//! device. [`read_plugin_file`] resolves symlinks and stats the target, opens it with
//! `O_NONBLOCK` (so a FIFO swapped in between the two steps cannot block the open), checks the
//! opened file again with `fstat` (`File::metadata` on the handle) — a file over the cap is
//! refused there, before any of it is read — then reads at most the cap plus one byte
//! (`Read::take`) into a buffer of the size stat'ed, so a file growing while it is read cannot
//! grow memory either.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The default of `--max-plugin-bytes`: 64 MiB. Python and JavaScript components are
/// 12-18 MB; the embedded Rust ones under 1 MB.
pub const DEFAULT_MAX_PLUGIN_BYTES: u64 = 64 << 20;

/// Why a plugin file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The path (after resolving symlinks) is a FIFO, a device, a socket or a directory.
    #[error("{} is {kind}, not a regular file: only regular files are read", resolved.display())]
    NotRegular {
        /// Where the path leads once symlinks are resolved.
        resolved: PathBuf,
        /// What it is (`"a FIFO"`, `"a character device"`, …).
        kind: &'static str,
        /// The file's identity (device and inode), to tell the same special file seen again.
        identity: (u64, u64),
    },
    /// The file holds more than the cap (as `fstat` says, or found while reading).
    #[error("larger than the limit of {max_bytes} bytes (--max-plugin-bytes)")]
    TooLarge {
        /// The cap, bytes.
        max_bytes: u64,
        /// The file's identity (device and inode) and size (bytes) when refused, to tell the
        /// same file seen again.
        identity: (u64, u64, u64),
    },
    /// Opening, stat'ing or reading failed (`NotFound` when the file is gone).
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
}

impl ReadError {
    /// Whether the file does not exist (removed, or a dangling symlink).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The bytes of the regular file `path` (symlinks followed), at most `max_bytes` of them.
///
/// # Errors
/// [`ReadError::NotRegular`] for a FIFO, device, socket or directory (checked on the path and
/// again on the opened file, without blocking); [`ReadError::TooLarge`] when the file holds more
/// than `max_bytes` (from `fstat`, before reading; or found while reading a file that grew: at
/// most `max_bytes + 1` bytes are read);
/// [`ReadError::Io`] when the file cannot be opened or read.
pub fn read_plugin_file(path: &Path, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
    let resolved = std::fs::canonicalize(path)?;
    // A socket cannot be opened at all, a FIFO would block without O_NONBLOCK: look first.
    check_regular(&resolved, &std::fs::metadata(&resolved)?)?;
    let file = open_nonblocking(&resolved)?;
    // What was opened is what counts (the path may have been replaced meanwhile).
    let metadata = file.metadata()?;
    check_regular(&resolved, &metadata)?;
    let too_large = || {
        let (dev, ino) = identity(&metadata);
        ReadError::TooLarge { max_bytes, identity: (dev, ino, metadata.len()) }
    };
    if metadata.len() > max_bytes {
        return Err(too_large());
    }
    // One byte more than stat'ed: reading to the end then needs no second, doubled buffer.
    let mut bytes = Vec::with_capacity(metadata.len() as usize + 1);
    file.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).open(path)
}

fn check_regular(resolved: &Path, metadata: &Metadata) -> Result<(), ReadError> {
    let kind = kind_of(metadata);
    if kind == "a regular file" {
        return Ok(());
    }
    Err(ReadError::NotRegular { resolved: resolved.to_path_buf(), kind, identity: identity(metadata) })
}

#[cfg(unix)]
fn kind_of(metadata: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = metadata.file_type();
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn kind_of(metadata: &Metadata) -> &'static str {
    if metadata.is_file() {
        "a regular file"
    } else if metadata.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

#[cfg(unix)]
fn identity(metadata: &Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (metadata.dev(), metadata.ino())
}

#[cfg(not(unix))]
fn identity(_: &Metadata) -> (u64, u64) {
    (0, 0)
}

/// `NAME` for a `NAME.wasm` path; `None` for other files (and for hidden / temporary names
/// such as `.NAME.wasm.tmp`).
pub fn plugin_name(path: &Path) -> Option<String> {
    if path.extension()? != "wasm" {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    (!stem.is_empty() && !stem.starts_with('.')).then(|| stem.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #59: a file over the cap is refused from its size, before it is read: a sparse
    /// file of 1 TiB is refused at once (reading its first 64 MiB used to cost twice that).
    #[test]
    fn a_file_over_the_cap_is_refused_from_its_size_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.wasm");
        std::fs::File::create(&path).unwrap().set_len(1 << 40).unwrap();
        let started = std::time::Instant::now();
        let err = read_plugin_file(&path, DEFAULT_MAX_PLUGIN_BYTES).unwrap_err();
        assert!(matches!(err, ReadError::TooLarge { identity: (_, _, len), .. } if len == 1 << 40), "{err}");
        assert!(
            started.elapsed() < std::time::Duration::from_millis(20),
            "read before refusing: {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn regular_files_are_read_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.wasm");
        std::fs::write(&path, [7u8; 100]).unwrap();
        assert_eq!(read_plugin_file(&path, 100).unwrap().len(), 100);
        assert!(matches!(read_plugin_file(&path, 99), Err(ReadError::TooLarge { max_bytes: 99, .. })));
        let link = dir.path().join("link.wasm");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(read_plugin_file(&link, 1000).unwrap(), vec![7u8; 100], "a symlink to a file is followed");
        assert!(read_plugin_file(&dir.path().join("gone.wasm"), 10).unwrap_err().is_not_found());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn devices_fifos_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero.wasm");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let err = read_plugin_file(&zero, u64::MAX).unwrap_err();
        assert!(err.to_string().contains("/dev/zero is a character device, not a regular file"), "{err}");
        let fifo = dir.path().join("fifo.wasm");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        // No writer: a blocking open would never return.
        let err = read_plugin_file(&fifo, 10).unwrap_err();
        assert!(matches!(err, ReadError::NotRegular { kind: "a FIFO", .. }), "{err}");
        let err = read_plugin_file(dir.path(), 10).unwrap_err();
        assert!(matches!(err, ReadError::NotRegular { kind: "a directory", .. }), "{err}");
    }
}
