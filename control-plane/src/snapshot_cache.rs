//! The latest snapshot, read and serialized once, then shared by every poll that asks for it.
//!
//! One change wakes every waiting gateway at once; without sharing, each would read all tenants from Postgres
//! and serialize them again.

use std::sync::atomic::Ordering;

use axum::body::Bytes;
use sqlx::PgPool;
use tokio::sync::Mutex;

use crate::db;
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;

#[derive(Clone)]
pub(crate) struct CachedSnapshot {
    pub(crate) revision: i64,
    /// The snapshot as JSON.
    pub(crate) body: Bytes,
}

#[derive(Default)]
pub(crate) struct SnapshotCache {
    // An async mutex held across the database read on purpose: polls woken by the same change queue here, and
    // all but the first find the fresh snapshot when they get the lock.
    latest: Mutex<Option<CachedSnapshot>>,
}

impl SnapshotCache {
    /// A snapshot at revision `at_least` or later.
    pub(crate) async fn get(
        &self,
        pool: &PgPool,
        metrics: &Metrics,
        at_least: i64,
    ) -> ApiResult<CachedSnapshot> {
        let mut latest = self.latest.lock().await;
        if let Some(cached) = latest.as_ref().filter(|c| c.revision >= at_least) {
            return Ok(cached.clone());
        }
        let snapshot = db::snapshot::load(pool).await?;
        metrics.snapshots_loaded.fetch_add(1, Ordering::Relaxed);
        let cached = CachedSnapshot {
            revision: snapshot.revision,
            body: Bytes::from(
                serde_json::to_vec(&snapshot)
                    .map_err(|e| ApiError::internal("serializing the snapshot", e))?,
            ),
        };
        *latest = Some(cached.clone());
        Ok(cached)
    }
}
