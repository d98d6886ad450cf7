//! Snapshots and deltas, read and serialized once, then shared by every poll that asks for the same one.
//!
//! One change wakes every waiting gateway at once; without sharing, each would read from Postgres and serialize
//! again.
//!
//! Full loads are also spaced: the next one starts no sooner than [`LOAD_SPACING`] times the last one's duration
//! after it. A full load reads every tenant, so while gateways follow a stream of changes (onboarding), loading
//! again at every change kept a core busy and REST writes slowed as tenants grew (523 writes/s without a gateway
//! following, 288 with one, at 10,000 tenants; `scripts/bench-onboard`). Spaced, snapshot work takes at most
//! 1 / (1 + LOAD_SPACING) of the time whatever the number of tenants, and a change waits at most that many
//! load durations longer to reach gateways; the changes committed meanwhile ride along in the next load.
//!
//! Deltas cost what the change costs, so they are not spaced, and they have their own lock: a gateway following
//! deltas never waits behind a full load another gateway asked for.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Bytes;
use sqlx::PgPool;
use switchyard_schemas::Snapshot;
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

impl CachedSnapshot {
    fn new(snapshot: &Snapshot) -> ApiResult<CachedSnapshot> {
        Ok(CachedSnapshot {
            revision: snapshot.revision,
            body: Bytes::from(
                serde_json::to_vec(snapshot)
                    .map_err(|e| ApiError::internal("serializing the snapshot", e))?,
            ),
        })
    }
}

/// How many load durations pass between the end of one full load and the start of the next.
const LOAD_SPACING: u32 = 4;

/// Most deltas kept at once (one per revision gateways ask from).
const MAX_DELTAS: usize = 1024;

#[derive(Default)]
pub(crate) struct SnapshotCache {
    // Async mutexes held across the spacing wait and the database read on purpose: polls woken by the same
    // changes queue here, and all but the first find the fresh snapshot when they get the lock.
    latest: Mutex<Latest>,
    deltas: Mutex<Deltas>,
}

#[derive(Default)]
struct Latest {
    snapshot: Option<CachedSnapshot>,
    /// When the next load may start.
    next_load: Option<Instant>,
}

/// Deltas up to the newest revision loaded, by (epoch, the revision they apply after).
#[derive(Default)]
struct Deltas {
    revision: i64,
    by_base: HashMap<(String, i64), CachedSnapshot>,
}

impl SnapshotCache {
    /// A snapshot at revision `at_least` or later.
    pub(crate) async fn full(
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
        let cached = CachedSnapshot::new(&snapshot)?;
        let spacing: Duration = started.elapsed() * LOAD_SPACING;
        latest.next_load = Some(Instant::now() + spacing);
        latest.snapshot = Some(cached.clone());
        Ok(cached)
    }

    /// What changed after revision `after` of `epoch`, up to revision `at_least` or later; `None` when only a
    /// full snapshot can tell (see `db::snapshot::load_delta`).
    pub(crate) async fn delta(
        &self,
        pool: &PgPool,
        metrics: &Metrics,
        epoch: &str,
        after: i64,
        at_least: i64,
    ) -> ApiResult<Option<CachedSnapshot>> {
        let key = (epoch.to_string(), after);
        let mut deltas = self.deltas.lock().await;
        if let Some(cached) = deltas.by_base.get(&key).filter(|c| c.revision >= at_least) {
            return Ok(Some(cached.clone()));
        }
        let Some(snapshot) = db::snapshot::load_delta(pool, epoch, after).await? else {
            return Ok(None);
        };
        metrics.deltas_loaded.fetch_add(1, Ordering::Relaxed);
        let cached = CachedSnapshot::new(&snapshot)?;
        // Deltas up to an older revision are never asked for again once a newer one is known.
        if cached.revision > deltas.revision || deltas.by_base.len() >= MAX_DELTAS {
            deltas.by_base.clear();
            deltas.revision = cached.revision;
        }
        if cached.revision == deltas.revision {
            deltas.by_base.insert(key, cached.clone());
        }
        Ok(Some(cached))
    }
}
