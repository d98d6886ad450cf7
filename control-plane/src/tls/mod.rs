//! TLS in the control plane, in one place: the HTTPS listener whose certificate a SIGHUP reloads (`listener`), and
//! the migration worker's connections to `rediss` resources with each resource's TLS options (`backend`). Both
//! are rustls over ring (no OpenSSL, no aws-lc), and read their certificates, keys and CAs from PEM files with
//! `switchyard_schemas::resource`'s functions (the gateway's too), so that every such failure names the file and
//! the reason.
//!
//! Postgres (sqlx's `tls-rustls-ring-native-roots`) and the HTTPS client of `switchyard-ctl` (reqwest's
//! `rustls-tls-native-roots`) are configured by their URL and flags and use the same rustls and ring.

mod backend;
mod listener;

use std::path::Path;

use switchyard_schemas::resource::{TlsConfigError, certificates};

pub(crate) use backend::connect as connect_backend;
pub(crate) use listener::{ServerCertificate, TlsListener};

/// Why a certificate, a key, a trust store or a TLS connection could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error(transparent)]
    Config(#[from] TlsConfigError),
    #[error("'{0}' is not a valid TLS server name")]
    ServerName(String),
    #[error("the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// The peer refused the session, or its certificate did not pass (unknown CA, name mismatch, expired...).
    #[error("TLS handshake: {0}")]
    Handshake(#[source] std::io::Error),
}

/// An HTTP(S) client for the control plane's API: it trusts only the CAs of `ca_file` when given, else the
/// system's trust store.
pub(crate) fn http_client(ca_file: Option<&Path>) -> Result<reqwest::Client, TlsError> {
    let mut builder = reqwest::Client::builder();
    if let Some(path) = ca_file {
        builder = builder.tls_built_in_root_certs(false);
        for certificate in certificates(path).map_err(TlsError::Config)? {
            let certificate =
                reqwest::Certificate::from_der(&certificate).map_err(TlsError::HttpClient)?;
            builder = builder.add_root_certificate(certificate);
        }
    }
    builder.build().map_err(TlsError::HttpClient)
}
