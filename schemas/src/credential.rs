//! Credential digests: the only form in which a tenant's secret leaves the control plane.
//!
//! Secrets are high-entropy tokens issued by the control plane (or imported passwords of at least 16 characters),
//! so one SHA-256 is enough: a slow KDF would only tax every `AUTH` on the data path. The gateway hashes the
//! password a client sends with this same function and looks the digest up in a map.

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of the secret's bytes.
pub fn credential_digest(secret: &str) -> String {
    let hash = Sha256::digest(secret.as_bytes());
    let mut hex = String::with_capacity(hash.len() * 2);
    for byte in hash {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::credential_digest;

    #[test]
    fn is_lowercase_hex_sha256() {
        assert_eq!(
            credential_digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(credential_digest("").len(), 64);
    }
}
