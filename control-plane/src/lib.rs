//! Switchyard's control plane: tenants, credentials, resources and versioned routes in Postgres, over REST.
//!
//! Gateways long-poll its snapshot of all of it. The process is stateless over Postgres: any number of replicas may
//! serve the same database. `run` is what the binary calls; `serve` is the same on a given pool and listener, for
//! tests. The modules are private: what the binaries and the tests use is re-exported here, everything else is
//! `pub(crate)`.

mod api;
mod auth;
mod config;
mod db;
mod error;
mod etag;
mod extract;
mod metrics;
mod migration;
mod openapi;
mod redact;
mod references;
mod revision;
mod route_schema;
mod snapshot_cache;
mod state;
mod watch;

use std::future::Future;

use anyhow::Context;
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgPoolOptions;

pub use api::{openapi_document, operations, router};
pub use auth::{Access, Tokens};
pub use config::{Command, Config};
pub use db::DbError;
pub use metrics::Metrics;
pub use openapi::Operation;
pub use state::{AppState, Settings};
pub use watch::Watch;

/// The control plane's schema, from the top-level `migrations/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Connects to the database named by `config` (the URL is never logged: it may hold a password).
pub async fn connect(config: &Config) -> anyhow::Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(config.max_db_connections)
        .connect(&config.database_url)
        .await
        .context("connecting to Postgres")
}

/// Applies pending migrations; a no-op when the schema is current.
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    MIGRATOR.run(pool).await.context("running migrations")
}

/// Connects, migrates, then serves the API on `config.listen` until `shutdown` completes.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let pool = connect(&config).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    serve(pool, listener, &config, shutdown).await
}

/// Migrates `pool`'s database, then serves the API on `listener` until `shutdown` completes. Waiting long-polls
/// are answered (304) as soon as shutdown starts, so they do not hold it up.
pub async fn serve(
    pool: PgPool,
    listener: tokio::net::TcpListener,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let tokens = Tokens::new(&config.admin_tokens, &config.gateway_tokens)?;
    migrate(&pool).await?;
    let state = AppState::new(pool, tokens, config.settings())
        .await
        .context("starting the revision listener")?;
    tracing::info!(address = %listener.local_addr()?, "control plane listening");
    tokio::spawn(migration::worker(state.clone()));
    let app = router(state.clone());
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            tracing::info!("shutting down");
            state.stop();
        })
        .await
        .context("serving")
}
