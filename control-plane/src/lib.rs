//! Switchyard's control plane: tenants, credentials, resources and versioned routes in Postgres, over REST.
//!
//! Gateways long-poll its snapshot of all of it. The process is stateless over Postgres: any number of replicas may
//! serve the same database. `run` is what the binary calls; `serve` is the same on a given pool and listener, for
//! tests. The modules are private: what the binaries and the tests use is re-exported here, everything else is
//! `pub(crate)`.

mod access_log;
mod api;
mod auth;
mod config;
mod console;
mod databases;
mod db;
mod dry_run;
mod error;
mod etag;
mod extract;
mod fleet_limits;
mod guard;
mod metrics;
mod migration;
mod openapi;
mod redact;
mod references;
mod revision;
mod route_schema;
mod snapshot_cache;
mod state;
mod tls;

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

pub use api::{openapi_document, operations, router};
pub use auth::{Access, Tokens};
pub use config::{Command, Config};
pub use db::DbError;
pub use metrics::Metrics;
pub use openapi::Operation;
pub use state::{AppState, Settings};

/// The control plane's schema, from the top-level `migrations/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Connects to the database named by `config`. The URL is never logged (it may hold a password); errors name the
/// server by host and port, and give sqlx's reason (a TLS one among them: `sslmode`, `sslrootcert`).
pub async fn connect(config: &Config) -> anyhow::Result<PgPool> {
    let options: PgConnectOptions = config
        .database_url
        .parse()
        .context("the database URL is not a valid Postgres URL")?;
    let server = format!("{}:{}", options.get_host(), options.get_port());
    PgPoolOptions::new()
        .max_connections(config.max_db_connections)
        .connect_with(options)
        .await
        .with_context(|| format!("connecting to Postgres at {server}"))
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

/// Migrates `pool`'s database, then serves the API on `listener` (HTTPS when `config` names a certificate) until
/// `shutdown` completes. Waiting long-polls are answered (304) as soon as shutdown starts, so they do not hold it
/// up.
pub async fn serve(
    pool: PgPool,
    listener: tokio::net::TcpListener,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let tokens = Tokens::new(&config.admin_tokens, &config.gateway_tokens)?;
    migrate(&pool).await?;
    databases::record_stored(&pool)
        .await
        .context("recording the databases of stored routes")?;
    let state = AppState::new(pool, tokens, config.settings())
        .await
        .context("starting the revision listener")?;
    match config.tls() {
        None => listen(listener, state, shutdown, "HTTP").await,
        Some((cert, key)) => {
            let certificate = tls::ServerCertificate::load(cert, key, Arc::clone(&state.metrics))
                .context("loading the HTTPS certificate")?;
            let listener = tls::TlsListener::new(listener, certificate.server_config()?)?;
            tokio::spawn(certificate.reload_on_sighup());
            listen(listener, state, shutdown, "HTTPS").await
        }
    }
}

/// Serves the API on `listener` and runs the migration worker, until `shutdown` completes.
async fn listen<L>(
    listener: L,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
    scheme: &str,
) -> anyhow::Result<()>
where
    L: axum::serve::Listener<Addr = std::net::SocketAddr>,
{
    tracing::info!(address = %listener.local_addr()?, "control plane listening ({scheme})");
    tokio::spawn(migration::worker(
        state.clone(),
        api::migrations::conclude_rollback,
    ));
    tokio::spawn(state.clone().forget_old_changes());
    axum::serve(listener, router(state.clone()))
        .with_graceful_shutdown(async move {
            shutdown.await;
            tracing::info!("shutting down");
            state.stop();
        })
        .await
        .context("serving")
}
