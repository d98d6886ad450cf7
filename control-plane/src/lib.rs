//! Switchyard's control plane: tenants, credentials, resources and versioned route tables in Postgres, behind a
//! REST API, with the snapshot gateways long-poll.
//!
//! The process is stateless over Postgres: any number of replicas may serve the same database. `run` is what the
//! binary calls and what end-to-end tests can call too.

pub mod api;
pub mod app;
pub mod auth;
pub mod config;
pub mod db;
pub mod error;
pub mod extract;
pub mod metrics;
pub mod openapi;
pub mod redact;
pub mod references;
pub mod revision;
pub mod route_schema;

use std::future::Future;

use anyhow::Context;
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgPoolOptions;

pub use app::{AppState, Settings, router};
pub use auth::Tokens;
pub use config::Config;

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

/// Migrates, then serves the API on `config.listen` until `shutdown` completes.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let tokens = Tokens::new(&config.admin_tokens, &config.gateway_tokens)?;
    let pool = connect(&config).await?;
    migrate(&pool).await?;
    let state = AppState::new(pool, tokens, config.settings())
        .await
        .context("starting the revision listener")?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    tracing::info!(address = %listener.local_addr()?, "control plane listening");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving")
}
