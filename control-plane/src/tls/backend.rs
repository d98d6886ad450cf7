//! TLS to the nodes of a `rediss` resource, for the migration worker, as the resource URL's TLS options say
//! (`switchyard_schemas::TlsOptions`): the CAs to trust (`tlsCaFile`, else the system's store), a client
//! certificate (`tlsCertFile`, `tlsKeyFile`), the name sent as SNI and checked (`tlsServerName`, else the node's
//! host) and how much is checked (`tlsVerify`: `full`, `ca` or `none`, see `switchyard_runtime::tls::verifier`).

use std::sync::Arc;

use rustls::pki_types::ServerName;
use switchyard_runtime::tls::client_config;
use switchyard_schemas::resource::TlsOptions;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::TlsError;

/// Runs the TLS handshake on `tcp`, a connection to a node named `host` in its resource (URL, sentinel or cluster).
pub(crate) async fn connect(
    tcp: TcpStream,
    host: &str,
    options: &TlsOptions,
) -> Result<TlsStream<TcpStream>, TlsError> {
    let name = options.server_name.as_deref().unwrap_or(host);
    let server_name = ServerName::try_from(name.to_string())
        .map_err(|_| TlsError::ServerName(name.to_string()))?;
    let config = client_config(options, &|_, _, _| {})?;
    TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
        .map_err(TlsError::Handshake)
}
