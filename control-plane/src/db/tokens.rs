//! API tokens: digests only, with the previous digest of a rotation and until when it is still accepted.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use switchyard_schemas::api::{ApiToken, OwnerPolicy, TokenRole};

use crate::db::{DbResult, WithOperation, timestamp};

pub(crate) struct TokenRow {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) role: String,
    pub(crate) tenants: Vec<String>,
    pub(crate) tenant_prefix: Option<String>,
    pub(crate) policies: Vec<String>,
    pub(crate) created_by: String,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) rotated_at: Option<DateTime<Utc>>,
    pub(crate) previous_valid_until: Option<DateTime<Utc>>,
    pub(crate) revoked_at: Option<DateTime<Utc>>,
}

impl TokenRow {
    /// The role; the database's check constraint admits no other word, so an unknown one reads as the least.
    pub(crate) fn role(&self) -> TokenRole {
        TokenRole::parse(&self.role).unwrap_or(TokenRole::Viewer)
    }

    pub(crate) fn policies(&self) -> Vec<OwnerPolicy> {
        self.policies
            .iter()
            .filter_map(|p| OwnerPolicy::parse(p))
            .collect()
    }

    pub(crate) fn to_api(&self) -> ApiToken {
        ApiToken {
            id: self.id,
            name: self.name.clone(),
            role: self.role(),
            tenants: self.tenants.clone(),
            tenant_prefix: self.tenant_prefix.clone(),
            policies: self.policies(),
            created_by: self.created_by.clone(),
            created_at: timestamp(self.created_at),
            rotated_at: self.rotated_at.map(timestamp),
            previous_valid_until: self
                .previous_valid_until
                .filter(|until| *until > Utc::now())
                .map(timestamp),
            revoked_at: self.revoked_at.map(timestamp),
        }
    }
}

/// What a new token is made of.
pub(crate) struct NewToken<'a> {
    pub(crate) name: &'a str,
    pub(crate) role: TokenRole,
    pub(crate) tenants: &'a [String],
    pub(crate) tenant_prefix: Option<&'a str>,
    pub(crate) policies: Vec<String>,
    pub(crate) digest: &'a str,
    pub(crate) created_by: &'a str,
}

pub(crate) async fn insert(conn: &mut PgConnection, new: &NewToken<'_>) -> DbResult<TokenRow> {
    sqlx::query_as!(
        TokenRow,
        "INSERT INTO api_tokens (name, role, tenants, tenant_prefix, policies, digest, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         RETURNING id, name, role, tenants, tenant_prefix, policies, created_by, created_at, rotated_at,
                   previous_valid_until, revoked_at",
        new.name,
        new.role.as_str(),
        new.tenants,
        new.tenant_prefix,
        &new.policies,
        new.digest,
        new.created_by,
    )
    .fetch_one(conn)
    .await
    .during("inserting a token")
}

pub(crate) async fn list(db: impl PgExecutor<'_>) -> DbResult<Vec<TokenRow>> {
    sqlx::query_as!(
        TokenRow,
        "SELECT id, name, role, tenants, tenant_prefix, policies, created_by, created_at, rotated_at,
                previous_valid_until, revoked_at
         FROM api_tokens ORDER BY id",
    )
    .fetch_all(db)
    .await
    .during("listing tokens")
}

/// The token that `digest` is the current secret of, or the previous one still within its overlap; revoked
/// tokens are none. Asked on every request, so a change is effective on every replica at once.
pub(crate) async fn valid(db: impl PgExecutor<'_>, digest: &str) -> DbResult<Option<TokenRow>> {
    sqlx::query_as!(
        TokenRow,
        "SELECT id, name, role, tenants, tenant_prefix, policies, created_by, created_at, rotated_at,
                previous_valid_until, revoked_at
         FROM api_tokens
         WHERE revoked_at IS NULL
           AND (digest = $1 OR (previous_digest = $1 AND previous_valid_until > now()))",
        digest,
    )
    .fetch_optional(db)
    .await
    .during("looking up a token")
}

/// Gives an active token the secret of digest `digest`; the one it had stays valid for `overlap_secs` more
/// (a previous secret still in its overlap is dropped at once). `None` when there is no such active token.
pub(crate) async fn rotate(
    conn: &mut PgConnection,
    id: i64,
    digest: &str,
    overlap_secs: f64,
) -> DbResult<Option<TokenRow>> {
    sqlx::query_as!(
        TokenRow,
        "UPDATE api_tokens
         SET previous_digest = digest, previous_valid_until = now() + make_interval(secs => $3),
             digest = $2, rotated_at = now()
         WHERE id = $1 AND revoked_at IS NULL
         RETURNING id, name, role, tenants, tenant_prefix, policies, created_by, created_at, rotated_at,
                   previous_valid_until, revoked_at",
        id,
        digest,
        overlap_secs,
    )
    .fetch_optional(conn)
    .await
    .during("rotating a token")
}

/// Revokes an active token, both its secrets at once; `None` when there is no such active token.
pub(crate) async fn revoke(conn: &mut PgConnection, id: i64) -> DbResult<Option<TokenRow>> {
    sqlx::query_as!(
        TokenRow,
        "UPDATE api_tokens SET revoked_at = now(), previous_digest = NULL, previous_valid_until = NULL
         WHERE id = $1 AND revoked_at IS NULL
         RETURNING id, name, role, tenants, tenant_prefix, policies, created_by, created_at, rotated_at,
                   previous_valid_until, revoked_at",
        id,
    )
    .fetch_optional(conn)
    .await
    .during("revoking a token")
}
