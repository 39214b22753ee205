//! Pinned plugins: the SHA-256 digest a plugin's component bytes must have to be loaded under
//! its name, written `sha256:<64 hex digits>` as OCI content digests are (the OCI image spec's
//! `algorithm:encoded` form). A pin comes from the `digest` key of the plugin's
//! `[plugins.NAME]` table or from `run --plugin-digest NAME=sha256:…`; the registry refuses any
//! version of a pinned name whose bytes have another digest, at start and on hot reload.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// The key of a `[plugins.NAME]` table read by the host rather than the plugin: the plugin's
/// pin, a [`Sha256Digest`] (`"sha256:<hex>"`).
pub const DIGEST_KEY: &str = "digest";

/// The key of a `[plugins.NAME]` table read by the host rather than the plugin: an OCI
/// reference (`oci://HOST[:PORT]/REPO[:TAG]@sha256:…`) the plugin is pulled from at start.
pub const SOURCE_KEY: &str = "source";

/// A SHA-256 content digest, as OCI writes it: `sha256:` and 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sha256Digest(String);

impl Sha256Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        let hash = Sha256::digest(bytes);
        let mut hex = String::with_capacity(64);
        for byte in hash {
            use fmt::Write;
            let _ = write!(hex, "{byte:02x}");
        }
        Self(hex)
    }

    /// The 64 hex digits, without the `sha256:` prefix (the name of a content-addressed file).
    pub fn hex(&self) -> &str {
        &self.0
    }

    /// The short form logs and listings name a component by: `sha256:` and the first 12 hex
    /// digits (as `docker images` shortens image ids).
    pub fn short(&self) -> String {
        format!("sha256:{}", &self.0[..12])
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

impl FromStr for Sha256Digest {
    type Err = PinError;

    /// `sha256:` and 64 hex digits (either case; kept lowercase).
    fn from_str(s: &str) -> Result<Self, PinError> {
        let malformed = || PinError::Malformed(s.to_string());
        let hex = s.strip_prefix("sha256:").ok_or_else(malformed)?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(malformed());
        }
        Ok(Self(hex.to_ascii_lowercase()))
    }
}

/// A pin that is malformed or that a plugin does not match.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    /// Not `sha256:` and 64 hex digits.
    #[error("expected `sha256:` and 64 hex digits, got `{0}`")]
    Malformed(String),
    /// The plugin's bytes have another digest than its pin.
    #[error("plugin `{name}` from {from} refused: pinned to {pinned}, but its bytes are {actual}")]
    Mismatch {
        /// Plugin name.
        name: String,
        /// Where the refused bytes came from (a file, or the embedded default).
        from: String,
        /// The digest it is pinned to.
        pinned: Sha256Digest,
        /// The digest of its bytes.
        actual: Sha256Digest,
    },
    /// A pinned name that no plugin has (neither embedded nor in the plugins directory).
    #[error("plugin `{0}` is pinned, but there is no plugin of that name")]
    Missing(String),
}

impl PinError {
    /// The plugin name the error is about (the malformed text for [`PinError::Malformed`]).
    pub fn name(&self) -> &str {
        match self {
            PinError::Malformed(text) => text,
            PinError::Mismatch { name, .. } | PinError::Missing(name) => name,
        }
    }
}

/// `NAME=sha256:<hex>`, as `--plugin-digest` takes it.
///
/// # Errors
/// One line: no `=`, an empty name, or a malformed digest.
pub fn parse_pin_flag(s: &str) -> Result<(String, Sha256Digest), String> {
    let (name, digest) = s.split_once('=').ok_or_else(|| format!("expected NAME=sha256:<hex>, got `{s}`"))?;
    if name.is_empty() {
        return Err(format!("expected NAME=sha256:<hex>, got `{s}`"));
    }
    Ok((name.to_string(), digest.parse().map_err(|e: PinError| e.to_string())?))
}

/// The digest of every plugin file of the plugins directory `dir` (`NAME.wasm`, regular files
/// only, after following symlinks), by plugin name: what `eventpipe plugins lock` pins.
///
/// # Errors
/// The I/O error of listing `dir` or reading one of its plugin files.
pub fn digests_of_dir(dir: &std::path::Path) -> std::io::Result<std::collections::BTreeMap<String, Sha256Digest>> {
    let mut digests = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = super::file::plugin_name(&path) else { continue };
        // Not a FIFO, device or socket: those would block or never end.
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            continue;
        }
        digests.insert(name, Sha256Digest::of(&std::fs::read(&path)?));
    }
    Ok(digests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_in_oci_form() {
        // The SHA-256 of "abc" (FIPS 180-2, appendix B.1).
        let abc = Sha256Digest::of(b"abc");
        assert_eq!(abc.to_string(), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(abc.to_string().to_uppercase().replace("SHA256", "sha256").parse::<Sha256Digest>(), Ok(abc));
        for bad in ["ba7816bf", "sha256:ba78", "sha512:00", &format!("sha256:{}", "g".repeat(64))] {
            assert_eq!(bad.parse::<Sha256Digest>(), Err(PinError::Malformed(bad.into())));
        }
        assert_eq!(parse_pin_flag(&format!("p={}", Sha256Digest::of(b""))).unwrap().0, "p");
        assert!(parse_pin_flag("p").is_err() && parse_pin_flag("=sha256:00").is_err());
    }
}
