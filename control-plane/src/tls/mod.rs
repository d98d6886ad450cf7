//! TLS in the control plane, in one place: the HTTPS listener whose certificate a SIGHUP reloads (`listener`), and
//! the migration worker's connections to `rediss` resources with each resource's TLS options (`backend`). Both
//! are rustls over ring (no OpenSSL, no aws-lc), and read their certificates, keys and CAs from PEM files with
//! `switchyard_runtime::tls`'s functions (the gateway's too), so that every such failure names the file and
//! the reason.
//!
//! Postgres (sqlx's `tls-rustls-ring-native-roots`) is configured by its URL and uses the same rustls and ring,
//! as does `switchyard-ctl`'s HTTPS client (reqwest's `rustls-tls-native-roots`, in its own crate).

mod backend;
mod listener;

use switchyard_runtime::tls::TlsConfigError;

pub(crate) use backend::connect as connect_backend;
pub(crate) use listener::{ServerCertificate, TlsListener};

/// Why a certificate, a key, a trust store or a TLS connection could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error(transparent)]
    Config(#[from] TlsConfigError),
    #[error("'{0}' is not a valid TLS server name")]
    ServerName(String),
    /// The peer refused the session, or its certificate did not pass (unknown CA, name mismatch, expired...).
    #[error("TLS handshake: {0}")]
    Handshake(#[source] std::io::Error),
}
