//! A tenant's credentials as the API shows them: never a secret, except once in the answer that issues it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::CredentialLastUse;
use crate::ClientCertificate;

/// `POST /v1/tenants/{tenant}/credentials`: without `password` or `client_certificate` the control plane issues
/// a random secret.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialCreate {
    #[serde(default)]
    pub description: String,
    /// An existing password to import (at least 16 characters), so clients of an old proxy keep working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// A client certificate (by its public key) that authenticates clients over mutual TLS, without AUTH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertificate>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Credential {
    pub id: i64,
    pub description: String,
    /// Whether the secret was imported rather than issued by the control plane (a client certificate is).
    pub imported: bool,
    /// For a client certificate credential: which certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertificate>,
    pub created_at: String,
    pub revoked_at: Option<String>,
    /// Client connections open with it, every gateway's summed (in listings; absent elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<i64>,
    /// Its last successful AUTH seen by a gateway, within the usage window (in listings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used: Option<CredentialLastUse>,
}

/// The answer to `POST .../credentials`: the only time an issued secret is ever shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialIssued {
    #[serde(flatten)]
    pub credential: Credential,
    /// The issued secret (absent for an imported password, which the caller already knows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialList {
    pub credentials: Vec<Credential>,
}
