//! `switchyard-ctl`: admin commands against a running control plane (today: watching a migration).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use switchyard_control_plane::Watch;
use switchyard_schemas::api::MigrationState;

#[derive(Parser)]
#[command(name = "switchyard-ctl", version, about)]
struct Cli {
    /// The control plane's base URL.
    #[arg(long, env = "SWITCHYARD_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// CA certificates (PEM) to trust for an https:// URL, instead of the system's trust store (which honours
    /// SSL_CERT_FILE).
    #[arg(long, env = "SWITCHYARD_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// An admin bearer token.
    #[arg(long, env = "SWITCHYARD_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Tenant migrations.
    Migrations {
        #[command(subcommand)]
        command: MigrationsCommand,
    },
}

#[derive(Subcommand)]
enum MigrationsCommand {
    /// Draws a migration's progress until its background task is done (or until `--until STATE`).
    Watch {
        tenant: String,
        id: i64,
        /// Seconds between polls.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Keep watching until the migration is in this state (e.g. `verified`).
        #[arg(long, value_parser = parse_state)]
        until: Option<MigrationState>,
    },
}

fn parse_state(name: &str) -> Result<MigrationState, String> {
    MigrationState::parse(name).ok_or_else(|| format!("no migration state '{name}'"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Migrations {
            command:
                MigrationsCommand::Watch {
                    tenant,
                    id,
                    interval,
                    until,
                },
        } => {
            Watch {
                url: cli.url,
                admin_token: cli.admin_token,
                ca_file: cli.ca_file,
                tenant,
                id,
                interval: Duration::from_secs_f64(interval.max(0.05)),
                until,
            }
            .run()
            .await?;
            Ok(())
        }
    }
}
