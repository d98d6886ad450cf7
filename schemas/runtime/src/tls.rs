//! The TLS configuration the gateway and the migration worker build alike from a resource's TLS options: PEM
//! files read with errors that name the file, the CAs of a file or else the system's trust store (read once), and
//! the client configuration itself. One place, so that a resource's URL means the same to both.

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use switchyard_schemas::resource::TlsOptions;

mod verify;

pub use verify::verifier;

/// Why a certificate, a key, a trust store or a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
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
}

/// What a PEM file a client configuration reads is for (see [`client_config`]'s `loaded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    /// The CAs trusted for the nodes (`tlsCaFile`).
    Ca,
    /// The client certificate (`tlsCertFile`).
    ClientCertificate,
}

/// The one crypto provider of every TLS configuration: ring.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: LazyLock<Arc<CryptoProvider>> =
        LazyLock::new(|| Arc::new(rustls::crypto::ring::default_provider()));
    Arc::clone(&PROVIDER)
}

/// The certificates of a PEM file, in order (a chain: the leaf first); at least one.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let failed = |cause| TlsConfigError::File {
        path: path.to_path_buf(),
        cause,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(failed)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(failed)?;
    if certificates.is_empty() {
        return Err(TlsConfigError::NoCertificate(path.to_path_buf()));
    }
    Ok(certificates)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    PrivateKeyDer::from_pem_file(path).map_err(|cause| TlsConfigError::File {
        path: path.to_path_buf(),
        cause,
    })
}

/// A trust store of `certificates` (read from `path`).
pub fn roots_of(
    path: &Path,
    certificates: Vec<CertificateDer<'static>>,
) -> Result<RootCertStore, TlsConfigError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates {
        roots
            .add(certificate)
            .map_err(|cause| TlsConfigError::Rustls {
                what: format!("a CA certificate of {}", path.display()),
                cause,
            })?;
    }
    Ok(roots)
}

/// The system's trust store (`SSL_CERT_FILE` and `SSL_CERT_DIR` honoured), read once per process.
pub fn system_roots() -> Result<Arc<RootCertStore>, TlsConfigError> {
    static ROOTS: OnceLock<Result<Arc<RootCertStore>, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let errors: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
                return Err(errors.join("; "));
            }
            Ok(Arc::new(roots))
        })
        .clone()
        .map_err(TlsConfigError::NoSystemRoots)
}

/// The client configuration `options` make: the CAs of `tlsCaFile` or the system's, the verifier `tlsVerify`
/// names, the client certificate. `loaded` is shown each file's certificates as they are read.
pub fn client_config(
    options: &TlsOptions,
    loaded: &dyn Fn(TlsFile, &Path, &[CertificateDer<'static>]),
) -> Result<ClientConfig, TlsConfigError> {
    let roots = match &options.ca_file {
        Some(file) => {
            let path = Path::new(file);
            let cas = certificates(path)?;
            loaded(TlsFile::Ca, path, &cas);
            Arc::new(roots_of(path, cas)?)
        }
        None => system_roots()?,
    };
    let verifier = verifier(options.verify, roots, provider())
        .map_err(|e| TlsConfigError::Verifier(e.to_string()))?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|cause| TlsConfigError::Rustls {
            what: "the TLS protocol versions".to_string(),
            cause,
        })?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match &options.client_cert {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain = certificates(Path::new(cert))?;
            loaded(TlsFile::ClientCertificate, Path::new(cert), &chain);
            builder
                .with_client_auth_cert(chain, private_key(Path::new(key))?)
                .map_err(|cause| TlsConfigError::Rustls {
                    what: format!("the client certificate {cert} with the key {key}"),
                    cause,
                })
        }
    }
}
