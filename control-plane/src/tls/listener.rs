//! HTTPS serving, for deployments without a proxy that terminates TLS in front of the control plane.
//!
//! The certificate is swapped on SIGHUP without touching open connections: every handshake asks
//! [`ServerCertificate`] for the current one, so only connections made after the reload see the new certificate.
//! Handshakes run in tasks of their own, each with a deadline: a client that connects and says nothing holds up
//! neither the accept loop nor anyone else, and is closed after [`HANDSHAKE_TIMEOUT`].

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use switchyard_runtime::tls::{TlsConfigError, certificates, private_key, provider};

use super::TlsError;
use crate::metrics::Metrics;

/// The longest a client may take to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A certificate expiring sooner than this is warned about at every load.
const EXPIRY_WARNING_SECS: i64 = 14 * 24 * 3600;
/// Connections past their handshake that axum has not taken yet.
const READY_QUEUE: usize = 64;
/// The `role` label of the listener's certificate in the expiry metric.
const ROLE: &str = "listener";

/// The certificate the listener presents, reloaded from its files on SIGHUP.
pub(crate) struct ServerCertificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: ArcSwap<CertifiedKey>,
    metrics: Arc<Metrics>,
}

impl fmt::Debug for ServerCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerCertificate")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

impl ServerCertificate {
    /// Reads the certificate chain and its key, and reports the leaf's expiry in `metrics`.
    pub(crate) fn load(
        cert_file: &Path,
        key_file: &Path,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<ServerCertificate>, TlsError> {
        let key = read(cert_file, key_file)?;
        let certificate = ServerCertificate {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            current: ArcSwap::from_pointee(key),
            metrics,
        };
        certificate.report_expiry();
        Ok(Arc::new(certificate))
    }

    /// Reads the files again and serves the new certificate from the next handshake on; on failure the previous
    /// one stays.
    fn reload(&self) -> Result<(), TlsError> {
        self.current
            .store(Arc::new(read(&self.cert_file, &self.key_file)?));
        self.report_expiry();
        Ok(())
    }

    /// Sets the expiry metric, and warns when the certificate has expired or expires within 14 days.
    fn report_expiry(&self) {
        let source = self.cert_file.display().to_string();
        let leaf = self.current.load();
        let Some(not_after) = leaf
            .end_entity_cert()
            .ok()
            .and_then(|der| switchyard_runtime::x509::not_after(der))
        else {
            self.metrics.forget_certificate(ROLE, &source);
            return tracing::warn!(certificate = %source, "cannot read the certificate's expiry date");
        };
        self.metrics.certificate_expiry(ROLE, &source, not_after);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let expires = chrono::DateTime::from_timestamp(not_after, 0)
            .map_or_else(|| not_after.to_string(), |t| t.to_rfc3339());
        if not_after <= now {
            tracing::warn!(certificate = %source, %expires, "the HTTPS certificate has expired: clients refuse it");
        } else if not_after - now < EXPIRY_WARNING_SECS {
            tracing::warn!(
                certificate = %source,
                %expires,
                "the HTTPS certificate expires in {} days",
                (not_after - now) / 86_400
            );
        }
    }

    /// The server configuration presenting this certificate (HTTP/1.1 only, as axum serves it).
    pub(crate) fn server_config(self: &Arc<Self>) -> Result<ServerConfig, TlsError> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|cause| TlsConfigError::Rustls {
                what: "the TLS protocol versions".to_string(),
                cause,
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// Reloads the certificate at every SIGHUP, for the life of the process.
    pub(crate) async fn reload_on_sighup(self: Arc<Self>) {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(hangups) => hangups,
            Err(e) => {
                return tracing::error!(
                    "cannot install the SIGHUP handler: the certificate will not be reloaded: {e}"
                );
            }
        };
        while hangups.recv().await.is_some() {
            match self.reload() {
                Ok(()) => {
                    tracing::info!(certificate = %self.cert_file.display(), "HTTPS certificate reloaded")
                }
                Err(e) => tracing::error!(
                    "cannot reload the HTTPS certificate, the previous one keeps serving: {e}"
                ),
            }
        }
    }
}

impl ResolvesServerCert for ServerCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The chain of `cert_file` with the key of `key_file`, checked to belong together.
fn read(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
    CertifiedKey::from_der(
        certificates(cert_file)?,
        private_key(key_file)?,
        &provider(),
    )
    .map_err(|cause| {
        TlsError::Config(TlsConfigError::Rustls {
            what: format!(
                "the certificate {} with the key {}",
                cert_file.display(),
                key_file.display()
            ),
            cause,
        })
    })
}

/// What axum serves on: connections whose TLS handshake has completed.
pub(crate) struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` in a task of its own, which ends when the listener is dropped.
    pub(crate) fn new(tcp: TcpListener, config: ServerConfig) -> std::io::Result<TlsListener> {
        let local_addr = tcp.local_addr()?;
        let (sender, ready) = mpsc::channel(READY_QUEUE);
        tokio::spawn(accept(tcp, TlsAcceptor::from(Arc::new(config)), sender));
        Ok(TlsListener { ready, local_addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept task only ends once this receiver is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local_addr)
    }
}

/// Accepts connections and gives each its own handshake task.
async fn accept(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            () = ready.closed() => return,
            accepted = tcp.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, most likely: wait a moment rather than spin, as axum does.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (acceptor, ready) = (acceptor.clone(), ready.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                Err(_) => {
                    tracing::debug!(%peer, "no TLS handshake within {HANDSHAKE_TIMEOUT:?}: closed")
                }
            }
        });
    }
}
