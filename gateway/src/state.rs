//! State every worker shares: the configuration, the published snapshot (swapped whole on every route change),
//! metrics, the client registry and admission.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use arc_swap::ArcSwap;
use switchyard_schemas::{OutputBufferLimit, RoutesFile};
use tokio::sync::watch;

use crate::admission::Admission;
use crate::backend::Topologies;
use crate::backend::budget::DedicatedBudget;
use crate::cache::Received;
use crate::clients::Clients;
use crate::metrics::{Metrics, MetricsConfig};
use crate::resp::Limits;
use crate::route::{Catalog, Refused, Snapshot};
use crate::tls::{ListenerFiles, ListenerTls};
use crate::tracking::{Tracking, TrackingConfig};

/// Everything `run` needs; the binary fills it from flags and environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// The plain listener (`None`: TLS only).
    pub listen: Option<SocketAddr>,
    /// The TLS listener.
    pub tls: Option<TlsListen>,
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
    /// Most of those one source address (an IPv6 address' /64) may hold at once.
    pub max_unauthenticated_per_address: usize,
    /// How long a connection may stay without authenticating before it is closed.
    pub auth_timeout: Duration,
    /// Every client connection starts with a PROXY protocol header (v1 or v2), which gives the client's address
    /// (`proxy_protocol`).
    pub proxy_protocol: bool,
    /// Most dedicated backend connections (blocking commands, transactions, subscriptions) one tenant's clients
    /// may hold at once, per gateway.
    pub max_dedicated_connections: usize,
    /// Spare dedicated connections each worker keeps ready per backend node and database in use.
    pub dedicated_spares: usize,
    /// The percentage of each backend node's `maxclients` this gateway's dedicated connections may hold, shared
    /// fairly by tenants (see `backend::budget`); 0: no such budget.
    pub dedicated_maxclients_percent: u64,
    /// The `maxclients` assumed for a node whose own cannot be read (`CONFIG GET` refused).
    pub backend_maxclients: u64,
    pub shutdown_grace: Duration,
    pub limits: Limits,
    pub clients: ClientLimits,
    pub metrics: MetricsConfig,
    /// Slow log, big keys and hot keys (see `tracking`).
    pub tracking: TrackingConfig,
    /// Where the gateway keeps what must outlive it: the keys double-write secondaries missed (see `missed`).
    pub state_dir: Option<PathBuf>,
    /// Keys each tenant's double-write secondaries get compared with the primary each second (see
    /// `repair::sample`); 0: none.
    pub divergence_samples: u32,
    /// Most bytes every tenant's near cache holds together (see `near_cache`), shared among the workers.
    pub near_cache_max_bytes: u64,
}

/// Bounds on each client connection beyond its requests' sizes (`Limits`): what it may leave unread, how long it
/// may go without reading or sending, how large its unparsed input may grow.
#[derive(Debug, Clone, Copy)]
pub struct ClientLimits {
    /// Unread replies, for a connection that is not subscribed (a tenant's `output_buffer_limit` wins).
    pub output_buffer: OutputBufferLimit,
    /// Unread replies and messages, for a subscribed connection (a tenant's `pubsub_output_buffer_limit` wins).
    pub pubsub_output_buffer: OutputBufferLimit,
    /// How long replies may wait for a client that takes nothing from its socket.
    pub write_timeout: Option<Duration>,
    /// How long a connection may send nothing while nothing of it is in flight (Redis' `timeout`); subscribed
    /// connections are exempt.
    pub idle_timeout: Option<Duration>,
    /// TCP keepalive probes after this much silence on a client socket (Redis' `tcp-keepalive`).
    pub tcp_keepalive: Option<Duration>,
    /// Most bytes of a client's input the gateway holds unparsed (Redis' `client-query-buffer-limit`).
    pub max_query_buffer: usize,
}

/// Parses an output buffer limit as Redis' `client-output-buffer-limit` writes one: hard bytes, soft bytes and soft
/// seconds, separated by spaces, sizes with an optional unit (`k`/`m`/`g` for powers of 1000, `kb`/`mb`/`gb` for
/// powers of 1024), e.g. `32mb 8mb 60`; 0 turns a bound off.
pub fn parse_output_buffer_limit(text: &str) -> Result<OutputBufferLimit, String> {
    let [hard, soft, seconds] = text.split_whitespace().collect::<Vec<_>>()[..] else {
        return Err(format!(
            "'{text}' is not 'HARD SOFT SECONDS' (e.g. '32mb 8mb 60')"
        ));
    };
    let seconds = seconds
        .parse()
        .map_err(|_| format!("'{seconds}' is not a number of seconds"))?;
    Ok(OutputBufferLimit {
        hard_bytes: parse_bytes(hard)?,
        soft_bytes: parse_bytes(soft)?,
        soft_seconds: seconds,
    })
}

/// Parses a size in bytes with an optional unit, as Redis' configuration does (see `parse_output_buffer_limit`).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let lower = text.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit: u64 = match &lower[digits.len()..] {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => {
            return Err(format!(
                "'{text}' has an unknown unit (b, k, kb, m, mb, g, gb)"
            ));
        }
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("'{text}' is not a size in bytes"))
}

/// The TLS listener: where, and its files (reread on SIGHUP).
#[derive(Debug, Clone)]
pub struct TlsListen {
    pub listen: SocketAddr,
    pub files: ListenerFiles,
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
pub(crate) struct Gateway {
    pub config: Config,
    snapshot: ArcSwap<Snapshot>,
    /// What the next snapshot is built from besides the one served; held while one is built and published, so
    /// that builds take turns.
    building: Mutex<Building>,
    /// Mirrors the published snapshot's generation, so sessions notice a change with one atomic load.
    generation: AtomicU64,
    pub metrics: Arc<Metrics>,
    pub clients: Arc<Clients>,
    /// Places for connections, and the failed-AUTH throttle.
    pub admission: Arc<Admission>,
    /// Each backend node's dedicated connections, within its budget.
    pub dedicated: Arc<DedicatedBudget>,
    next_client_id: AtomicU64,
    pub started: Instant,
    ready: AtomicBool,
    /// Wakes every session: a new snapshot was published (the value is its generation), or a client was
    /// killed (the value is unchanged).
    changes: watch::Sender<u64>,
    /// The TLS listener's configuration, when there is one.
    pub listener_tls: Option<ListenerTls>,
    /// What the data path noticed, per worker, until the next report.
    pub tracking: Tracking,
    /// Whether each worker reaches the routes' resources (see `reach`).
    pub reachability: crate::reach::Reachability,
    /// The keys double-write secondaries missed, until they are repaired (see `repair`).
    pub repairs: crate::missed::Repairs,
    /// How far each tenant's double-write secondaries are from the primary, sampled (see `repair::sample`).
    pub divergence: crate::missed::divergence::Divergence,
    /// Each backend resource's topology (a cluster's slot map, a sentinel set's master), shared by the workers.
    pub topologies: Arc<Topologies>,
}

impl Gateway {
    /// A gateway with no routes yet (not ready until a snapshot is published).
    pub(crate) fn new(config: Config, listener_tls: Option<ListenerTls>) -> Gateway {
        let metrics = Arc::new(Metrics::default());
        Gateway {
            listener_tls,
            snapshot: ArcSwap::from_pointee(Snapshot::empty()),
            building: Mutex::default(),
            generation: AtomicU64::new(0),
            dedicated: Arc::new(DedicatedBudget::new(
                config.dedicated_maxclients_percent,
                config.backend_maxclients,
                Arc::clone(&metrics),
            )),
            metrics,
            clients: Arc::default(),
            admission: Arc::new(Admission::new(
                config.max_clients,
                config.max_unauthenticated_clients,
                config.max_unauthenticated_per_address,
                config.proxy_protocol,
            )),
            next_client_id: AtomicU64::new(1),
            started: Instant::now(),
            ready: AtomicBool::new(false),
            changes: watch::channel(0).0,
            tracking: Tracking::new(config.tracking),
            reachability: crate::reach::Reachability::default(),
            repairs: crate::missed::Repairs::default(),
            divergence: crate::missed::divergence::Divergence::default(),
            topologies: Arc::default(),
            config,
        }
    }

    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Where clients reach the gateway: the plain listener, else the TLS one.
    pub(crate) fn client_address(&self) -> Option<SocketAddr> {
        self.config
            .listen
            .or(self.config.tls.as_ref().map(|tls| tls.listen))
    }

    pub(crate) fn next_client_id(&self) -> u64 {
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
    pub(crate) fn wake_sessions(&self) {
        self.changes.send_modify(|_| {});
    }

    /// A receiver that wakes when a new snapshot is published, or on `wake_sessions`.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn building(&self) -> std::sync::MutexGuard<'_, Building> {
        self.building.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads, validates and builds the routes file; the current snapshot keeps serving on any error.
    pub(crate) fn load_routes(&self, path: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read routes file {}", path.display()))?;
        let file: RoutesFile = serde_json::from_str(&text)
            .with_context(|| format!("invalid routes file {}", path.display()))?;
        let mut building = self.building();
        let current = self.snapshot();
        let snapshot = Snapshot::from_routes_file(
            &file,
            current.generation + 1,
            &current,
            &mut building.catalog,
        )
        .with_context(|| format!("invalid routes file {}", path.display()))?;
        self.publish(snapshot);
        Ok(())
    }

    /// Validates a control-plane snapshot (its JSON as received), full or a delta, builds what it serves and
    /// swaps it in; returns the full snapshot now served, as received, for the cache file. The current snapshot
    /// keeps serving on any error.
    pub(crate) fn apply_control_plane(&self, body: &[u8]) -> Result<Arc<Received>, Refused> {
        let (parsed, tenants) = crate::cache::parse(body)?;
        let mut guard = self.building();
        let building = &mut *guard;
        let current = self.snapshot();
        let generation = current.generation + 1;
        let (snapshot, received, applied) = match (&parsed.delta, &building.received) {
            (None, _) => (
                Snapshot::from_control_plane(&parsed, generation, &current, &mut building.catalog)?,
                Received::full(&parsed, tenants),
                &self.metrics.snapshots_applied_full,
            ),
            (Some(delta), Some(received)) => (
                current.with_delta(&parsed, delta, generation, &mut building.catalog)?,
                received.patched(&parsed, delta, tenants),
                &self.metrics.snapshots_applied_delta,
            ),
            (Some(_), None) => {
                return Err(Refused::DoesNotApply(
                    "a delta, but the gateway serves no control-plane snapshot yet".to_string(),
                ));
            }
        };
        applied.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            revision = parsed.revision,
            tenants = snapshot.tenants().len(),
            delta = parsed.delta.is_some(),
            changed = parsed.tenants.len(),
            "snapshot applied"
        );
        let received = Arc::new(received);
        building.received = Some(Arc::clone(&received));
        self.publish(snapshot);
        Ok(received)
    }
}

/// See `Gateway::building`.
#[derive(Default)]
struct Building {
    /// Resource plans and specs carried from build to build.
    catalog: Catalog,
    /// The control plane's snapshot being served, as received (none with a routes file).
    received: Option<Arc<Received>>,
}

/// Where and how to reach the control plane.
#[derive(Debug, Clone)]
pub struct ControlPlaneConfig {
    /// The replicas' base URLs, e.g. `http://127.0.0.1:8080`, in the order they are tried (at least one; see
    /// [`parse_control_plane_urls`](crate::parse_control_plane_urls)).
    pub urls: Vec<String>,
    /// Presented to every replica.
    pub token: String,
    /// The CA certificates (PEM) to trust for `https` URLs instead of the system's store.
    pub ca_file: Option<PathBuf>,
    /// The last applied snapshot, for starting while the control plane is unreachable.
    pub cache_file: Option<PathBuf>,
    /// This gateway's id in heartbeats.
    pub gateway_id: String,
    /// How often it sends heartbeats (and so how often its shares of fleet limits are handed out again).
    pub heartbeat_interval: std::time::Duration,
}

#[cfg(test)]
/// A gateway's configuration with every bound a test does not set far away.
pub(crate) fn test_config() -> Config {
    let unbounded = parse_output_buffer_limit("0 0 0").unwrap();
    Config {
        listen: None, // the test accepts connections itself
        tls: None,
        admin_listen: None,
        source: RouteSource::File(PathBuf::new()), // the test loads its routes itself
        workers: 1,
        backend_connections: 1,
        connect_timeout: Duration::from_secs(1),
        command_timeout: Duration::from_secs(1),
        max_clients: 16,
        max_unauthenticated_clients: 16,
        max_unauthenticated_per_address: 16,
        auth_timeout: Duration::from_secs(30),
        proxy_protocol: false,
        max_dedicated_connections: 4,
        dedicated_spares: 1,
        dedicated_maxclients_percent: 50,
        backend_maxclients: 10_000,
        shutdown_grace: Duration::from_secs(1),
        limits: Limits::default(),
        clients: ClientLimits {
            output_buffer: unbounded,
            pubsub_output_buffer: unbounded,
            write_timeout: None,
            idle_timeout: None,
            tcp_keepalive: None,
            max_query_buffer: 1 << 30,
        },
        metrics: MetricsConfig {
            active_window: Duration::from_secs(600),
            tenant_latency: false,
        },
        tracking: TrackingConfig::default(),
        state_dir: None,
        divergence_samples: 0,
        near_cache_max_bytes: 64 << 20,
    }
}

#[cfg(test)]
mod tests;
