//! TLS to the API server as kubectl verifies it (Go's `crypto/x509`), on rustls.
//!
//! rustls (through webpki) refuses a server certificate that is a CA (`basicConstraints
//! CA:TRUE`): `CaUsedAsEndEntity`. Go accepts one when it is itself in the root pool: its
//! `Certificate.Verify` checks the leaf's validity period and host name, then takes the chain to
//! be the leaf alone when `opts.Roots.contains(leaf)` (byte-equal), and checks the extended key
//! usage (none, `serverAuth` or `anyExtendedKeyUsage`). Single-node and test clusters whose
//! serving certificate is its own CA (the kubeconfig's `certificate-authority-data` is the
//! serving certificate) therefore work with kubectl and client-go. [`KubectlServerVerifier`]
//! does the same on rustls:
//!
//! 1. the ordinary webpki verification with the configured roots decides, except that
//! 2. when it fails with `CaUsedAsEndEntity` and the presented certificate is byte-identical to
//!    one of the configured CA certificates, the certificate is accepted if it is within its
//!    validity period, valid for the server name (webpki's SAN matching, as for any server
//!    certificate), and its extended key usage allows server authentication — Go's checks for
//!    that case. Handshake signatures are always verified by the webpki verifier (the ring
//!    provider's algorithms).
//!
//! What Go accepts and this does not: a `CA:TRUE` serving certificate that is *issued by* a
//! configured CA instead of being one (webpki cannot build that chain).

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// A [`ServerCertVerifier`] that accepts what kubectl accepts from a kubeconfig's
/// `certificate-authority(-data)`: webpki's verdict, plus a configured CA certificate served as
/// the server's own certificate (see the [module docs](self)).
#[derive(Debug)]
pub struct KubectlServerVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    /// The configured CA certificates, DER.
    roots: Vec<CertificateDer<'static>>,
}

impl KubectlServerVerifier {
    /// A verifier trusting `roots` (DER certificates, as `kube::Config::root_cert`), with the
    /// ring provider's signature algorithms.
    ///
    /// # Errors
    /// A certificate that is not one, or no certificate at all.
    pub fn new(roots: &[Vec<u8>]) -> Result<Self, String> {
        let roots: Vec<CertificateDer<'static>> = roots.iter().map(|der| CertificateDer::from(der.clone())).collect();
        let mut store = RootCertStore::empty();
        for der in &roots {
            store.add(der.clone()).map_err(|e| format!("certificate authority: {e}"))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
            .build()
            .map_err(|e| format!("certificate authority: {e}"))?;
        Ok(Self { webpki, roots })
    }

    /// Go's checks of a leaf that is in the root pool: validity period, host name, extended key
    /// usage.
    fn verify_root_as_leaf(
        &self,
        end_entity: &CertificateDer<'_>,
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let bad_encoding = || rustls::Error::InvalidCertificate(CertificateError::BadEncoding);
        let (_, cert) = x509_parser::parse_x509_certificate(end_entity.as_ref()).map_err(|_| bad_encoding())?;
        let validity = cert.validity();
        let (not_before, not_after) = (validity.not_before.timestamp(), validity.not_after.timestamp());
        let unix = |t: i64| UnixTime::since_unix_epoch(std::time::Duration::from_secs(t.max(0) as u64));
        let time = now.as_secs() as i64;
        if time < not_before {
            return Err(CertificateError::NotValidYetContext { time: now, not_before: unix(not_before) }.into());
        }
        if time > not_after {
            return Err(CertificateError::ExpiredContext { time: now, not_after: unix(not_after) }.into());
        }
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        match cert.extended_key_usage().map_err(|_| bad_encoding())? {
            Some(eku) if !(eku.value.any || eku.value.server_auth) => Err(CertificateError::InvalidPurpose.into()),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }
}

/// Whether rustls refused the certificate because it is a CA certificate
/// (webpki's `CaUsedAsEndEntity`).
pub fn is_ca_used_as_end_entity(error: &rustls::Error) -> bool {
    matches!(error, rustls::Error::InvalidCertificate(CertificateError::Other(other))
        if other.0.downcast_ref::<webpki::Error>() == Some(&webpki::Error::CaUsedAsEndEntity))
}

impl ServerCertVerifier for KubectlServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(error)
                if is_ca_used_as_end_entity(&error)
                    && self.roots.iter().any(|root| root.as_ref() == end_entity.as_ref()) =>
            {
                self.verify_root_as_leaf(end_entity, server_name, now)
            }
            verdict => verdict,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType};

    fn params(ca: bool, names: &[&str]) -> CertificateParams {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.subject_alt_names = names
            .iter()
            .map(|n| match n.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(n.to_string().try_into().unwrap()),
            })
            .collect();
        if ca {
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        }
        p
    }

    fn self_signed(p: CertificateParams) -> Vec<u8> {
        p.self_signed(&KeyPair::generate().unwrap()).unwrap().der().to_vec()
    }

    fn verify(roots: &[Vec<u8>], leaf: &[u8], name: &str) -> Result<ServerCertVerified, rustls::Error> {
        let verifier = KubectlServerVerifier::new(roots).unwrap();
        let name = ServerName::try_from(name.to_string()).unwrap();
        verifier.verify_server_cert(&CertificateDer::from(leaf.to_vec()), &[], &name, &[], UnixTime::now())
    }

    #[test]
    fn a_ca_certificate_served_as_its_own_is_accepted_only_when_it_is_a_configured_ca() {
        let ca = self_signed(params(true, &["127.0.0.1", "localhost"]));
        // webpki alone refuses it.
        let webpki = KubectlServerVerifier::new(std::slice::from_ref(&ca)).unwrap().webpki;
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let refused =
            webpki.verify_server_cert(&CertificateDer::from(ca.clone()), &[], &name, &[], UnixTime::now()).unwrap_err();
        assert!(is_ca_used_as_end_entity(&refused), "{refused:?}");
        // As Go: accepted for its IP and DNS names…
        assert!(verify(std::slice::from_ref(&ca), &ca, "127.0.0.1").is_ok());
        assert!(verify(std::slice::from_ref(&ca), &ca, "localhost").is_ok());
        // …not for another name…
        let wrong_name = verify(std::slice::from_ref(&ca), &ca, "api.example").unwrap_err();
        assert!(
            matches!(wrong_name, rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })),
            "{wrong_name:?}"
        );
        // …and not when another CA is configured.
        let other = self_signed(params(true, &["127.0.0.1"]));
        let unknown = verify(&[other], &ca, "127.0.0.1").unwrap_err();
        assert!(is_ca_used_as_end_entity(&unknown), "{unknown:?}");
    }

    #[test]
    fn a_ca_certificate_served_as_its_own_needs_server_auth_and_validity() {
        let mut client_only = params(true, &["127.0.0.1"]);
        client_only.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_only = self_signed(client_only);
        let refused = verify(std::slice::from_ref(&client_only), &client_only, "127.0.0.1").unwrap_err();
        assert_eq!(refused, rustls::Error::InvalidCertificate(CertificateError::InvalidPurpose));

        let mut server = params(true, &["127.0.0.1"]);
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server = self_signed(server);
        assert!(verify(std::slice::from_ref(&server), &server, "127.0.0.1").is_ok());

        let mut expired = params(true, &["127.0.0.1"]);
        expired.not_before = rcgen::date_time_ymd(2000, 1, 1);
        expired.not_after = rcgen::date_time_ymd(2001, 1, 1);
        let expired = self_signed(expired);
        let refused = verify(std::slice::from_ref(&expired), &expired, "127.0.0.1").unwrap_err();
        assert!(
            matches!(refused, rustls::Error::InvalidCertificate(CertificateError::ExpiredContext { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn a_leaf_signed_by_the_configured_ca_is_verified_as_webpki_does() {
        let ca_key = KeyPair::generate().unwrap();
        let ca_params = params(true, &[]);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf = params(false, &["127.0.0.1"]).signed_by(&KeyPair::generate().unwrap(), &issuer).unwrap();
        let roots = [ca.der().to_vec()];
        assert!(verify(&roots, leaf.der(), "127.0.0.1").is_ok());
        let mut other = params(true, &[]);
        other.distinguished_name.push(rcgen::DnType::CommonName, "another CA");
        let other = self_signed(other);
        assert_eq!(
            verify(&[other], leaf.der(), "127.0.0.1").unwrap_err(),
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
        );
    }
}
