//! The latest snapshot, read and serialized once, then shared by every poll that asks for it.
//!
//! One change wakes every waiting gateway at once; without sharing, each would read all tenants from Postgres
//! and serialize them again.
//!
//! Loads are also spaced: the next one starts no sooner than [`LOAD_SPACING`] times the last one's duration
//! after it. A load reads every tenant, so while gateways follow a stream of changes (onboarding), loading again
//! at every change kept a core busy and REST writes slowed as tenants grew (523 writes/s without a gateway
//! following, 288 with one, at 10,000 tenants; `scripts/bench-onboard`). Spaced, snapshot work takes at most
//! 1 / (1 + LOAD_SPACING) of the time whatever the number of tenants, and a change waits at most that many
//! load durations longer to reach gateways; the changes committed meanwhile ride along in the next load.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Bytes;
use sqlx::PgPool;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::db;
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;

#[derive(Clone)]
pub(crate) struct CachedSnapshot {
    pub(crate) revision: i64,
    /// The snapshot as JSON.
    pub(crate) body: Bytes,
}

/// How many load durations pass between the end of one load and the start of the next.
const LOAD_SPACING: u32 = 4;

#[derive(Default)]
pub(crate) struct SnapshotCache {
    // An async mutex held across the spacing wait and the database read on purpose: polls woken by the same
    // changes queue here, and all but the first find the fresh snapshot when they get the lock.
    latest: Mutex<Latest>,
}

#[derive(Default)]
struct Latest {
    snapshot: Option<CachedSnapshot>,
    /// When the next load may start.
    next_load: Option<Instant>,
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
        if let Some(cached) = latest.snapshot.as_ref().filter(|c| c.revision >= at_least) {
            return Ok(cached.clone());
        }
        if let Some(next_load) = latest.next_load {
            tokio::time::sleep_until(next_load).await;
        }
        let started = Instant::now();
        let snapshot = db::snapshot::load(pool).await?;
        metrics.snapshots_loaded.fetch_add(1, Ordering::Relaxed);
        let cached = CachedSnapshot {
            revision: snapshot.revision,
            body: Bytes::from(
                serde_json::to_vec(&snapshot)
                    .map_err(|e| ApiError::internal("serializing the snapshot", e))?,
            ),
        };
        let spacing: Duration = started.elapsed() * LOAD_SPACING;
        latest.next_load = Some(Instant::now() + spacing);
        latest.snapshot = Some(cached.clone());
        Ok(cached)
    }
}
