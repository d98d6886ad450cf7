//! The gateway process: shared state, worker threads, the accept loop, reloads and graceful shutdown.
//!
//! Each worker is a single-threaded runtime that owns its client connections and its own pipelined backend
//! connections, so a request never crosses threads. Measurements on 2-core machines favour one worker (the
//! kernel's network work needs the other core); more workers pay off on bigger machines.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use arc_swap::ArcSwap;
use switchyard_schemas::RoutesFile;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::admission::Admission;
use crate::backend::{BackendPool, ConnectionSettings, ResourceSpec, Upstream};
use crate::clients::Clients;
use crate::metrics::Metrics;
use crate::reply::DetachedWrites;
use crate::resp::Limits;
use crate::route::sync::{ControlPlaneConfig, Sync};
use crate::route::{Snapshot, Tenant};
use crate::session;
use crate::signal::LocalBroadcast;

/// Everything `run` needs; the binary fills it from flags and environment.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub admin_listen: Option<SocketAddr>,
    /// Where tenants and routes come from.
    pub source: RouteSource,
    pub workers: usize,
    pub backend_connections: usize,
    pub connect_timeout: Duration,
    pub command_timeout: Duration,
    /// Most authenticated client connections at once.
    pub max_clients: usize,
    /// Most connections at once that have not authenticated yet (counted apart from `max_clients`).
    pub max_unauthenticated_clients: usize,
    /// How long a connection may stay without authenticating before it is closed.
    pub auth_timeout: Duration,
    /// Most dedicated backend connections (blocking commands, transactions, subscriptions) one tenant's clients
    /// may hold at once, per gateway.
    pub max_dedicated_connections: usize,
    pub shutdown_grace: Duration,
    pub limits: Limits,
}

/// Where a gateway's tenants and routes come from.
#[derive(Debug, Clone)]
pub enum RouteSource {
    /// A local routes file, reloaded on SIGHUP.
    File(PathBuf),
    /// The control plane's snapshots, long-polled.
    ControlPlane(ControlPlaneConfig),
}

/// State shared by every worker.
pub struct Gateway {
    pub config: Config,
    snapshot: ArcSwap<Snapshot>,
    /// Mirrors the published snapshot's generation, so sessions notice a change with one atomic load.
    generation: AtomicU64,
    pub metrics: Arc<Metrics>,
    pub clients: Clients,
    /// Places for connections, and the failed-AUTH throttle.
    pub admission: Arc<Admission>,
    next_client_id: AtomicU64,
    pub started: Instant,
    ready: AtomicBool,
    /// Wakes every session: a new snapshot was published (the value is its generation), or a client was
    /// killed (the value is unchanged).
    changes: watch::Sender<u64>,
}

impl Gateway {
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    fn publish(&self, snapshot: Snapshot) {
        let generation = snapshot.generation;
        self.snapshot.store(Arc::new(snapshot));
        self.generation.store(generation, Ordering::Release);
        self.ready.store(true, Ordering::Release);
        self.changes.send_replace(generation);
    }

    /// Makes every session check whether it was killed (CLIENT KILL), and its credential and tenant.
    pub fn wake_sessions(&self) {
        self.changes.send_modify(|_| {});
    }

    /// A receiver that wakes when a new snapshot is published, or on `wake_sessions`.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Reads, validates and builds the routes file; the current snapshot keeps serving on any error.
    fn load_routes(&self, path: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read routes file {}", path.display()))?;
        let file: RoutesFile = serde_json::from_str(&text)
            .with_context(|| format!("invalid routes file {}", path.display()))?;
        let current = self.snapshot();
        let snapshot = Snapshot::from_routes_file(&file, current.generation + 1, &current)
            .with_context(|| format!("invalid routes file {}", path.display()))?;
        self.publish(snapshot);
        Ok(())
    }

    /// Validates and builds a control-plane snapshot (its JSON as received) and swaps it in; the current one keeps
    /// serving on any error.
    pub fn apply_control_plane(&self, body: &[u8]) -> anyhow::Result<()> {
        let parsed: switchyard_schemas::Snapshot = serde_json::from_slice(body)
            .context("the snapshot is not valid JSON of the expected shape")?;
        let current = self.snapshot();
        let snapshot = Snapshot::from_control_plane(&parsed, current.generation + 1, &current)
            .context("the snapshot breaks the route-table rules")?;
        tracing::info!(
            revision = parsed.revision,
            tenants = parsed.tenants.len(),
            "snapshot applied"
        );
        self.publish(snapshot);
        Ok(())
    }
}

/// `switchyard-gateway explain`: where each key of `keys` goes under `tenant`'s route in the routes file.
pub fn explain(
    routes: &std::path::Path,
    tenant: &str,
    keys: &[String],
) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(routes)
        .with_context(|| format!("cannot read {}", routes.display()))?;
    let file: RoutesFile = serde_json::from_str(&text)
        .with_context(|| format!("invalid routes file {}", routes.display()))?;
    let snapshot = Snapshot::from_routes_file(&file, 1, &Snapshot::empty())
        .with_context(|| format!("invalid routes file {}", routes.display()))?;
    let tenant = snapshot
        .tenant_by_name(tenant)
        .with_context(|| format!("no tenant '{tenant}' in the routes file"))?;
    Ok(keys
        .iter()
        .map(|key| tenant.route.explain(key.as_bytes()))
        .collect())
}

/// The upstreams a worker holds open while no client uses them (see `Worker::upstream`).
#[derive(Default)]
struct Pinned {
    generation: u64,
    specs: HashSet<ResourceSpec>,
    upstreams: Vec<Upstream>,
}

/// The per-worker context every session of that worker shares.
pub struct Worker {
    pub gateway: Arc<Gateway>,
    pool: Rc<BackendPool>,
    /// Upstreams of the current snapshot's routes (and those opened since for another database or protocol),
    /// held open even while no client uses them, so that a new client never waits for a backend connect (or a
    /// cluster's first slot map). Replaced (and the dropped ones drained) on a route change.
    pinned: RefCell<Pinned>,
    /// Background double-write tracking, per tenant and secondary resource.
    detached: RefCell<HashMap<(String, String), Rc<DetachedWrites>>>,
    pub shutdown: watch::Receiver<bool>,
    /// Tells every session of this worker that the snapshot changed or the gateway is shutting down.
    pub control: LocalBroadcast,
}

impl Worker {
    /// The upstream for a resource, shared by every session of this worker.
    pub fn upstream(&self, spec: &ResourceSpec) -> Upstream {
        let generation = self.gateway.generation();
        let mut pinned = self.pinned.borrow_mut();
        if pinned.generation != generation {
            let snapshot = self.gateway.snapshot();
            let specs: HashSet<ResourceSpec> = snapshot
                .tenants()
                .iter()
                .flat_map(|tenant| tenant.route.resources())
                .cloned()
                .collect();
            let upstreams = specs.iter().map(|spec| self.pool.upstream(spec)).collect();
            *pinned = Pinned {
                generation,
                specs,
                upstreams,
            };
        }
        let upstream = self.pool.upstream(spec);
        // Another database or protocol of a resource, once used, stays open until the routes change too.
        if pinned.specs.insert(spec.clone()) {
            pinned.upstreams.push(upstream.clone());
        }
        upstream
    }

    /// Where this worker tracks background writes of `tenant` to the double-write secondary `resource`.
    pub fn detached(&self, tenant: &Tenant, resource: &str) -> Rc<DetachedWrites> {
        let key = (tenant.name.clone(), resource.to_string());
        let mut detached = self.detached.borrow_mut();
        let writes = detached.entry(key).or_insert_with(|| {
            let failures = tenant.metrics.double_write_failures(resource);
            Rc::new(DetachedWrites::new(&tenant.name, resource, failures))
        });
        Rc::clone(writes)
    }
}

/// Runs the gateway until `shutdown` completes, then drains: stops accepting, lets sessions finish what they
/// have in flight (bounded by `shutdown_grace`), and returns.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let gateway = Arc::new(Gateway {
        config: config.clone(),
        snapshot: ArcSwap::from_pointee(Snapshot::empty()),
        generation: AtomicU64::new(0),
        metrics: Arc::new(Metrics::default()),
        clients: Clients::default(),
        admission: Arc::new(Admission::new(
            config.max_clients,
            config.max_unauthenticated_clients,
        )),
        next_client_id: AtomicU64::new(1),
        started: Instant::now(),
        ready: AtomicBool::new(false),
        changes: watch::channel(0).0,
    });
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
                RouteSource::File(path) => match gateway.load_routes(path) {
                    Ok(()) => tracing::info!(generation = gateway.generation(), "routes reloaded"),
                    Err(e) => tracing::error!("routes not reloaded, the previous routes keep serving: {e:#}"),
                },
                RouteSource::ControlPlane(_) => tracing::info!("SIGHUP ignored: routes come from the control plane"),
            },
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = senders[next_worker].send(stream.into_std()?);
                    next_worker = (next_worker + 1) % senders.len();
                }
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
    let settings = ConnectionSettings {
        connect_timeout: gateway.config.connect_timeout,
        command_timeout: gateway.config.command_timeout,
    };
    let grace = gateway.config.shutdown_grace;
    let worker = Rc::new(Worker {
        pinned: RefCell::new(Pinned::default()),
        detached: RefCell::new(HashMap::new()),
        pool: Rc::new(BackendPool::new(
            settings,
            gateway.config.backend_connections,
            Arc::clone(&gateway.metrics),
        )),
        gateway,
        shutdown,
        control: LocalBroadcast::default(),
    });
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
