//! The API tokens of the control plane's own REST API: who may call what (`/v1/tokens`, `/v1/whoami`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a token may do. `admin`: everything; `operator`: everything but tokens; `viewer`: read everything (never
/// a secret); `tenant-owner`: read its tenants and manage their credentials (and the policies its token lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TokenRole {
    Admin,
    Operator,
    Viewer,
    TenantOwner,
}

impl TokenRole {
    pub const ALL: [TokenRole; 4] = [
        TokenRole::Admin,
        TokenRole::Operator,
        TokenRole::Viewer,
        TokenRole::TenantOwner,
    ];

    /// The role as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenRole::Admin => "admin",
            TokenRole::Operator => "operator",
            TokenRole::Viewer => "viewer",
            TokenRole::TenantOwner => "tenant-owner",
        }
    }

    pub fn parse(text: &str) -> Option<TokenRole> {
        TokenRole::ALL
            .into_iter()
            .find(|role| role.as_str() == text)
    }
}

/// A tenant policy field a `tenant-owner` token may be allowed to change on its tenants. Only policies that
/// narrow what the tenant's own clients may do, or how they are observed, are offered: a namespace, limits,
/// `allow_admin` or `disabled` reach other tenants' data or capacity and stay with operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OwnerPolicy {
    ReadOnly,
    Commands,
    IpAllow,
    IpDeny,
    BlockedKeys,
    Tracking,
    Scripts,
}

impl OwnerPolicy {
    pub const ALL: [OwnerPolicy; 7] = [
        OwnerPolicy::ReadOnly,
        OwnerPolicy::Commands,
        OwnerPolicy::IpAllow,
        OwnerPolicy::IpDeny,
        OwnerPolicy::BlockedKeys,
        OwnerPolicy::Tracking,
        OwnerPolicy::Scripts,
    ];

    /// The field's name, as in a tenant and its `PATCH`.
    pub fn as_str(self) -> &'static str {
        match self {
            OwnerPolicy::ReadOnly => "read_only",
            OwnerPolicy::Commands => "commands",
            OwnerPolicy::IpAllow => "ip_allow",
            OwnerPolicy::IpDeny => "ip_deny",
            OwnerPolicy::BlockedKeys => "blocked_keys",
            OwnerPolicy::Tracking => "tracking",
            OwnerPolicy::Scripts => "scripts",
        }
    }

    pub fn parse(text: &str) -> Option<OwnerPolicy> {
        OwnerPolicy::ALL.into_iter().find(|p| p.as_str() == text)
    }
}

/// Adds the fields that limit a `tenant-owner` token to a struct (a token's request, listing and `whoami`), so
/// that they read the same wherever a token is described.
macro_rules! with_token_scope {
    ($(#[$meta:meta])* pub struct $name:ident { $($fields:tt)* }) => {
        $(#[$meta])*
        pub struct $name {
            $($fields)*
            /// `tenant-owner` only: the tenants it owns, by name.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub tenants: Vec<String>,
            /// `tenant-owner` only: it also owns every tenant whose name starts with this.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub tenant_prefix: Option<String>,
            /// `tenant-owner` only: the policy fields it may change on its tenants (none by default).
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub policies: Vec<OwnerPolicy>,
        }
    };
}

with_token_scope! {
    /// `POST /v1/tokens`
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct TokenCreate {
        /// 1 to 64 of `A-Z a-z 0-9 _ . -`, starting with a letter or digit; unique among all tokens, revoked ones
        /// included, so the audit log's `token:<name>` always means one token.
        pub name: String,
        pub role: TokenRole,
    }
}

with_token_scope! {
    /// A token as listed: never its secret, nor the secret's digest.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct ApiToken {
        pub id: i64,
        pub name: String,
        pub role: TokenRole,
        /// The actor that created it (`admin:...` or `token:<name>`).
        pub created_by: String,
        pub created_at: String,
        /// When its secret was last replaced.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rotated_at: Option<String>,
        /// Until when the secret it had before its last rotation is still accepted (absent once that has passed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub previous_valid_until: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub revoked_at: Option<String>,
    }
}

/// The answer to `POST /v1/tokens` and `POST /v1/tokens/{id}/rotate`: the only time a token's secret is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenIssued {
    #[serde(flatten)]
    pub api_token: ApiToken,
    /// The bearer token (`syt_` and 64 hex digits).
    pub token: String,
}

/// `POST /v1/tokens/{id}/rotate`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRotate {
    /// How long the old secret stays valid beside the new one, in seconds: 0 to 86400, default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_secs: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenList {
    pub tokens: Vec<ApiToken>,
}

with_token_scope! {
    /// `GET /v1/whoami`: the token a request carries, and what it may do.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct WhoAmI {
        /// As the audit and access logs name it: `token:<name>`, or `admin:<8 hex>` for a start-up `--admin-token`.
        pub actor: String,
        pub role: TokenRole,
        /// Whether it is a start-up `--admin-token` rather than a token of `/v1/tokens`.
        pub bootstrap: bool,
    }
}
