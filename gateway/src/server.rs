//! The gateway process: shared state, worker threads, the accept loop, reloads and graceful shutdown.
//!
//! Each worker is a single-threaded runtime that owns its client connections and its own pipelined backend
//! connections, so a request never crosses threads. Connections go to the workers in turn: no worker is busier by
//! design, and none needs to know how busy the others are. How many workers a host should run is in
//! docs/operations.md#workers.

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::session;
use crate::state::{Config, Gateway, RouteSource};
use crate::sync::Sync;
use crate::tls::ListenerTls;
use crate::worker::Worker;

/// Runs the gateway until `shutdown` completes, then drains: stops accepting, lets sessions finish what they
/// have in flight (bounded by `shutdown_grace`), and returns.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let listener_tls = match &config.tls {
        Some(tls) => Some(
            ListenerTls::load(tls.files.clone())
                .map_err(|e| anyhow::anyhow!("cannot set up the TLS listener: {e}"))?,
        ),
        None => None,
    };
    let gateway = Arc::new(Gateway::new(config.clone(), listener_tls));
    if let Some(dir) = &config.state_dir {
        gateway
            .repairs
            .keep_in(dir)
            .with_context(|| format!("--state-dir {}", dir.display()))?;
    }
    crate::clients::start_clock().context("cannot start the clock thread")?;
    let push = match &config.source {
        RouteSource::File(path) => {
            gateway.load_routes(path)?;
            None
        }
        RouteSource::ControlPlane(control_plane) => {
            let sync = Arc::new(Sync::new(
                control_plane.clone(),
                Arc::clone(&gateway.metrics),
            )?);
            sync.bootstrap(&gateway).await;
            let push = Arc::clone(&sync);
            tokio::spawn(sync.run(Arc::clone(&gateway)));
            Some(push)
        }
    };
    tokio::spawn(crate::report::run(Arc::clone(&gateway), push));
    crate::repair::start(Arc::clone(&gateway)).context("cannot start the repair thread")?;
    let listener = bind(config.listen).await?;
    let tls_listener = bind(config.tls.as_ref().map(|tls| tls.listen)).await?;
    if let Some(admin) = config.admin_listen {
        let admin = TcpListener::bind(admin)
            .await
            .with_context(|| format!("cannot listen on {admin} (admin)"))?;
        tokio::spawn(crate::admin::serve(admin, Arc::clone(&gateway)));
    }
    tracing::info!(
        listen = ?config.listen,
        tls_listen = ?config.tls.as_ref().map(|tls| tls.listen),
        workers = config.workers,
        "switchyard gateway serving"
    );

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
            // Reading files is blocking work: off the runtime that accepts connections.
            _ = hangup.recv() => {
                let gateway = Arc::clone(&gateway);
                tokio::task::spawn_blocking(move || reload(&gateway));
            }
            accepted = accept(listener.as_ref()) => {
                if hand_over(accepted, &senders[next_worker], false).await {
                    next_worker = (next_worker + 1) % senders.len();
                }
            }
            accepted = accept(tls_listener.as_ref()) => {
                if hand_over(accepted, &senders[next_worker], true).await {
                    next_worker = (next_worker + 1) % senders.len();
                }
            }
        }
    }

    tracing::info!("shutting down: no new connections, finishing commands in flight");
    drop(listener);
    drop(tls_listener);
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

/// A connection accepted, for a worker: its socket, and whether it came to the TLS listener.
type Accepted = (std::net::TcpStream, bool);

async fn bind(addr: Option<SocketAddr>) -> anyhow::Result<Option<TcpListener>> {
    match addr {
        None => Ok(None),
        Some(addr) => TcpListener::bind(addr)
            .await
            .map(Some)
            .with_context(|| format!("cannot listen on {addr}")),
    }
}

/// The next connection on `listener`; never, without one.
async fn accept(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// Hands an accepted connection to a worker; returns whether one was handed over. A socket that cannot be is
/// dropped (closed), and the accept loop goes on.
async fn hand_over(
    accepted: std::io::Result<(TcpStream, SocketAddr)>,
    worker: &mpsc::UnboundedSender<Accepted>,
    tls: bool,
) -> bool {
    match accepted {
        Ok((stream, peer)) => match stream.into_std() {
            Ok(stream) => worker.send((stream, tls)).is_ok(),
            Err(e) => {
                tracing::warn!(client = %peer, "cannot hand an accepted connection to a worker: {e}");
                false
            }
        },
        Err(e) => {
            // Out of file descriptors and the like: back off instead of spinning.
            tracing::warn!("accept failed: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            false
        }
    }
}

/// SIGHUP: the routes file (when routes come from one) and every TLS file are read again. What fails to load
/// is logged, and what was loaded before keeps serving.
fn reload(gateway: &Gateway) {
    match &gateway.config.source {
        RouteSource::File(path) => match gateway.load_routes(path) {
            Ok(()) => tracing::info!(generation = gateway.generation(), "routes reloaded"),
            Err(e) => {
                tracing::error!("routes not reloaded, the previous routes keep serving: {e:#}")
            }
        },
        RouteSource::ControlPlane(_) => {
            tracing::info!("routes come from the control plane: SIGHUP rereads TLS files only")
        }
    }
    for failed in crate::tls::reload(gateway.listener_tls.as_ref()) {
        tracing::error!("TLS files not reloaded, the previous ones stay in use: {failed}");
    }
}

fn run_worker(
    gateway: Arc<Gateway>,
    mut streams: mpsc::UnboundedReceiver<Accepted>,
    shutdown: watch::Receiver<bool>,
) {
    // With nothing left to run, the worker first lets the processes waiting for its CPU (the Redis it talks to,
    // on a small host) run, and only then waits for its sockets: by then the replies and requests of several
    // clients have arrived, and one pass serves them all, with one write per backend connection. A worker that
    // slept at once would wake for nearly every single event, and write to each backend a few requests at a
    // time. With no other process waiting the yield returns at once (docs/benchmarks.md, "Workers yield before
    // they sleep").
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(std::thread::yield_now)
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
    local.spawn_local(watch_resources(Rc::clone(&worker)));
    if let Some(redirected) = worker.client_tracking.redirected() {
        local.spawn_local(redirected);
    }
    local.block_on(&runtime, async {
        let mut sessions = tokio::task::JoinSet::new();
        while let Some((stream, tls)) = streams.recv().await {
            sessions.spawn_local(session::serve(Rc::clone(&worker), stream, tls));
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

/// Passes snapshot changes and the shutdown on to the worker's sessions, and opens the upstreams of each snapshot's
/// routes on this worker. One task per worker waits on the gateway-wide channels; sessions wait on their own
/// [`LocalSignal`](crate::signal::LocalSignal), which costs nothing per request.
async fn relay_control(worker: Rc<Worker>) {
    let mut shutdown = worker.shutdown.clone();
    let mut changes = worker.gateway.subscribe();
    loop {
        worker.pin_current_routes();
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

/// The worker's look at the upstreams of its routes every `reach::TICK`, for the reports (see `reach`), until the
/// worker goes.
async fn watch_resources(worker: Rc<Worker>) {
    let mut ticker = tokio::time::interval(crate::reach::TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let seen = worker.resources_seen();
        *worker.reach.lock().unwrap_or_else(|e| e.into_inner()) = seen;
    }
}
