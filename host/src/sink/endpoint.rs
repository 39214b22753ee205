//! Where a batching HTTP sink's requests go and how they authenticate, for the sinks built on the
//! webhook's delivery ([`super::webhook`]): the URL with the API's default path, credentials
//! from the environment or files (never from the command line: a `--sink` value shows up in
//! `ps`, logs and `config show`), and TLS roots from a CA file.
//!
//! A credential `NAME` is read from the variable `NAME`, else from the file the variable
//! `NAME_FILE` names (a mounted Kubernetes Secret), its one trailing newline cut — as the
//! Docker images of Grafana and Elasticsearch read `*_FILE` variables.

use std::path::{Path, PathBuf};

use hyper::header::{AUTHORIZATION, HeaderName, HeaderValue};

/// Why a sink's credentials or TLS roots cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// `NAME_FILE` names a file that cannot be read.
    #[error("{variable}: cannot read {path}: {message}")]
    File {
        /// The `*_FILE` variable.
        variable: String,
        /// The file it names.
        path: PathBuf,
        /// The error reading it.
        message: String,
    },
    /// A credential has characters an HTTP header cannot carry (a newline inside it).
    #[error("{0}: the value has characters an HTTP header cannot carry")]
    Header(String),
    /// A credential the sink needs is not set.
    #[error("{0} (or {0}_FILE) is not set")]
    Missing(String),
    /// Only one of a user and a password is set.
    #[error("{0} and {1} are set together or not at all")]
    Half(String, String),
    /// The CA file cannot be read or holds no certificate.
    #[error("CA file {path}: {message}")]
    Ca {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

/// Reads environment variables; [`process_env`] reads the process's, tests give their own.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process's environment, empty values read as unset.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The credential `name`: the variable `name`, else the content of the file `name_FILE` names
/// (one trailing `\n` or `\r\n` cut); `None` when neither is set.
///
/// # Errors
/// [`CredentialError::File`] when the file cannot be read (the error names the variable and the
/// path, never the content).
pub fn secret(env: Env<'_>, name: &str) -> Result<Option<String>, CredentialError> {
    if let Some(value) = env(name) {
        return Ok(Some(value));
    }
    let variable = format!("{name}_FILE");
    let Some(path) = env(&variable) else { return Ok(None) };
    let text = std::fs::read_to_string(&path).map_err(|e| CredentialError::File {
        variable,
        path: path.clone().into(),
        message: e.to_string(),
    })?;
    let text = text.strip_suffix('\n').map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
    Ok(Some(text.to_string()))
}

/// `Authorization: Basic …` of `user` and `password` (base64 of `user:password`, RFC 7617).
pub fn basic(user: &str, password: &str) -> HeaderValue {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    HeaderValue::from_str(&format!("Basic {encoded}")).expect("base64 is a valid header value")
}

/// An `Authorization` header of `scheme` and `value` (`Bearer`, `ApiKey`, `Splunk`).
///
/// # Errors
/// [`CredentialError::Header`] naming `variable` when the value cannot be a header.
pub fn authorization(scheme: &str, value: &str, variable: &str) -> Result<(HeaderName, HeaderValue), CredentialError> {
    let mut header = HeaderValue::from_str(&format!("{scheme} {value}"))
        .map_err(|_| CredentialError::Header(variable.to_string()))?;
    header.set_sensitive(true);
    Ok((AUTHORIZATION, header))
}

/// HTTP Basic authentication from the variables `user` and `password` (each also `*_FILE`):
/// `None` when neither is set.
///
/// # Errors
/// [`CredentialError::Half`] when only one is set; [`CredentialError::File`] as [`secret`].
pub fn user_password(env: Env<'_>, user: &str, password: &str) -> Result<Option<HeaderValue>, CredentialError> {
    match (secret(env, user)?, secret(env, password)?) {
        (Some(u), Some(p)) => {
            let mut header = basic(&u, &p);
            header.set_sensitive(true);
            Ok(Some(header))
        }
        (None, None) => Ok(None),
        _ => Err(CredentialError::Half(user.into(), password.into())),
    }
}

/// `Authorization: SCHEME <token>` from the variable `token`, else HTTP Basic from `user` and
/// `password` (each also `*_FILE`); `None` when none is set.
///
/// # Errors
/// As [`authorization`] and [`user_password`].
pub fn token_or_user_password(
    env: Env<'_>,
    scheme: &str,
    token: &str,
    (user, password): (&str, &str),
) -> Result<Option<(HeaderName, HeaderValue)>, CredentialError> {
    if let Some(value) = secret(env, token)? {
        return authorization(scheme, &value, token).map(Some);
    }
    Ok(user_password(env, user, password)?.map(|basic| (AUTHORIZATION, basic)))
}

/// The webhook configuration of an HTTP store: named `name`, posting `encoding`'s bodies to
/// `url` (`default_path` added when it has no path) with `headers`, trusting the CA bundle
/// `ca_file` when given; the rest as a webhook's defaults.
///
/// # Errors
/// [`CredentialError::Ca`] as [`tls_with_ca`].
pub fn store_config(
    name: impl Into<String>,
    url: &str,
    default_path: &str,
    encoding: std::sync::Arc<dyn super::encoding::BatchEncoding>,
    headers: Vec<(HeaderName, HeaderValue)>,
    ca_file: Option<&Path>,
) -> Result<super::webhook::WebhookConfig, CredentialError> {
    let tls = ca_file.map(tls_with_ca).transpose()?;
    Ok(super::webhook::WebhookConfig {
        encoding,
        headers,
        tls,
        ..super::webhook::WebhookConfig::new(name, with_default_path(url, default_path))
    })
}

/// A TLS client configuration trusting only the certificates of the PEM bundle `path` (as
/// `curl --cacert`), with rustls' `ring` provider as the webhook's.
///
/// # Errors
/// [`CredentialError::Ca`] when the file cannot be read or holds no certificate rustls takes.
pub fn tls_with_ca(path: &Path) -> Result<rustls::ClientConfig, CredentialError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let fail = |message: String| CredentialError::Ca { path: path.into(), message };
    let pem = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| fail(format!("not a PEM bundle: {e}")))?;
        roots.add(cert).map_err(|e| fail(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(fail("no certificate in it".into()));
    }
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(e.to_string()))
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
}

/// `url` with `path` when it has no path or only `/` (`http://loki:3100` →
/// `http://loki:3100/loki/api/v1/push`, its query kept); otherwise as given (a proxy's own
/// path).
pub fn with_default_path(url: &str, path: &str) -> String {
    let Ok(uri) = url.parse::<hyper::Uri>() else { return url.into() };
    if uri.path() != "/" {
        return url.into();
    }
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let mut parts = uri.into_parts();
    parts.path_and_query = format!("{path}{query}").parse().ok();
    hyper::Uri::from_parts(parts).map_or_else(|_| url.into(), |u| u.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_comes_from_its_variable_else_from_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "from-file\n").unwrap();
        let path = file.display().to_string();
        let env = |name: &str| match name {
            "A" => Some("from-env".to_string()),
            "A_FILE" | "B_FILE" => Some(path.clone()),
            "C_FILE" => Some("/nonexistent/token".into()),
            _ => None,
        };
        assert_eq!(secret(&env, "A").unwrap().as_deref(), Some("from-env"));
        assert_eq!(secret(&env, "B").unwrap().as_deref(), Some("from-file"), "one trailing newline cut");
        assert_eq!(secret(&env, "D").unwrap(), None);
        let error = secret(&env, "C").unwrap_err().to_string();
        assert!(error.starts_with("C_FILE: cannot read /nonexistent/token"), "{error}");
        let half = user_password(&env, "A", "D").unwrap_err().to_string();
        assert_eq!(half, "A and D are set together or not at all");
        assert_eq!(user_password(&env, "A", "B").unwrap().unwrap(), basic("from-env", "from-file"));
    }

    #[test]
    fn the_default_path_is_added_only_when_there_is_none() {
        assert_eq!(with_default_path("http://l:3100", "/loki/api/v1/push"), "http://l:3100/loki/api/v1/push");
        assert_eq!(with_default_path("https://e:9200/?x=1", "/_bulk"), "https://e:9200/_bulk?x=1");
        assert_eq!(with_default_path("http://p/es/_bulk", "/_bulk"), "http://p/es/_bulk");
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ca.pem");
        std::fs::write(&file, "not a certificate\n").unwrap();
        let error = tls_with_ca(&file).unwrap_err().to_string();
        assert!(error.contains("no certificate"), "{error}");
        assert!(tls_with_ca(&dir.path().join("missing.pem")).is_err());
    }
}
