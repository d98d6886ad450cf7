//! Certificates made at test time: a private CA per test, and server and client certificates it signs, written as
//! PEM files into a scratch directory that lives as long as the `Pki`.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use time::{Duration, OffsetDateTime};

use crate::allocate_port;
use crate::process::ScratchDir;

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The SHA-256 of the certificate's public key (hex): what names it in a credential.
    pub spki_sha256: String,
}

/// How long a certificate is valid, counted from now.
#[derive(Debug, Clone, Copy)]
pub enum Validity {
    /// A year back to a year ahead.
    Current,
    /// Ended yesterday.
    Expired,
    /// Ends in this many days.
    EndsInDays(i64),
}

/// A private CA.
pub struct Pki {
    name: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: ScratchDir,
}

impl Pki {
    /// A new CA named `name` (its subject's common name).
    pub fn new(name: &str) -> Pki {
        let dir = ScratchDir::new(&format!("pki-{name}"), allocate_port());
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("self-sign the CA");
        std::fs::write(dir.0.join(format!("{name}-ca.pem")), issuer.pem()).expect("write the CA");
        Pki {
            name: name.to_string(),
            issuer,
            dir,
        }
    }

    /// The CA's certificate (PEM), to trust.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.0.join(format!("{}-ca.pem", self.name))
    }

    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    /// A client for `url` (`rediss://...`) that trusts this CA and presents `certificate` when given.
    pub fn client(&self, url: &str, certificate: Option<&CertFiles>) -> redis::Client {
        let read = |path: &Path| std::fs::read(path).expect("read a PEM file");
        let certificates = redis::TlsCertificates {
            client_tls: certificate.map(|files| redis::ClientTlsConfig {
                client_cert: read(&files.cert),
                client_key: read(&files.key),
            }),
            root_cert: Some(read(&self.ca_file())),
        };
        redis::Client::build_with_tls(url, certificates).expect("a TLS client")
    }

    /// A certificate for a server named by `names` (DNS names or IP addresses), valid now.
    pub fn server(&self, file: &str, names: &[&str]) -> CertFiles {
        self.issue(file, names, Validity::Current)
    }

    /// A certificate for `names` valid over `validity`, usable by servers and clients alike; `names[0]` is also
    /// its common name. Written as `{file}.pem` and `{file}.key`.
    pub fn issue(&self, file: &str, names: &[&str], validity: Validity) -> CertFiles {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("certificate params");
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, *first);
        }
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let now = OffsetDateTime::now_utc();
        let day = Duration::days(1);
        (params.not_before, params.not_after) = match validity {
            Validity::Current => (now - day * 365, now + day * 365),
            Validity::Expired => (now - day * 30, now - day),
            Validity::EndsInDays(days) => (now - day, now + Duration::days(days)),
        };
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
        let digest = switchyard_schemas::certificate_digest(&spki);
        let files = CertFiles {
            cert: self.dir.0.join(format!("{file}.pem")),
            key: self.dir.0.join(format!("{file}.key")),
            spki_sha256: digest
                .strip_prefix(switchyard_schemas::credential::CERTIFICATE_PREFIX)
                .unwrap_or(&digest)
                .to_string(),
        };
        std::fs::write(&files.cert, cert.pem()).expect("write certificate");
        std::fs::write(&files.key, key.serialize_pem()).expect("write key");
        files
    }
}
