//! Command line and environment configuration.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use switchyard_runtime::telemetry::LogFormat;

use crate::state::Settings;

/// No `Debug`: it holds the tokens and the database URL (with its password), which must never reach a log.
#[derive(Clone, Parser)]
#[command(name = "switchyard-control-plane", version, about)]
pub struct Config {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Address to serve the REST API on.
    #[arg(long, env = "SWITCHYARD_LISTEN", default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,
    /// Serve HTTPS with this PEM certificate chain (the leaf first), with --tls-key; reloaded on SIGHUP. Without
    /// it, plain HTTP (for a proxy that terminates TLS, or a private network).
    #[arg(long, env = "SWITCHYARD_TLS_CERT", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, env = "SWITCHYARD_TLS_KEY", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Postgres URL, e.g. postgres://user:password@host:5432/switchyard.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: String,
    /// Admin bearer tokens (repeat the flag, or separate with commas); at least one, 16+ characters each.
    #[arg(
        long = "admin-token",
        env = "SWITCHYARD_ADMIN_TOKEN",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub(crate) admin_tokens: Vec<String>,
    /// Gateway bearer tokens (repeat the flag, or separate with commas), 16+ characters each.
    #[arg(
        long = "gateway-token",
        env = "SWITCHYARD_GATEWAY_TOKEN",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub(crate) gateway_tokens: Vec<String>,
    /// The longest a snapshot long-poll waits, in seconds.
    #[arg(long, env = "SWITCHYARD_MAX_WAIT_SECS", default_value_t = 60)]
    pub(crate) max_wait_secs: u64,
    /// A gateway not heard from for this many seconds no longer counts as live.
    #[arg(long, env = "SWITCHYARD_GATEWAY_TTL_SECS", default_value_t = 30)]
    pub(crate) gateway_ttl_secs: u64,
    /// A gateway not heard from for this many seconds is forgotten: it leaves `GET /v1/gateways` (a running one
    /// comes back with its next heartbeat).
    #[arg(
        long,
        env = "SWITCHYARD_GATEWAY_RETENTION_SECS",
        default_value_t = 3600
    )]
    pub(crate) gateway_retention_secs: u64,
    /// How long the snapshot change log keeps a change, in seconds: a gateway that was away longer gets the whole
    /// snapshot instead of a delta when it comes back.
    #[arg(long, env = "SWITCHYARD_DELTA_HISTORY_SECS", default_value_t = 7 * 24 * 3600)]
    pub(crate) delta_history_secs: u64,
    /// Database connections in the pool (one of them is held by the revision listener).
    #[arg(long, env = "SWITCHYARD_MAX_DB_CONNECTIONS", default_value_t = 10)]
    pub(crate) max_db_connections: u32,
    /// How log lines are written: text (colour only on a terminal) or json (one object per line).
    #[arg(long, env = "SWITCHYARD_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Serve the API (the default).
    Serve,
    /// Apply pending migrations and exit.
    Migrate,
}

impl Config {
    /// The HTTPS certificate and key files, when the API is served over TLS.
    pub(crate) fn tls(&self) -> Option<(&Path, &Path)> {
        Some((self.tls_cert.as_deref()?, self.tls_key.as_deref()?))
    }

    pub(crate) fn settings(&self) -> Settings {
        Settings {
            max_wait: Duration::from_secs(self.max_wait_secs),
            gateway_ttl: Duration::from_secs(self.gateway_ttl_secs),
            gateway_retention: Duration::from_secs(self.gateway_retention_secs),
            delta_history: Duration::from_secs(self.delta_history_secs),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Config;

    /// A service manager or container passes settings (and secrets: never on a command line, where `ps` shows
    /// them) through the environment, so every flag needs a variable.
    #[test]
    fn every_flag_has_an_environment_variable() {
        let command = Config::command();
        let missing: Vec<_> = command
            .get_arguments()
            .filter(|arg| !matches!(arg.get_id().as_str(), "help" | "version"))
            .filter(|arg| arg.get_env().is_none())
            .map(|arg| arg.get_id().to_string())
            .collect();
        assert!(missing.is_empty(), "flags without a variable: {missing:?}");
    }
}
