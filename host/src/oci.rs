//! Plugins in an OCI registry: pushed and pulled as the Wasm OCI artifact of the CNCF TAG
//! Runtime Wasm working group, the layout wasm-pkg-tools (`wkg`) and Spin use: an image manifest
//! (`application/vnd.oci.image.manifest.v1+json`) whose config is
//! `application/vnd.wasm.config.v0+json` (`{created, architecture: "wasm", os: "wasip2",
//! layerDigests, component: {imports, exports}}`) and whose one layer is the component
//! (`application/wasm`). Talks to the registry through `oci-client` (the OCI distribution API).
//!
//! References are written `oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]`; the digest is the
//! manifest's. Credentials come from the docker `config.json` (`$DOCKER_CONFIG/config.json`,
//! else `~/.docker/config.json`: `auths.HOST.auth`, base64 `user:password`), else anonymous.
//! TLS is the default; plain HTTP only for a loopback registry (`localhost`, `127.0.0.0/8`,
//! `::1`) or when asked ([`OciOptions::insecure`]); a TLS handshake that fails as against a
//! plain-HTTP server fails with a hint to ask ([`OciError::Registry`]).
//!
//! Every pull is verified: the manifest against the reference's digest, the layer against the
//! manifest's digest and size. [`pull_cached`] keeps what it pulled in a content-addressed cache
//! (`DIR/blobs/sha256/HEX`, as an OCI image layout) and reads it from there next time, verified
//! again.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use crate::plugin::pin::Sha256Digest;

/// The manifest's media type (the OCI image manifest).
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config's media type in the Wasm OCI artifact.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The one layer's media type: the component.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// Largest manifest read from a registry or the cache, bytes.
const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// An `oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciReference {
    reference: Reference,
    digest: Option<Sha256Digest>,
}

impl OciReference {
    /// The registry, `HOST[:PORT]`.
    pub fn registry(&self) -> &str {
        self.reference.registry()
    }

    /// The manifest digest the reference is pinned to, if any.
    pub fn digest(&self) -> Option<&Sha256Digest> {
        self.digest.as_ref()
    }

    /// The last segment of the repository: the plugin name a pull writes by default.
    pub fn name(&self) -> &str {
        self.reference.repository().rsplit('/').next().unwrap_or_default()
    }

    /// The same repository and tag, pinned to `digest`.
    pub fn with_digest(&self, digest: Sha256Digest) -> Self {
        let (registry, repository) = (self.reference.registry().into(), self.reference.repository().into());
        let reference = match self.reference.tag() {
            Some(tag) => Reference::with_tag_and_digest(registry, repository, tag.into(), digest.to_string()),
            None => Reference::with_digest(registry, repository, digest.to_string()),
        };
        Self { reference, digest: Some(digest) }
    }
}

impl fmt::Display for OciReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.reference.registry(), self.reference.repository())?;
        if let Some(tag) = self.reference.tag() {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl FromStr for OciReference {
    type Err = OciError;

    /// `oci://` and a registry reference with an explicit registry host (no Docker Hub default).
    fn from_str(s: &str) -> Result<Self, OciError> {
        // Shown redacted: a reference may carry credentials (`oci://USER:PASSWORD@HOST/…`).
        let bad = |why: &str| OciError::Reference {
            reference: crate::redact::RedactedUrl::new(s).to_string(),
            reason: why.to_string(),
        };
        let rest = s.strip_prefix("oci://").ok_or_else(|| bad("expected oci://HOST[:PORT]/REPO[:TAG][@sha256:…]"))?;
        let (host, path) = rest.split_once('/').ok_or_else(|| bad("expected a repository after the host"))?;
        if host.is_empty() || path.is_empty() {
            return Err(bad("expected oci://HOST[:PORT]/REPO[:TAG][@sha256:…]"));
        }
        let reference: Reference = rest.parse().map_err(|e| bad(&format!("{e}")))?;
        if reference.registry() != host {
            return Err(bad("expected a registry host before the repository"));
        }
        let digest = match reference.digest() {
            Some(d) => Some(d.parse::<Sha256Digest>().map_err(|e| bad(&e.to_string()))?),
            None => None,
        };
        let reference = match (&digest, reference.tag()) {
            (_, Some(_)) | (Some(_), None) => reference,
            (None, None) => Reference::with_tag(host.to_string(), reference.repository().to_string(), "latest".into()),
        };
        Ok(Self { reference, digest })
    }
}

/// References on the command line are parsed without clap's "invalid value '…'" message, which
/// would show the value as given, credentials included ([`crate::redact::RedactingParser`]).
impl clap::builder::ValueParserFactory for OciReference {
    type Parser = crate::redact::RedactingParser<OciReference>;
    fn value_parser() -> Self::Parser {
        crate::redact::RedactingParser::new()
    }
}

/// How to reach registries.
#[derive(Debug, Clone, Default)]
pub struct OciOptions {
    /// Plain HTTP for every registry, not only loopback ones.
    pub insecure: bool,
    /// The docker `config.json` to read credentials from [default: `$DOCKER_CONFIG/config.json`,
    /// else `~/.docker/config.json`].
    pub docker_config: Option<PathBuf>,
}

/// What went wrong with a registry, a reference or the cache.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// Not an `oci://` reference.
    #[error("`{reference}`: {reason}")]
    Reference {
        /// The text given.
        reference: String,
        /// Why it is refused.
        reason: String,
    },
    /// The registry refused or could not be reached.
    #[error("{reference}: {reason}")]
    Registry {
        /// The reference (`oci://…`).
        reference: String,
        /// oci-client's error and its causes, `: `-separated; then, when a TLS handshake failed
        /// as against a plain-HTTP server, `; ` and a hint of `--insecure`.
        reason: String,
    },
    /// The content is not what its digest says, or not a Wasm OCI artifact.
    #[error("{reference}: {reason}")]
    Content {
        /// The reference (`oci://…`).
        reference: String,
        /// What does not match.
        reason: String,
    },
    /// The docker config or the cache could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A pulled component.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The reference, pinned to the manifest's digest.
    pub reference: OciReference,
    /// The component's bytes (the layer).
    pub bytes: Vec<u8>,
    /// Their digest (the layer's).
    pub layer: Sha256Digest,
}

/// Pushes `component` (its top-level `imports` and `exports` named in the config) to
/// `reference` as a Wasm OCI artifact; returns the reference pinned to the manifest's digest.
///
/// # Errors
/// [`OciError::Registry`] when the registry refuses or cannot be reached; [`OciError::Io`] for
/// an unreadable docker config.
pub async fn push(
    reference: &OciReference,
    component: &[u8],
    imports: Vec<String>,
    exports: Vec<String>,
    options: &OciOptions,
) -> Result<OciReference, OciError> {
    let layer = Sha256Digest::of(component);
    let config = serde_json::to_vec(&serde_json::json!({
        "created": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer.to_string()],
        "component": { "exports": exports, "imports": imports },
    }))
    .expect("JSON values serialize");
    let descriptor = |media_type: &str, bytes: &[u8], digest: &Sha256Digest| OciDescriptor {
        media_type: media_type.into(),
        digest: digest.to_string(),
        size: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
        ..OciDescriptor::default()
    };
    let config_digest = Sha256Digest::of(&config);
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.into()),
        config: descriptor(CONFIG_MEDIA_TYPE, &config, &config_digest),
        layers: vec![descriptor(LAYER_MEDIA_TYPE, component, &layer)],
        ..OciImageManifest::default()
    };
    let manifest = serde_json::to_vec(&manifest).expect("a manifest serializes");
    let (client, auth) = client(reference, options)?;
    let failed = |e| registry_error(reference, options, e);
    client.auth(&reference.reference, &auth, RegistryOperation::Push).await.map_err(failed)?;
    client.push_blob(&reference.reference, config, &config_digest.to_string()).await.map_err(failed)?;
    client.push_blob(&reference.reference, component.to_vec(), &layer.to_string()).await.map_err(failed)?;
    let digest = Sha256Digest::of(&manifest);
    let content_type = http::HeaderValue::from_static(MANIFEST_MEDIA_TYPE);
    client.push_manifest_raw(&reference.reference, manifest, content_type).await.map_err(failed)?;
    Ok(reference.with_digest(digest))
}

/// Pulls the component at `reference`, verified: the manifest against the reference's digest
/// (when it has one), a Wasm OCI artifact (its config media type, exactly one `application/wasm`
/// layer), the layer against the manifest's digest and size.
///
/// # Errors
/// [`OciError::Registry`] when the registry refuses or cannot be reached; [`OciError::Content`]
/// when what it serves does not verify.
pub async fn pull(reference: &OciReference, options: &OciOptions) -> Result<Pulled, OciError> {
    fetch(reference, options).await.map(|(pulled, _)| pulled)
}

/// As [`pull`] for a reference pinned to a manifest digest, through the cache `dir`: the
/// manifest and the layer are read from `dir/blobs/sha256/HEX` when there (and verified
/// again), else pulled and written there (each through a temporary file and a rename).
///
/// # Errors
/// As [`pull`]; [`OciError::Reference`] for a reference without a digest; [`OciError::Io`] when
/// the cache cannot be written.
pub async fn pull_cached(reference: &OciReference, dir: &Path, options: &OciOptions) -> Result<Pulled, OciError> {
    let Some(digest) = reference.digest().cloned() else {
        return Err(OciError::Reference {
            reference: reference.to_string(),
            reason: "a cached pull needs the manifest's digest (…@sha256:HEX)".into(),
        });
    };
    let blob = |d: &Sha256Digest| dir.join("blobs").join("sha256").join(d.hex());
    let cached = |d: &Sha256Digest| std::fs::read(blob(d)).ok().filter(|b| Sha256Digest::of(b) == *d);
    if let Some(manifest) = cached(&digest)
        && let Ok((_, layer)) = verify_manifest(reference, &manifest)
        && let Some(bytes) = layer.digest.parse::<Sha256Digest>().ok().and_then(|d| cached(&d))
        && let Ok(layer) = verify_layer(reference, &layer, &bytes)
    {
        return Ok(Pulled { reference: reference.clone(), bytes, layer });
    }
    let (pulled, manifest) = fetch(reference, options).await?;
    write_atomically(&blob(&digest), &manifest)?;
    write_atomically(&blob(&pulled.layer), &pulled.bytes)?;
    Ok(pulled)
}

/// [`pull`], and the manifest's bytes.
async fn fetch(reference: &OciReference, options: &OciOptions) -> Result<(Pulled, Vec<u8>), OciError> {
    let (client, auth) = client(reference, options)?;
    let failed = |e| registry_error(reference, options, e);
    client.auth(&reference.reference, &auth, RegistryOperation::Pull).await.map_err(failed)?;
    let (manifest, _) =
        client.pull_manifest_raw(&reference.reference, &auth, &[MANIFEST_MEDIA_TYPE]).await.map_err(failed)?;
    let (digest, layer) = verify_manifest(reference, &manifest)?;
    let mut bytes = Vec::new();
    client.pull_blob(&reference.reference, &layer, &mut bytes).await.map_err(failed)?;
    let layer = verify_layer(reference, &layer, &bytes)?;
    Ok((Pulled { reference: reference.with_digest(digest), bytes, layer }, manifest.to_vec()))
}

/// Writes `bytes` to `path` through a temporary file beside it and a rename (so a reader never
/// sees half a file), creating its directory.
///
/// # Errors
/// [`OciError::Io`] naming the file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), OciError> {
    let io = |source| OciError::Io { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// The manifest's digest and its one layer, after checking the manifest against the
/// reference's digest and the Wasm OCI artifact's layout.
fn verify_manifest(reference: &OciReference, manifest: &[u8]) -> Result<(Sha256Digest, OciDescriptor), OciError> {
    let bad = |reason: String| OciError::Content { reference: reference.to_string(), reason };
    if manifest.len() > MAX_MANIFEST_BYTES {
        return Err(bad(format!("a manifest of {} bytes (at most {MAX_MANIFEST_BYTES})", manifest.len())));
    }
    let digest = Sha256Digest::of(manifest);
    if let Some(wanted) = reference.digest()
        && *wanted != digest
    {
        return Err(bad(format!("the manifest is {digest}, not {wanted}")));
    }
    let parsed: OciImageManifest =
        serde_json::from_slice(manifest).map_err(|e| bad(format!("not an OCI image manifest: {e}")))?;
    if parsed.config.media_type != CONFIG_MEDIA_TYPE {
        return Err(bad(format!(
            "not a Wasm artifact: its config is `{}`, not `{CONFIG_MEDIA_TYPE}`",
            parsed.config.media_type
        )));
    }
    match &parsed.layers[..] {
        [layer] if layer.media_type == LAYER_MEDIA_TYPE => Ok((digest, layer.clone())),
        layers => Err(bad(format!(
            "not a Wasm artifact: expected one `{LAYER_MEDIA_TYPE}` layer, got [{}]",
            layers.iter().map(|l| l.media_type.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The layer's digest, after checking `bytes` against it and its size.
fn verify_layer(reference: &OciReference, layer: &OciDescriptor, bytes: &[u8]) -> Result<Sha256Digest, OciError> {
    let bad = |reason: String| OciError::Content { reference: reference.to_string(), reason };
    let wanted: Sha256Digest = layer.digest.parse().map_err(|e: crate::plugin::pin::PinError| bad(e.to_string()))?;
    let actual = Sha256Digest::of(bytes);
    if actual != wanted || i64::try_from(bytes.len()).ok() != Some(layer.size) {
        return Err(bad(format!("the layer is {actual} ({} bytes), not {wanted} ({} bytes)", bytes.len(), layer.size)));
    }
    Ok(actual)
}

/// A client for `reference`'s registry (HTTPS, or HTTP for loopback or when insecure; TLS
/// through rustls with the ring provider) and the credentials for it.
fn client(reference: &OciReference, options: &OciOptions) -> Result<(Client, RegistryAuth), OciError> {
    // reqwest (without a provider of its own) takes the process's: ring, as the rest of the host.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let registry = reference.registry();
    let protocol = if options.insecure {
        ClientProtocol::Http
    } else if is_loopback(registry) {
        ClientProtocol::HttpsExcept(vec![registry.to_string()])
    } else {
        ClientProtocol::Https
    };
    let client = Client::new(ClientConfig { protocol, ..ClientConfig::default() });
    Ok((client, credentials(registry, options.docker_config.as_deref())?))
}

/// The [`OciError::Registry`] for oci-client's `error`: its text and, after `: `, each cause's
/// ([`std::error::Error::source`]) whose text it does not hold already, so a TLS or connection
/// failure shows under reqwest's `error sending request`. A URL in reqwest's text is shown
/// without user information, query or fragment. When an HTTPS connection failed in its TLS
/// handshake as against a plain-HTTP server ([`refused_handshake`]), a hint follows: plain HTTP
/// is only used unasked for a loopback registry, `--insecure` (`--oci-insecure` on `run`,
/// `validate` and `config show`) uses it for any registry.
fn registry_error(reference: &OciReference, options: &OciOptions, error: OciDistributionError) -> OciError {
    let mut reason = error.to_string();
    let mut plain_http = false;
    if let OciDistributionError::RequestError(e) = &error {
        if let Some(url) = e.url() {
            let mut shown = url.clone();
            let _ = shown.set_username("");
            let _ = shown.set_password(None);
            shown.set_query(None);
            shown.set_fragment(None);
            reason = reason.replace(url.as_str(), shown.as_str());
        }
        plain_http = !options.insecure && !is_loopback(reference.registry()) && e.is_connect() && refused_handshake(e);
    }
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() && !reason.contains(&text) {
            reason.push_str(": ");
            reason.push_str(&text);
        }
        source = cause.source();
    }
    if plain_http {
        reason.push_str(
            "; the registry may serve plain HTTP, which is only used unasked for a loopback registry \
             (`localhost`, `127.0.0.0/8`, `::1`): give `--insecure` (`--oci-insecure` on `run`, `validate` \
             and `config show`) for plain HTTP to any registry",
        );
    }
    OciError::Registry { reference: reference.to_string(), reason }
}

/// Whether `error`'s causes show a TLS handshake that a plain-HTTP server would fail: rustls
/// read a message that is not TLS (an HTTP answer), or the server hung up on the client hello
/// (end of file, connection reset or aborted).
fn refused_handshake(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(cause) = source {
        if matches!(cause.downcast_ref::<rustls::Error>(), Some(rustls::Error::InvalidMessage(_))) {
            return true;
        }
        source = cause.source();
        // An I/O error's `source` is its inner error's; the inner error itself is `get_ref`.
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, UnexpectedEof};
            if matches!(io.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted) {
                return true;
            }
            source = io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static));
        }
    }
    false
}

/// Whether `registry` (`HOST[:PORT]`) is a loopback host.
fn is_loopback(registry: &str) -> bool {
    let host = match registry.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => registry.rsplit_once(':').map_or(registry, |(h, _)| h),
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The credentials for `registry` from the docker config (`file`, else the usual places):
/// `auths.REGISTRY.auth` (base64 `user:password`), also under an `https://` or `http://` key.
fn credentials(registry: &str, file: Option<&Path>) -> Result<RegistryAuth, OciError> {
    let file = match file {
        Some(file) => Some(file.to_path_buf()),
        None => std::env::var_os("DOCKER_CONFIG")
            .map(|dir| PathBuf::from(dir).join("config.json"))
            .or_else(|| std::env::home_dir().map(|home| home.join(".docker").join("config.json"))),
    };
    let Some(file) = file else { return Ok(RegistryAuth::Anonymous) };
    let text = match std::fs::read(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RegistryAuth::Anonymous),
        Err(source) => return Err(OciError::Io { path: file, source }),
    };
    let invalid = |why: &str| OciError::Io {
        path: file.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string()),
    };
    let config: serde_json::Value = serde_json::from_slice(&text).map_err(|_| invalid("not a JSON docker config"))?;
    let auths = &config["auths"];
    let entry = [registry.to_string(), format!("https://{registry}"), format!("http://{registry}")]
        .iter()
        .find_map(|key| auths.get(key).or_else(|| auths.get(format!("{key}/").as_str())))
        .and_then(|entry| entry["auth"].as_str());
    let Some(auth) = entry else { return Ok(RegistryAuth::Anonymous) };
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .ok()
        .and_then(|d| String::from_utf8(d).ok())
        .ok_or_else(|| invalid(&format!("auths.{registry}.auth is not base64 user:password")))?;
    let (user, password) = decoded
        .split_once(':')
        .ok_or_else(|| invalid(&format!("auths.{registry}.auth is not base64 user:password")))?;
    Ok(RegistryAuth::Basic(user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_oci_urls_with_a_registry_host() {
        let digest = Sha256Digest::of(b"m");
        let r: OciReference = format!("oci://127.0.0.1:5000/team/by-reason:v1@{digest}").parse().unwrap();
        assert_eq!((r.registry(), r.name(), r.digest()), ("127.0.0.1:5000", "by-reason", Some(&digest)));
        assert_eq!(r.to_string(), format!("oci://127.0.0.1:5000/team/by-reason:v1@{digest}"));
        let r: OciReference = "oci://ghcr.io/x/p".parse().unwrap();
        assert_eq!(r.to_string(), "oci://ghcr.io/x/p:latest");
        for bad in ["ghcr.io/x/p:v1", "oci://ghcr.io", "oci:///p", "oci://ghcr.io/x/p@sha256:00"] {
            assert!(bad.parse::<OciReference>().is_err(), "{bad}");
        }
    }

    #[test]
    fn plain_http_is_for_loopback_registries_only() {
        for host in ["127.0.0.1:5000", "localhost", "localhost:5000", "[::1]:5000", "127.3.2.1"] {
            assert!(is_loopback(host), "{host}");
        }
        for host in ["ghcr.io", "10.0.0.1:5000", "localhost.example.com", "[2001:db8::1]:443"] {
            assert!(!is_loopback(host), "{host}");
        }
    }

    #[test]
    fn credentials_come_from_the_docker_config() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        // "alice:s3cret:x" in base64: the password may hold a colon.
        std::fs::write(&file, r#"{"auths":{"reg.example:5000":{"auth":"YWxpY2U6czNjcmV0Ong="},"https://other.example":{"auth":"Ym9iOnB3"}}}"#).unwrap();
        let basic = |u: &str, p: &str| RegistryAuth::Basic(u.into(), p.into());
        assert_eq!(credentials("reg.example:5000", Some(&file)).unwrap(), basic("alice", "s3cret:x"));
        assert_eq!(credentials("other.example", Some(&file)).unwrap(), basic("bob", "pw"));
        assert_eq!(credentials("third.example", Some(&file)).unwrap(), RegistryAuth::Anonymous);
        assert_eq!(credentials("x", Some(&dir.path().join("none.json"))).unwrap(), RegistryAuth::Anonymous);
        std::fs::write(&file, r#"{"auths":{"x":{"auth":"bm8tY29sb24="}}}"#).unwrap();
        assert!(credentials("x", Some(&file)).is_err(), "no user:password");
    }
}
