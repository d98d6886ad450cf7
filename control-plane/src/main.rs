//! `switchyard-control-plane`: parse the configuration, set up logging, serve (or only migrate).

use clap::Parser;
use switchyard_control_plane::{Command, Config};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    switchyard_runtime::telemetry::init_logging(config.log_format);
    match config.command.unwrap_or(Command::Serve) {
        Command::Migrate => {
            let pool = switchyard_control_plane::connect(&config).await?;
            switchyard_control_plane::migrate(&pool).await?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Serve => switchyard_control_plane::run(config, shutdown_signal()).await,
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => return ctrl_c.await.unwrap_or(()),
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
