//! `AppState`: what every request handler shares, and the shutdown and migration-worker signals.
//!
//! It holds the pool, the tokens, the revision watch, the metrics, the snapshot cache and the settings.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{Notify, watch};

use crate::auth::Tokens;
use crate::db::DbError;
use crate::db::audit::{Actor, AuditRecord};
use crate::db::change::Change;
use crate::error::ApiResult;
use crate::metrics::Metrics;
use crate::revision::RevisionWatch;
use crate::snapshot_cache::SnapshotCache;

/// How often the snapshot change log is pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// Tunables that are not credentials.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The longest a snapshot long-poll may wait, whatever `wait` asks.
    pub(crate) max_wait: Duration,
    /// A gateway not heard from for this long is no longer live.
    pub(crate) gateway_ttl: Duration,
    /// A gateway not heard from for this long is forgotten (leaves `GET /v1/gateways`).
    pub(crate) gateway_retention: Duration,
    /// How long the snapshot change log keeps a change (deltas reach back this far).
    pub(crate) delta_history: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            max_wait: Duration::from_secs(60),
            gateway_ttl: Duration::from_secs(30),
            gateway_retention: Duration::from_secs(3600),
            delta_history: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Wakes the migration worker when a transition starts a task.
#[derive(Default)]
pub(crate) struct Wakeup(Notify);

impl Wakeup {
    pub(crate) fn wake(&self) {
        self.0.notify_one();
    }

    /// Completes at the next [`Wakeup::wake`] (or at once, if one came since the last wait).
    pub(crate) async fn notified(&self) {
        self.0.notified().await;
    }
}

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub(crate) tokens: Arc<Tokens>,
    pub(crate) revisions: RevisionWatch,
    pub metrics: Arc<Metrics>,
    pub(crate) settings: Arc<Settings>,
    pub(crate) snapshots: Arc<SnapshotCache>,
    /// Wakes the migration worker when a step starts a background task.
    pub(crate) migrations: Arc<Wakeup>,
    /// Set when the process is shutting down, so waiting long-polls answer at once instead of holding the
    /// graceful shutdown for up to `max_wait`.
    stopping: Arc<watch::Sender<bool>>,
}

impl AppState {
    /// Starts following the revision (one LISTEN connection taken from `pool`).
    pub async fn new(
        pool: PgPool,
        tokens: Tokens,
        settings: Settings,
    ) -> Result<AppState, DbError> {
        let revisions = RevisionWatch::start(&pool).await?;
        Ok(AppState {
            pool,
            tokens: Arc::new(tokens),
            revisions,
            metrics: Arc::default(),
            settings: Arc::new(settings),
            snapshots: Arc::default(),
            migrations: Arc::default(),
            stopping: Arc::new(watch::channel(false).0),
        })
    }

    /// Tells waiting long-polls to answer now.
    pub fn stop(&self) {
        self.stopping.send_replace(true);
    }

    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Forgets the snapshot changes older than `Settings::delta_history`: a gateway that last synced before the
    /// newest revision forgotten gets the whole snapshot. Returns how many log rows went.
    pub async fn prune_snapshot_changes(&self) -> Result<u64, DbError> {
        crate::db::snapshot::prune_changes(&self.pool, self.settings.delta_history.as_secs_f64())
            .await
    }

    /// Prunes the snapshot change log at start and then every [`PRUNE_EVERY`] (every control-plane replica does
    /// it; the DELETE is idempotent).
    pub(crate) async fn forget_old_changes(self) {
        let mut every = tokio::time::interval(PRUNE_EVERY);
        loop {
            every.tick().await;
            match self.prune_snapshot_changes().await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "pruned the snapshot change log"),
                Err(e) => tracing::warn!("cannot prune the snapshot change log: {e}"),
            }
        }
    }

    /// Commits a change (revision bump, audit entry, NOTIFY) and wakes this process' polls at once. In a dry run
    /// (`crate::dry_run`) the change is rolled back instead, and the revision it would have had is returned.
    pub(crate) async fn commit(
        &self,
        mut change: Change,
        actor: &Actor,
        record: AuditRecord,
    ) -> ApiResult<i64> {
        if crate::dry_run::active() {
            // Dropping the transaction rolls it back, the revision bump with it.
            return Ok(change.revision().await?);
        }
        let (action, object) = (record.action, record.object.clone());
        let revision = change.commit(actor, record).await?;
        tracing::info!(
            action,
            object,
            revision,
            actor = actor.0,
            "change committed"
        );
        self.revisions.observe(revision);
        Ok(revision)
    }
}
