//! TLS to the nodes of a `rediss` resource, for the migration worker, as the resource URL's TLS options say
//! (`switchyard_schemas::TlsOptions`): the CAs to trust (`tlsCaFile`, else the system's store), a client
//! certificate (`tlsCertFile`, `tlsKeyFile`), the name sent as SNI and checked (`tlsServerName`, else the node's
//! host) and how much is checked (`tlsVerify`: `full`, `ca` or `none`).

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};
use switchyard_schemas::resource::{TlsOptions, TlsVerify};
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
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|cause| TlsError::Rustls {
            what: "the TLS protocol versions".to_string(),
            cause,
        })?;
    let builder = match options.verify {
        TlsVerify::Full => builder.with_webpki_verifier(webpki(options, Arc::clone(&provider))?),
        TlsVerify::Ca => {
            let chain = Some(webpki(options, Arc::clone(&provider))?);
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Lenient { chain, provider }))
        }
        TlsVerify::None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Lenient {
                chain: None,
                provider,
            })),
    };
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

/// rustls' own check of the chain, the dates and the name, against `tlsCaFile` or the system's store.
fn webpki(
    options: &TlsOptions,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, TlsError> {
    let roots = roots(options.ca_file.as_deref().map(Path::new))?;
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))
}

/// What `tlsVerify=ca` and `tlsVerify=none` check of a node's certificate.
#[derive(Debug)]
struct Lenient {
    /// `ca`: the chain up to a trusted CA and the dates, not the name, for nodes announced by addresses their
    /// certificates do not list. `None` (`tlsVerify=none`): nothing, encryption without authentication, for tests.
    chain: Option<Arc<WebPkiServerVerifier>>,
    /// Either way the handshake's signatures are checked, so the session is with the holder of the certificate
    /// shown.
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // webpki checks the name last, once the chain and the dates have passed.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            checked => checked,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
