//! What the gateway and the migration worker check of a node's certificate, as a resource's `tlsVerify` says:
//! rustls' own verifier for `full`, and [`Lenient`] for `ca` (the chain, not the name) and `none` (nothing).

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use switchyard_schemas::resource::TlsVerify;

/// The verifier for `verify`, trusting `roots` (unused by `none`).
pub fn verifier(
    verify: TlsVerify,
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, rustls::client::VerifierBuilderError> {
    let webpki =
        || WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(&provider)).build();
    Ok(match verify {
        TlsVerify::Full => webpki()?,
        TlsVerify::Ca => Arc::new(Lenient {
            chain: Some(webpki()?),
            provider,
        }),
        TlsVerify::None => Arc::new(Lenient {
            chain: None,
            provider,
        }),
    })
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
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
