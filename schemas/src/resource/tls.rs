//! A resource's TLS settings, from its URL's parameters: the `rediss*` schemes turn TLS on for the data nodes,
//! camellia's `sentinelSSL=true` for the sentinels, and these say how the gateway checks the nodes and proves
//! itself to them:
//!
//! ```text
//! tlsCaFile=/path/ca.pem          the CAs to trust (default: the system's store, SSL_CERT_FILE/SSL_CERT_DIR honoured)
//! tlsCertFile=/path/client.pem    a client certificate chain for nodes that ask for one, with
//! tlsKeyFile=/path/client.key     its private key (both or neither)
//! tlsServerName=redis.internal    the name sent as SNI and checked against the certificate (default: the node's host)
//! tlsVerify=full|ca|none          full (default): chain and name; ca: chain only; none: nothing (tests only)
//! ```

use super::{Query, ResourceUrlError};

/// How the gateway speaks TLS to a resource's nodes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TlsOptions {
    /// A PEM file of the CAs to trust; `None`: the system's trust store.
    pub ca_file: Option<String>,
    /// A client certificate chain and its private key (PEM files), for nodes that require one.
    pub client_cert: Option<(String, String)>,
    /// The name sent as SNI and checked against the node's certificate; `None`: the node's host, as the URL,
    /// the sentinels or the cluster name it.
    pub server_name: Option<String>,
    pub verify: TlsVerify,
}

/// What the gateway checks of a node's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TlsVerify {
    /// The chain up to a trusted CA, the validity dates, and the name.
    #[default]
    Full,
    /// The chain and the dates, not the name: for nodes announced by addresses their certificates do not list
    /// (cluster nodes behind `cluster-announce-ip`, replicas as sentinels report them).
    Ca,
    /// Nothing: encryption without authentication, for tests. Never for data anyone cares about.
    None,
}

/// The URL parameters of the TLS options.
pub(super) const PARAMETERS: &[&str] = &[
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
    "tlsServerName",
    "tlsVerify",
];

/// camellia's parameter for TLS to the sentinels.
pub(super) const SENTINEL_TLS: &str = "sentinelSSL";

impl TlsOptions {
    /// Reads the TLS parameters; `Ok(None)` when there are none. `wanted` says whether anything uses TLS: the
    /// parameters alone do not turn it on.
    pub(super) fn parse(
        params: &Query<'_>,
        wanted: bool,
    ) -> Result<Option<TlsOptions>, ResourceUrlError> {
        let client_cert = match (params.get("tlsCertFile"), params.get("tlsKeyFile")) {
            (Some(cert), Some(key)) => Some((cert.to_string(), key.to_string())),
            (None, None) => None,
            (Some(_), None) => return Err(ResourceUrlError::BadParameter("tlsKeyFile".into())),
            (None, Some(_)) => return Err(ResourceUrlError::BadParameter("tlsCertFile".into())),
        };
        let verify = match params.get("tlsVerify") {
            None | Some("full") => TlsVerify::Full,
            Some("ca") => TlsVerify::Ca,
            Some("none") => TlsVerify::None,
            Some(other) => return Err(ResourceUrlError::BadTlsVerify(other.to_string())),
        };
        let options = TlsOptions {
            ca_file: params.get("tlsCaFile").map(str::to_string),
            client_cert,
            server_name: params.get("tlsServerName").map(str::to_string),
            verify,
        };
        if options == TlsOptions::default() {
            return Ok(wanted.then(TlsOptions::default));
        }
        if !wanted {
            return Err(ResourceUrlError::TlsOff);
        }
        if options.server_name.as_deref() == Some("") {
            return Err(ResourceUrlError::BadParameter("tlsServerName".into()));
        }
        Ok(Some(options))
    }
}

/// camellia's `sentinelSSL=true|false`.
pub(super) fn sentinel_tls(params: &Query<'_>) -> Result<bool, ResourceUrlError> {
    match params.get(SENTINEL_TLS) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(ResourceUrlError::BadParameter(SENTINEL_TLS.into())),
    }
}
