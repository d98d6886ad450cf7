//! Credential digests: the only form in which a tenant's secret leaves the control plane.
//!
//! Secrets are high-entropy tokens issued by the control plane (or imported passwords of at least 16 characters),
//! so one SHA-256 is enough: a slow KDF would only tax every `AUTH` on the data path. The gateway hashes the
//! password a client sends with this same function and looks the digest up in a map.
//!
//! A client certificate is a credential too (mutual TLS): named by the SHA-256 of its public key (its
//! `subjectPublicKeyInfo`, the pin `curl --pinnedpubkey` and HPKP use), which stays the same when a certificate is
//! renewed with the same key. Its digest is that pin behind a [`CERTIFICATE_PREFIX`], so that no password can
//! ever hash to it: knowing a tenant's public key (which is public) gives no way in by `AUTH`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of the secret's bytes.
pub fn credential_digest(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

/// What a certificate credential's digest starts with.
pub const CERTIFICATE_PREFIX: &str = "spki-sha256:";

/// A client certificate that authenticates a tenant over mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientCertificate {
    /// SHA-256 of the certificate's subjectPublicKeyInfo, 64 hex digits (`openssl x509 -in cert.pem -pubkey
    /// -noout | openssl pkey -pubin -outform der | sha256sum`).
    pub spki_sha256: String,
}

impl ClientCertificate {
    /// The credential digest of this certificate, or why the pin is not one.
    pub fn digest(&self) -> Result<String, &'static str> {
        let pin = self.spki_sha256.to_ascii_lowercase();
        if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("must be a SHA-256 in hex: 64 digits 0-9 and a-f");
        }
        Ok(format!("{CERTIFICATE_PREFIX}{pin}"))
    }
}

/// The credential digest of a certificate whose `subjectPublicKeyInfo` (DER) is `spki`.
pub fn certificate_digest(spki: &[u8]) -> String {
    format!("{CERTIFICATE_PREFIX}{}", hex(&Sha256::digest(spki)))
}

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_lowercase_hex_sha256() {
        assert_eq!(
            credential_digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(credential_digest("").len(), 64);
    }

    #[test]
    fn a_certificate_pin_is_its_digest_and_never_a_passwords() {
        let pin = "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD";
        let from_pin = ClientCertificate {
            spki_sha256: pin.to_string(),
        }
        .digest();
        assert_eq!(from_pin.as_deref(), Ok(&*certificate_digest(b"abc")));
        assert_ne!(certificate_digest(b"abc"), credential_digest("abc"));
        for bad in ["", "xyz", &pin[1..]] {
            let certificate = ClientCertificate {
                spki_sha256: bad.to_string(),
            };
            assert!(certificate.digest().is_err(), "{bad}");
        }
    }
}
