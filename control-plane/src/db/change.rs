//! [`Change`]: the transaction a change runs in, which also bumps the revision, audits it, stamps its entries
//! in the snapshot change log and NOTIFYs.
//!
//! Either all of it happens or none of it does, and the global revision goes up by exactly one.

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::db::audit::{self, Actor, AuditRecord};
use crate::db::{DbResult, WithOperation, revision, snapshot};

/// One change in progress.
pub(crate) struct Change {
    tx: Transaction<'static, Postgres>,
    /// Taken early by [`Change::revision`] when the change must record it.
    revision: Option<i64>,
}

impl Change {
    pub(crate) async fn begin(pool: &PgPool) -> DbResult<Change> {
        Ok(Change {
            tx: pool.begin().await.during("starting a change")?,
            revision: None,
        })
    }

    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// The revision this change will commit as (bumped now, so the change can store it; the row lock then
    /// orders concurrent changes until commit).
    pub(crate) async fn revision(&mut self) -> DbResult<i64> {
        if let Some(revision) = self.revision {
            return Ok(revision);
        }
        let revision = revision::bump(&mut self.tx).await?;
        self.revision = Some(revision);
        Ok(revision)
    }

    /// Bumps the revision, records the change and commits; returns the new revision. The NOTIFY is delivered
    /// to listeners only at commit, so no poll can wake to a revision it cannot read yet.
    pub(crate) async fn commit(mut self, actor: &Actor, record: AuditRecord) -> DbResult<i64> {
        let revision = self.revision().await?;
        audit::insert(&mut self.tx, revision, actor, &record).await?;
        snapshot::stamp_changes(&mut self.tx, revision).await?;
        revision::notify(&mut self.tx, revision).await?;
        self.tx.commit().await.during("committing a change")?;
        Ok(revision)
    }
}
