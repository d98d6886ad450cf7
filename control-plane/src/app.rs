//! The application state shared by every request, and the router built from the endpoint table.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::middleware::from_fn_with_state;
use sqlx::PgPool;
use tokio::sync::{Notify, watch};

use crate::api;
use crate::auth::{self, Access, Actor, Tokens};
use crate::db::{AuditRecord, Change};
use crate::error::{ApiError, ApiResult};
use crate::metrics::{self, Metrics};
use crate::revision::RevisionWatch;
use crate::snapshot_cache::SnapshotCache;

/// Tunables that are not credentials.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The longest a snapshot long-poll may wait, whatever `wait` asks.
    pub max_wait: Duration,
    /// A gateway not heard from for this long is no longer live.
    pub gateway_ttl: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            max_wait: Duration::from_secs(60),
            gateway_ttl: Duration::from_secs(30),
        }
    }
}

/// Wakes the migration worker when a transition starts a task.
#[derive(Default)]
pub struct Wakeup(Notify);

impl Wakeup {
    pub fn wake(&self) {
        self.0.notify_one();
    }

    /// Completes at the next [`Wakeup::wake`] (or at once, if one came since the last wait).
    pub async fn notified(&self) {
        self.0.notified().await;
    }
}

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub tokens: Arc<Tokens>,
    pub revisions: RevisionWatch,
    pub metrics: Arc<Metrics>,
    pub settings: Arc<Settings>,
    pub snapshots: Arc<SnapshotCache>,
    /// Wakes the migration worker when a step starts a background task.
    pub migrations: Arc<Wakeup>,
    /// Set when the process is shutting down, so waiting long-polls answer at once instead of holding the
    /// graceful shutdown for up to `max_wait`.
    stopping: Arc<watch::Sender<bool>>,
}

impl AppState {
    /// Starts following the revision (one LISTEN connection taken from `pool`).
    pub async fn new(pool: PgPool, tokens: Tokens, settings: Settings) -> sqlx::Result<AppState> {
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

    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Commits a change (revision bump, audit entry, NOTIFY) and wakes this process' polls at once.
    pub async fn commit(
        &self,
        change: Change,
        actor: &Actor,
        record: AuditRecord,
    ) -> ApiResult<i64> {
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

/// Every endpoint, with its access rule applied.
pub fn router(state: AppState) -> Router {
    let mut admin = Router::new();
    let mut gateway = Router::new();
    let mut public = Router::new();
    for operation in api::operations() {
        let group = match operation.access {
            Access::Admin => &mut admin,
            Access::Gateway => &mut gateway,
            Access::Public => &mut public,
        };
        *group = std::mem::take(group).route(operation.path, operation.handler);
    }
    let admin = admin.route_layer(from_fn_with_state(
        Arc::clone(&state.tokens),
        auth::require_admin,
    ));
    let gateway = gateway.route_layer(from_fn_with_state(
        Arc::clone(&state.tokens),
        auth::require_gateway,
    ));
    public
        .merge(admin)
        .merge(gateway)
        .fallback(not_found)
        .layer(from_fn_with_state(
            Arc::clone(&state.metrics),
            metrics::count,
        ))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}
