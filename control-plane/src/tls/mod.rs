//! TLS in the control plane, in one place: the HTTPS listener whose certificate a SIGHUP reloads (`listener`), and
//! the migration worker's connections to `rediss` resources with each resource's TLS options (`backend`). Both
//! are rustls over ring (no OpenSSL, no aws-lc), and read their certificates, keys and CAs from PEM files here, so
//! that every such failure names the file and the reason.
//!
//! Postgres (sqlx's `tls-rustls-ring-native-roots`) and the HTTPS client of `switchyard-ctl` (reqwest's
//! `rustls-tls-native-roots`) are configured by their URL and flags and use the same rustls and ring.

mod backend;
mod listener;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub(crate) use backend::connect as connect_backend;
pub(crate) use listener::{ServerCertificate, TlsListener};

/// Why a certificate, a key or a trust store could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error("cannot read {}: {cause}", path.display())]
    File {
        path: PathBuf,
        #[source]
        cause: rustls::pki_types::pem::Error,
    },
    #[error("{} holds no PEM certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("{what}: {cause}")]
    Rustls {
        what: String,
        #[source]
        cause: rustls::Error,
    },
    #[error("the system's trust store holds no usable CA certificate ({0}); give a CA file")]
    NoSystemRoots(String),
    #[error("the certificate verifier: {0}")]
    Verifier(String),
    #[error("'{0}' is not a valid TLS server name")]
    ServerName(String),
    #[error("the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// The peer refused the session, or its certificate did not pass (unknown CA, name mismatch, expired...).
    #[error("TLS handshake: {0}")]
    Handshake(#[source] std::io::Error),
}

/// The one crypto provider of every TLS configuration here.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file, in order (a chain: the leaf first).
pub(crate) fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let failed = |cause| TlsError::File {
        path: path.to_path_buf(),
        cause,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(failed)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(failed)?;
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate(path.to_path_buf()));
    }
    Ok(certificates)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub(crate) fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|cause| TlsError::File {
        path: path.to_path_buf(),
        cause,
    })
}

/// The CAs of `ca_file`, or else the system's trust store (`SSL_CERT_FILE` and `SSL_CERT_DIR` honoured).
pub(crate) fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for certificate in certificates(path)? {
                roots.add(certificate).map_err(|cause| TlsError::Rustls {
                    what: format!("a CA certificate of {}", path.display()),
                    cause,
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let errors: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
                return Err(TlsError::NoSystemRoots(errors.join("; ")));
            }
        }
    }
    Ok(roots)
}

/// An HTTP(S) client for the control plane's API: it trusts only the CAs of `ca_file` when given, else the
/// system's trust store.
pub(crate) fn http_client(ca_file: Option<&Path>) -> Result<reqwest::Client, TlsError> {
    let mut builder = reqwest::Client::builder();
    if let Some(path) = ca_file {
        builder = builder.tls_built_in_root_certs(false);
        for certificate in certificates(path)? {
            let certificate =
                reqwest::Certificate::from_der(&certificate).map_err(TlsError::HttpClient)?;
            builder = builder.add_root_certificate(certificate);
        }
    }
    builder.build().map_err(TlsError::HttpClient)
}
