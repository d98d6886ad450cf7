//! The gateway process: shared state, worker threads, the accept loop, reloads and graceful shutdown.
//!
//! Each worker is a single-threaded runtime that owns its client connections and its own pipelined backend
//! connections, so a request never crosses threads. Measurements on 2-core machines favour one worker (the
//! kernel's network work needs the other core); more workers pay off on bigger machines.

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::session;
use crate::state::{Config, Gateway, RouteSource};
use crate::sync::Sync;
use crate::worker::Worker;

/// Runs the gateway until `shutdown` completes, then drains: stops accepting, lets sessions finish what they
/// have in flight (bounded by `shutdown_grace`), and returns.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let gateway = Arc::new(Gateway::new(config.clone()));
    crate::clients::start_clock().context("cannot start the clock thread")?;
    match &config.source {
        RouteSource::File(path) => gateway.load_routes(path)?,
        RouteSource::ControlPlane(control_plane) => {
            let sync = Arc::new(Sync::new(control_plane.clone())?);
            sync.bootstrap(&gateway).await;
            tokio::spawn(sync.run(Arc::clone(&gateway)));
        }
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    if let Some(admin) = config.admin_listen {
        let admin = TcpListener::bind(admin)
            .await
            .with_context(|| format!("cannot listen on {admin} (admin)"))?;
        tokio::spawn(crate::admin::serve(admin, Arc::clone(&gateway)));
    }
    tracing::info!(listen = %config.listen, workers = config.workers, "switchyard gateway serving");

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut senders = Vec::new();
    let mut threads = Vec::new();
    for index in 0..config.workers.max(1) {
        let (tx, rx) = mpsc::unbounded_channel();
        senders.push(tx);
        let worker_gateway = Arc::clone(&gateway);
        let shutdown = shutdown_rx.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("switchyard-worker-{index}"))
                .spawn(move || run_worker(worker_gateway, rx, shutdown))
                .context("cannot start a worker thread")?,
        );
    }

    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot install the SIGHUP handler")?;
    tokio::pin!(shutdown);
    let mut next_worker = 0;
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = hangup.recv() => match &config.source {
                // Reading and building the file is blocking work: off the runtime that accepts connections.
                RouteSource::File(path) => {
                    let (gateway, path) = (Arc::clone(&gateway), path.clone());
                    tokio::task::spawn_blocking(move || match gateway.load_routes(&path) {
                        Ok(()) => tracing::info!(generation = gateway.generation(), "routes reloaded"),
                        Err(e) => tracing::error!("routes not reloaded, the previous routes keep serving: {e:#}"),
                    });
                }
                RouteSource::ControlPlane(_) => tracing::info!("SIGHUP ignored: routes come from the control plane"),
            },
            accepted = listener.accept() => match accepted {
                // A socket that cannot be handed over is dropped (closed); the loop goes on.
                Ok((stream, peer)) => match stream.into_std() {
                    Ok(stream) => {
                        let _ = senders[next_worker].send(stream);
                        next_worker = (next_worker + 1) % senders.len();
                    }
                    Err(e) => tracing::warn!(client = %peer, "cannot hand an accepted connection to a worker: {e}"),
                },
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }

    tracing::info!("shutting down: no new connections, finishing commands in flight");
    drop(listener);
    drop(senders);
    let _ = shutdown_tx.send(true);
    tokio::task::spawn_blocking(move || {
        for thread in threads {
            let _ = thread.join();
        }
    })
    .await
    .context("worker join")?;
    tracing::info!("shut down");
    Ok(())
}

fn run_worker(
    gateway: Arc<Gateway>,
    mut streams: mpsc::UnboundedReceiver<std::net::TcpStream>,
    shutdown: watch::Receiver<bool>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start a worker runtime: {e}");
            return;
        }
    };
    let grace = gateway.config.shutdown_grace;
    let worker = Rc::new(Worker::new(gateway, shutdown));
    let local = tokio::task::LocalSet::new();
    local.spawn_local(relay_control(Rc::clone(&worker)));
    local.block_on(&runtime, async {
        let mut sessions = tokio::task::JoinSet::new();
        while let Some(stream) = streams.recv().await {
            sessions.spawn_local(session::serve(Rc::clone(&worker), stream));
            // Reap finished sessions so the set does not grow with every connection ever made.
            while sessions.try_join_next().is_some() {}
        }
        // Shutting down: sessions stop reading and finish what is in flight.
        let drained = tokio::time::timeout(grace, async {
            while sessions.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                remaining = sessions.len(),
                "shutdown grace period over, closing remaining clients"
            );
        }
    });
}

/// Passes snapshot changes and the shutdown on to the worker's sessions. One task per worker waits on the
/// gateway-wide channels; sessions wait on their own [`LocalSignal`](crate::signal::LocalSignal), which costs
/// nothing per request.
async fn relay_control(worker: Rc<Worker>) {
    let mut shutdown = worker.shutdown.clone();
    let mut changes = worker.gateway.subscribe();
    loop {
        let open = tokio::select! {
            changed = shutdown.changed() => changed.is_ok(),
            changed = changes.changed() => changed.is_ok(),
        };
        worker.control.notify_all();
        if !open {
            return; // the gateway is going away
        }
    }
}
