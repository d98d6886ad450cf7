//! The Postgres store: all SQL lives in this module's files, one per aggregate.
//!
//! Every change runs in a [`Change`]: one transaction that does the change, bumps the global revision by exactly
//! one, writes the audit entry and NOTIFYs the new revision, so either all of it happens or none of it does.

pub mod audit;
pub mod credentials;
pub mod gateways;
pub mod migrations;
pub mod resources;
pub mod revision;
pub mod routes;
pub mod snapshot;
pub mod tenants;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::auth::Actor;
use crate::redact;

/// The API's timestamp format: RFC 3339, UTC, milliseconds.
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// What the audit log records about one change.
pub struct AuditRecord {
    pub action: &'static str,
    pub tenant: Option<String>,
    pub object: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

impl AuditRecord {
    /// `before`/`after` are anything serializable; they are stored with backend passwords masked.
    pub fn new(
        action: &'static str,
        tenant: Option<&str>,
        object: String,
        before: Option<&impl serde::Serialize>,
        after: Option<&impl serde::Serialize>,
    ) -> AuditRecord {
        fn json(v: Option<&impl serde::Serialize>) -> Option<Value> {
            v.and_then(|v| serde_json::to_value(v).ok())
                .map(redact::value)
        }
        AuditRecord {
            action,
            tenant: tenant.map(str::to_string),
            object,
            before: json(before),
            after: json(after),
        }
    }
}

/// One change in progress.
pub struct Change {
    tx: Transaction<'static, Postgres>,
    /// Taken early by [`Change::revision`] when the change must record it.
    revision: Option<i64>,
}

impl Change {
    pub async fn begin(pool: &PgPool) -> sqlx::Result<Change> {
        Ok(Change {
            tx: pool.begin().await?,
            revision: None,
        })
    }

    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// The revision this change will commit as (bumped now, so the change can store it; the row lock then
    /// orders concurrent changes until commit).
    pub async fn revision(&mut self) -> sqlx::Result<i64> {
        if let Some(revision) = self.revision {
            return Ok(revision);
        }
        let revision = revision::bump(&mut self.tx).await?;
        self.revision = Some(revision);
        Ok(revision)
    }

    /// Bumps the revision, records the change and commits; returns the new revision. The NOTIFY is delivered
    /// to listeners only at commit, so no poll can wake to a revision it cannot read yet.
    pub async fn commit(mut self, actor: &Actor, record: AuditRecord) -> sqlx::Result<i64> {
        let revision = self.revision().await?;
        audit::insert(&mut self.tx, revision, actor, &record).await?;
        revision::notify(&mut self.tx, revision).await?;
        self.tx.commit().await?;
        Ok(revision)
    }
}
