//! TLS, in one place: the listener's configuration (certificate, key, the CAs of client certificates), the
//! configurations the gateway connects to a resource's nodes with (from the resource URL's options), how a TLS
//! failure is described, and the expiry of every certificate involved (`expiry`). rustls over ring does the
//! work; `stream` drives it over the gateway's non-blocking sockets.
//!
//! Certificate files are read when a configuration is built and again on SIGHUP (`reload`): connections already
//! open keep the session they negotiated, new ones get the new files; a file that fails to load on SIGHUP is
//! logged and the configuration in use stays.

mod expiry;
mod stream;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};
use switchyard_runtime::tls::{self as rustls_config, TlsFile};
use switchyard_schemas::resource::TlsOptions;
use tokio::net::TcpStream;

pub(crate) use expiry::{Role, certificates};
pub(crate) use stream::TlsStream;

/// How the listener treats client certificates when it has CAs for them (`--tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientAuth {
    /// Every client presents a certificate signed by one of the CAs.
    Yes,
    /// A client may present one (to be told by it); one that does not authenticates with a password.
    Optional,
}

/// The files of the TLS listener (`--tls-cert`, `--tls-key`, `--tls-client-ca`).
#[derive(Debug, Clone)]
pub struct ListenerFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

/// The TLS listener's configuration, swapped whole on SIGHUP.
pub(crate) struct ListenerTls {
    files: ListenerFiles,
    config: ArcSwap<ServerConfig>,
}

impl ListenerTls {
    pub(crate) fn load(files: ListenerFiles) -> Result<ListenerTls, String> {
        let config = server_config(&files)?;
        Ok(ListenerTls {
            files,
            config: ArcSwap::from_pointee(config),
        })
    }

    /// Reads the files again; on failure the configuration in use stays.
    pub(crate) fn reload(&self) -> Result<(), String> {
        self.config.store(Arc::new(server_config(&self.files)?));
        Ok(())
    }

    /// Runs the server handshake with a client, with the configuration of the moment, within `timeout`.
    pub(crate) async fn accept(&self, tcp: TcpStream, timeout: Duration) -> io::Result<TlsStream> {
        let conn = ServerConnection::new(self.config.load_full()).map_err(io::Error::other)?;
        tokio::time::timeout(timeout, TlsStream::handshake(tcp, conn.into()))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))?
    }
}

fn server_config(files: &ListenerFiles) -> Result<ServerConfig, String> {
    let chain = load_certs(&files.cert, Role::Listener)?;
    let key = rustls_config::private_key(&files.key).map_err(|e| e.to_string())?;
    let verifier = match &files.client_ca {
        None => WebPkiClientVerifier::no_client_auth(),
        Some(ca) => {
            let cas = load_certs(ca, Role::ClientCa)?;
            let roots = Arc::new(rustls_config::roots_of(ca, cas).map_err(|e| e.to_string())?);
            let builder =
                WebPkiClientVerifier::builder_with_provider(roots, rustls_config::provider());
            let builder = match files.client_auth {
                ClientAuth::Yes => builder,
                ClientAuth::Optional => builder.allow_unauthenticated(),
            };
            builder
                .build()
                .map_err(|e| format!("client CAs {}: {e}", ca.display()))?
        }
    };
    ServerConfig::builder_with_provider(rustls_config::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| format!("{}: {e}", files.key.display()))
}

/// How the gateway connects to one resource's nodes: a configuration built from the URL's TLS options, shared
/// by every resource with the same options and rebuilt in place on SIGHUP.
pub(crate) struct BackendTls {
    options: TlsOptions,
    config: ArcSwap<ClientConfig>,
}

impl PartialEq for BackendTls {
    fn eq(&self, other: &BackendTls) -> bool {
        self.options == other.options
    }
}

impl Eq for BackendTls {}

impl std::hash::Hash for BackendTls {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.options.hash(state);
    }
}

impl std::fmt::Debug for BackendTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.options.fmt(f)
    }
}

/// The live backend configurations by options, so that resources that say the same share one (and its
/// session cache), and SIGHUP finds them all.
static BACKENDS: LazyLock<Mutex<HashMap<TlsOptions, Weak<BackendTls>>>> =
    LazyLock::new(Default::default);

impl BackendTls {
    /// The configuration for `options`: the one in use if a resource already has it, else built (reading the
    /// files it names). `Err` says what is wrong with the options or files.
    pub(crate) fn get(options: &TlsOptions) -> Result<Arc<BackendTls>, String> {
        let mut live = BACKENDS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tls) = live.get(options).and_then(Weak::upgrade) {
            return Ok(tls);
        }
        let tls = Arc::new(BackendTls {
            options: options.clone(),
            config: ArcSwap::from_pointee(client_config(options)?),
        });
        live.retain(|_, tls| tls.strong_count() > 0);
        live.insert(options.clone(), Arc::downgrade(&tls));
        Ok(tls)
    }

    /// Runs the client handshake with the node at `addr` (`host:port`) over `tcp`, and records the certificate
    /// it presented. The name checked is `tlsServerName`, else the node's host.
    pub(crate) async fn connect(&self, tcp: TcpStream, addr: &str) -> io::Result<TlsStream> {
        let name = match &self.options.server_name {
            Some(name) => name.as_str(),
            None => host_of(addr),
        };
        let name = ServerName::try_from(name.to_string()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TLS: '{name}' is not a valid server name"),
            )
        })?;
        let conn =
            ClientConnection::new(self.config.load_full(), name).map_err(io::Error::other)?;
        let stream = TlsStream::handshake(tcp, conn.into()).await?;
        if let Some(leaf) = stream.peer_leaf() {
            certificates().observe(Role::Backend, addr, [&leaf[..]]);
        }
        Ok(stream)
    }
}

/// The CAs the gateway trusts for an `https` control plane (`--control-plane-ca`, PEM), as reqwest takes them.
pub(crate) fn control_plane_cas(file: &Path) -> Result<Vec<reqwest::Certificate>, String> {
    load_certs(file, Role::ControlPlaneCa)?
        .iter()
        .map(|der| {
            reqwest::Certificate::from_der(der).map_err(|e| format!("{}: {e}", file.display()))
        })
        .collect()
}

/// Records the certificate an `https` control plane presented with `response`.
pub(crate) fn observe_control_plane(url: &str, response: &reqwest::Response) {
    let presented = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate());
    if let Some(der) = presented {
        certificates().observe(Role::ControlPlane, url, [der]);
    }
}

/// Reads every TLS file again: the listener's (when there is one) and every backend configuration in use.
/// Returns what failed; what failed keeps its previous configuration.
pub(crate) fn reload(listener: Option<&ListenerTls>) -> Vec<String> {
    let mut failed = Vec::new();
    if let Some(listener) = listener
        && let Err(e) = listener.reload()
    {
        failed.push(format!("listener: {e}"));
    }
    let live: Vec<Arc<BackendTls>> = BACKENDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .filter_map(Weak::upgrade)
        .collect();
    for tls in live {
        match client_config(&tls.options) {
            Ok(config) => tls.config.store(Arc::new(config)),
            Err(e) => failed.push(format!("backend: {e}")),
        }
    }
    failed
}

/// A resource's client configuration (`switchyard_runtime::tls::client_config`), its files' certificates
/// recorded for their expiry.
fn client_config(options: &TlsOptions) -> Result<ClientConfig, String> {
    let loaded = |file: TlsFile, path: &Path, certs: &[CertificateDer<'static>]| {
        let role = match file {
            TlsFile::Ca => Role::BackendCa,
            TlsFile::ClientCertificate => Role::BackendClient,
        };
        observe_file(role, path, certs);
    };
    rustls_config::client_config(options, &loaded).map_err(|e| e.to_string())
}

/// A PEM file's certificates, recorded for their expiry under `role`.
fn load_certs(file: &Path, role: Role) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = rustls_config::certificates(file).map_err(|e| e.to_string())?;
    observe_file(role, file, &certs);
    Ok(certs)
}

fn observe_file(role: Role, file: &Path, certs: &[CertificateDer<'static>]) {
    certificates().observe(
        role,
        &file.display().to_string(),
        certs.iter().map(|c| &c[..]),
    );
}

/// The host of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A name as rustls lists it (`DnsName("redis.internal")`, `IpAddress(10.0.0.1)`), without the wrapping.
fn bare_name(presented: &str) -> &str {
    presented
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .map_or(presented, |inner| inner.trim_matches('"'))
}

/// A TLS failure as clients and logs see it: what went wrong, in words an operator acts on.
fn describe_error(error: &rustls::Error, handshaking: bool) -> String {
    use rustls::{CertificateError as Cert, Error};
    let reason = match error {
        Error::InvalidCertificate(Cert::UnknownIssuer) => {
            "certificate signed by an unknown CA".to_string()
        }
        Error::InvalidCertificate(Cert::NotValidForNameContext {
            expected,
            presented,
        }) => format!(
            "hostname mismatch: the certificate is for {}, not {}",
            presented
                .iter()
                .map(|name| bare_name(name))
                .collect::<Vec<_>>()
                .join(", "),
            expected.to_str()
        ),
        Error::InvalidCertificate(Cert::NotValidForName) => {
            "hostname mismatch: the certificate is not for this name".to_string()
        }
        Error::InvalidCertificate(Cert::Expired | Cert::ExpiredContext { .. }) => {
            "certificate expired".to_string()
        }
        Error::InvalidCertificate(Cert::NotValidYet | Cert::NotValidYetContext { .. }) => {
            "certificate not valid yet".to_string()
        }
        Error::InvalidCertificate(Cert::Other(other))
            if format!("{other:?}").contains("UnsupportedCertVersion") =>
        {
            "the certificate is X.509 v1; only v3 certificates (with extensions) are accepted"
                .to_string()
        }
        Error::AlertReceived(alert) => format!("the peer refused: {alert:?}"),
        Error::NoCertificatesPresented => "no client certificate presented".to_string(),
        other => other.to_string(),
    };
    match handshaking {
        true => format!("TLS handshake failed: {reason}"),
        false => format!("TLS: {reason}"),
    }
}
