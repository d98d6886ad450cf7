//! Tenant credentials: digests only.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use switchyard_schemas::ClientCertificate;
use switchyard_schemas::api::Credential;
use switchyard_schemas::credential::CERTIFICATE_PREFIX;

use crate::db::{DbResult, WithOperation, timestamp};

pub(crate) struct CredentialRow {
    pub(crate) id: i64,
    pub(crate) digest: String,
    pub(crate) description: String,
    pub(crate) imported: bool,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) revoked_at: Option<DateTime<Utc>>,
}

impl From<CredentialRow> for Credential {
    fn from(row: CredentialRow) -> Credential {
        Credential {
            id: row.id,
            description: row.description,
            imported: row.imported,
            client_certificate: row.digest.strip_prefix(CERTIFICATE_PREFIX).map(|pin| {
                ClientCertificate {
                    spki_sha256: pin.to_string(),
                }
            }),
            created_at: timestamp(row.created_at),
            revoked_at: row.revoked_at.map(timestamp),
            connections: None,
            last_used: None,
        }
    }
}

pub(crate) async fn insert(
    conn: &mut PgConnection,
    tenant_id: i64,
    digest: &str,
    description: &str,
    imported: bool,
) -> DbResult<CredentialRow> {
    sqlx::query_as!(
        CredentialRow,
        "INSERT INTO credentials (tenant_id, digest, description, imported) VALUES ($1, $2, $3, $4)
         RETURNING id, digest, description, imported, created_at, revoked_at",
        tenant_id,
        digest,
        description,
        imported,
    )
    .fetch_one(conn)
    .await
    .during("inserting a credential")
}

pub(crate) async fn list(db: impl PgExecutor<'_>, tenant_id: i64) -> DbResult<Vec<CredentialRow>> {
    sqlx::query_as!(
        CredentialRow,
        "SELECT id, digest, description, imported, created_at, revoked_at FROM credentials
         WHERE tenant_id = $1 ORDER BY id",
        tenant_id,
    )
    .fetch_all(db)
    .await
    .during("listing credentials")
}

/// Revokes an active credential; `None` when there is no such active credential.
pub(crate) async fn revoke(
    conn: &mut PgConnection,
    tenant_id: i64,
    id: i64,
) -> DbResult<Option<CredentialRow>> {
    sqlx::query_as!(
        CredentialRow,
        "UPDATE credentials SET revoked_at = now()
         WHERE id = $1 AND tenant_id = $2 AND revoked_at IS NULL
         RETURNING id, digest, description, imported, created_at, revoked_at",
        id,
        tenant_id,
    )
    .fetch_optional(conn)
    .await
    .during("revoking a credential")
}
