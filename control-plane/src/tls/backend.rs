//! TLS to the nodes of a `rediss` resource, for the migration worker, as the resource URL's TLS options say
//! (`switchyard_schemas::TlsOptions`): the CAs to trust (`tlsCaFile`, else the system's store), a client
//! certificate (`tlsCertFile`, `tlsKeyFile`), the name sent as SNI and checked (`tlsServerName`, else the node's
//! host) and how much is checked (`tlsVerify`: `full`, `ca` or `none`, see `switchyard_schemas::resource::verifier`).

use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use switchyard_schemas::resource::{TlsOptions, verifier};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::{TlsError, certificates, private_key, provider, roots};

/// Runs the TLS handshake on `tcp`, a connection to a node named `host` in its resource (URL, sentinel or cluster).
pub(crate) async fn connect(
    tcp: TcpStream,
    host: &str,
    options: &TlsOptions,
) -> Result<TlsStream<TcpStream>, TlsError> {
    let name = options.server_name.as_deref().unwrap_or(host);
    let server_name = ServerName::try_from(name.to_string())
        .map_err(|_| TlsError::ServerName(name.to_string()))?;
    TlsConnector::from(Arc::new(client_config(options)?))
        .connect(server_name, tcp)
        .await
        .map_err(TlsError::Handshake)
}

fn client_config(options: &TlsOptions) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let roots = Arc::new(roots(options.ca_file.as_deref().map(Path::new))?);
    let verifier = verifier(options.verify, roots, Arc::clone(&provider))
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|cause| TlsError::Rustls {
            what: "the TLS protocol versions".to_string(),
            cause,
        })?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match &options.client_cert {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => builder
            .with_client_auth_cert(certificates(Path::new(cert))?, private_key(Path::new(key))?)
            .map_err(|cause| TlsError::Rustls {
                what: format!("the client certificate {cert} with the key {key}"),
                cause,
            }),
    }
}
