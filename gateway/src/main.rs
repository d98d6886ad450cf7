//! `switchyard-gateway`: parses flags and environment, sets up logging, and runs the gateway until SIGTERM or
//! SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use switchyard_gateway::{
    ClientAuth, ClientLimits, ControlPlaneConfig, Limits, ListenerFiles, MetricsConfig,
    RouteSource, TlsListen, parse_bytes, parse_control_plane_urls, parse_output_buffer_limit,
};
use switchyard_runtime::telemetry::LogFormat;
use switchyard_schemas::OutputBufferLimit;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Switchyard: a multi-tenant routing gateway for Redis",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: Args,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Prints where each key goes: its shard, read resources and write resources (the data path's own code).
    Explain {
        /// The routes file.
        #[arg(long = "routes")]
        routes_file: PathBuf,
        /// The tenant whose route to use.
        #[arg(long)]
        tenant: String,
        /// Keys to place.
        #[arg(required = true)]
        keys: Vec<String>,
    },
}

#[derive(clap::Args, Debug)]
struct Args {
    /// Address clients connect to, in plain TCP; `off` for none (TLS only, with --tls-listen).
    #[arg(long, env = "SWITCHYARD_LISTEN", default_value = "127.0.0.1:6380", value_parser = parse_listen)]
    listen: Listen,
    /// Address clients connect to over TLS (beside --listen, or instead with --listen off).
    #[arg(long, env = "SWITCHYARD_TLS_LISTEN", requires_all = ["tls_cert", "tls_key"])]
    tls_listen: Option<SocketAddr>,
    /// The TLS listener's certificate chain (PEM), leaf first. Reread on SIGHUP.
    #[arg(long, env = "SWITCHYARD_TLS_CERT", requires = "tls_listen")]
    tls_cert: Option<PathBuf>,
    /// The TLS listener's private key (PEM). Reread on SIGHUP.
    #[arg(long, env = "SWITCHYARD_TLS_KEY", requires = "tls_listen")]
    tls_key: Option<PathBuf>,
    /// CA certificates (PEM) that sign client certificates: mutual TLS. Reread on SIGHUP.
    #[arg(long, env = "SWITCHYARD_TLS_CLIENT_CA", requires = "tls_listen")]
    tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: whether every client must present a certificate (yes), or may (optional; one
    /// without authenticates with a password).
    #[arg(
        long,
        env = "SWITCHYARD_TLS_AUTH_CLIENTS",
        value_enum,
        default_value = "yes",
        requires = "tls_client_ca"
    )]
    tls_auth_clients: ClientAuth,
    /// Every client connection (plain and TLS) starts with a PROXY protocol header, v1 or v2, sent by the L4 load
    /// balancer in front of the gateway: the client address it gives is the one tenants' ip_allow/ip_deny,
    /// CLIENT LIST and the logs see. A connection without a valid header is closed.
    #[arg(long, env = "SWITCHYARD_PROXY_PROTOCOL")]
    proxy_protocol: bool,
    /// Address of the admin HTTP port (/healthz, /readyz, /metrics).
    #[arg(long, env = "SWITCHYARD_ADMIN_LISTEN")]
    admin_listen: Option<SocketAddr>,
    /// The routes file (JSON): tenants, passwords and routes. Reloaded on SIGHUP. Exactly one of --routes and
    /// --control-plane.
    #[arg(long, env = "SWITCHYARD_ROUTES", conflicts_with = "control_plane")]
    routes: Option<PathBuf>,
    /// The control plane's base URL (e.g. http://127.0.0.1:8080): routes come from its snapshots. Several
    /// replicas: URLs separated by commas, or the flag repeated (a host name with several addresses is a replica
    /// per address); the gateway follows one and moves to the next when it fails.
    #[arg(long, env = "SWITCHYARD_CONTROL_PLANE", action = clap::ArgAction::Append)]
    control_plane: Vec<String>,
    /// CA certificates (PEM) to trust for an https:// control plane, instead of the system's trust store (which
    /// honours SSL_CERT_FILE).
    #[arg(long, env = "SWITCHYARD_CONTROL_PLANE_CA", requires = "control_plane")]
    control_plane_ca: Option<PathBuf>,
    /// The token gateways present to the control plane.
    #[arg(long, env = "SWITCHYARD_GATEWAY_TOKEN", requires = "control_plane")]
    gateway_token: Option<String>,
    /// Where to keep the last applied snapshot, to start from while the control plane is down.
    #[arg(long, env = "SWITCHYARD_CACHE_FILE", requires = "control_plane")]
    cache_file: Option<PathBuf>,
    /// This gateway's id in heartbeats (default: host name and listen port).
    #[arg(long, env = "SWITCHYARD_GATEWAY_ID")]
    gateway_id: Option<String>,
    /// How often the gateway sends the control plane a heartbeat, in milliseconds (100 to 60000): the revision it
    /// serves, its tenants' demand for fleet limits, and, in the answer, its shares of them, handed out again at
    /// each one.
    #[arg(
        long,
        env = "SWITCHYARD_HEARTBEAT_INTERVAL_MS",
        default_value_t = 2000,
        value_parser = clap::value_parser!(u64).range(100..=60_000),
        requires = "control_plane"
    )]
    heartbeat_interval_ms: u64,
    /// Worker threads, each owning its clients and backend connections (default: one per CPU this process may
    /// use, after affinity and cgroup quotas, and one on 2 CPUs or fewer; 1 when unknown). Lower it when the
    /// gateway shares its host with busy Redis servers.
    #[arg(long, env = "SWITCHYARD_WORKERS", default_value_t = default_workers(), value_parser = parse_workers)]
    workers: usize,
    /// Pipelined connections per backend node and worker.
    #[arg(long, env = "SWITCHYARD_BACKEND_CONNECTIONS", default_value_t = 1)]
    backend_connections: usize,
    /// Backend connect timeout, in milliseconds.
    #[arg(long, env = "SWITCHYARD_CONNECT_TIMEOUT_MS", default_value_t = 1000)]
    connect_timeout_ms: u64,
    /// How long a command may wait for its backend's reply, in milliseconds.
    #[arg(long, env = "SWITCHYARD_COMMAND_TIMEOUT_MS", default_value_t = 2000)]
    command_timeout_ms: u64,
    /// Most authenticated client connections at once.
    #[arg(long, env = "SWITCHYARD_MAX_CLIENTS", default_value_t = 10_000)]
    max_clients: usize,
    /// Most connections at once that have not authenticated yet (apart from --max-clients, so that they can
    /// never take an authenticated client's place).
    #[arg(
        long,
        env = "SWITCHYARD_MAX_UNAUTHENTICATED_CLIENTS",
        default_value_t = 1024
    )]
    max_unauthenticated_clients: usize,
    /// Most of those one client address may hold once more than half of them are in use (an IPv6 client's /64
    /// counts as one address; behind --proxy-protocol, the address its header gives). Default: an eighth of
    /// --max-unauthenticated-clients, so that sockets opened from one address cannot lock every other client out. Behind a load balancer that
    /// sends no PROXY header every client has the balancer's address: raise it to the cap there (or 0: no share,
    /// the whole cap).
    #[arg(long, env = "SWITCHYARD_MAX_UNAUTHENTICATED_PER_ADDRESS")]
    max_unauthenticated_per_address: Option<usize>,
    /// How long a connection may stay without authenticating before it is closed, in milliseconds.
    #[arg(long, env = "SWITCHYARD_AUTH_TIMEOUT_MS", default_value_t = 5000)]
    auth_timeout_ms: u64,
    /// Most dedicated backend connections (blocking commands, transactions, subscriptions) one tenant's clients
    /// may hold at once.
    #[arg(
        long,
        env = "SWITCHYARD_MAX_DEDICATED_CONNECTIONS",
        default_value_t = 2048
    )]
    max_dedicated_connections: usize,
    /// Spare dedicated connections each worker keeps connected and ready per backend node and database that
    /// blocking commands, transactions or subscriptions use, so that those start without a connect; closed after
    /// 30 s unused. 0: none.
    #[arg(long, env = "SWITCHYARD_DEDICATED_SPARES", default_value_t = 1)]
    dedicated_spares: usize,
    /// The percentage of each backend node's maxclients (read at connect) that this gateway's dedicated
    /// connections may hold, shared fairly by the tenants using the node; the rest is left for the shared
    /// connections, other gateways and other clients. With several gateways in front of one Redis, divide it among
    /// them. 0: no such budget.
    #[arg(long, env = "SWITCHYARD_DEDICATED_MAXCLIENTS_PERCENT", default_value_t = 50,
          value_parser = clap::value_parser!(u64).range(0..=100))]
    dedicated_maxclients_percent: u64,
    /// The maxclients assumed for a backend node whose own cannot be read (its user may not run CONFIG GET).
    #[arg(long, env = "SWITCHYARD_BACKEND_MAXCLIENTS", default_value_t = 10_000)]
    backend_maxclients: u64,
    /// Most bytes the near caches of every tenant hold together on this gateway (each tenant's own bound is its
    /// near_cache.max_bytes); sizes as 64mb. Shared evenly among the workers.
    #[arg(long, env = "SWITCHYARD_NEAR_CACHE_MAX_BYTES", default_value = "64mb", value_parser = parse_bytes)]
    near_cache_max_bytes: u64,
    /// On SIGTERM, how long clients get to finish their commands in flight, in milliseconds.
    #[arg(long, env = "SWITCHYARD_SHUTDOWN_GRACE_MS", default_value_t = 5000)]
    shutdown_grace_ms: u64,
    /// Longest bulk string a client may send, and longest string a tenant's request may make Redis build, in bytes
    /// with an optional unit (k, kb, m, mb, g, gb).
    #[arg(long, env = "SWITCHYARD_MAX_BULK_LEN", default_value = "512mb", value_parser = parse_bytes)]
    max_bulk_len: u64,
    /// Most arguments in one command.
    #[arg(long, env = "SWITCHYARD_MAX_ARGS", default_value_t = Limits::default().max_args)]
    max_args: usize,
    /// Longest inline command, in bytes.
    #[arg(long, env = "SWITCHYARD_MAX_INLINE_LEN", default_value_t = Limits::default().max_inline_len)]
    max_inline_len: usize,
    /// Most unparsed input one client may have the gateway hold (a request larger than this closes the
    /// connection), in bytes with an optional unit (k, kb, m, mb, g, gb).
    #[arg(long, env = "SWITCHYARD_MAX_QUERY_BUFFER", default_value = "1gb", value_parser = parse_bytes)]
    max_query_buffer: u64,
    /// What a client connection that is not subscribed may leave unread, as Redis' client-output-buffer-limit:
    /// "HARD SOFT SECONDS" (closed at once over HARD bytes, or after SECONDS over SOFT bytes; 0 turns one off).
    /// Redis leaves it unbounded; a gateway shared by many tenants bounds it at the largest bulk string Redis
    /// accepts, and at 64 MB held for a minute.
    #[arg(long, env = "SWITCHYARD_OUTPUT_BUFFER_LIMIT", default_value = "512mb 64mb 60",
          value_parser = parse_output_buffer_limit)]
    output_buffer_limit: OutputBufferLimit,
    /// The same for a subscribed client connection, pub/sub messages included.
    #[arg(long, env = "SWITCHYARD_PUBSUB_OUTPUT_BUFFER_LIMIT", default_value = "32mb 8mb 60",
          value_parser = parse_output_buffer_limit)]
    pubsub_output_buffer_limit: OutputBufferLimit,
    /// How long replies may wait for a client that reads none of them before it is closed, in milliseconds
    /// (0: forever).
    #[arg(
        long,
        env = "SWITCHYARD_CLIENT_WRITE_TIMEOUT_MS",
        default_value_t = 60_000
    )]
    client_write_timeout_ms: u64,
    /// Closes a client connection that sends nothing for this long while nothing of it is in flight, in seconds
    /// (Redis' timeout; subscribed clients are exempt; 0: never).
    #[arg(long, env = "SWITCHYARD_CLIENT_IDLE_TIMEOUT_S", default_value_t = 0)]
    client_idle_timeout_s: u64,
    /// TCP keepalive on client sockets: probes after this many seconds of silence (Redis' tcp-keepalive; 0: off).
    #[arg(long, env = "SWITCHYARD_TCP_KEEPALIVE_S", default_value_t = 300)]
    tcp_keepalive_s: u64,
    /// /metrics writes a tenant's own series while it has an open connection and for this many seconds after its
    /// counters last moved (gateway-wide totals always count every tenant). Ten minutes keeps a 5m rate() of a
    /// tenant that went quiet computable until it reads zero.
    #[arg(
        long,
        env = "SWITCHYARD_METRICS_ACTIVE_WINDOW_S",
        default_value_t = 600
    )]
    metrics_active_window_s: u64,
    /// /metrics also writes each active tenant's latency histogram (15 series a tenant); without it, only the
    /// gateway-wide histogram.
    #[arg(long, env = "SWITCHYARD_METRICS_TENANT_LATENCY")]
    metrics_tenant_latency: bool,
    /// How log lines are written: text (colour only on a terminal) or json (one object per line).
    #[arg(long, env = "SWITCHYARD_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
    #[command(flatten)]
    tracking: switchyard_gateway::tracking::TrackingFlags,
    /// A directory of this gateway's own where it keeps the keys double-write secondaries missed until they are
    /// repaired, so that they outlive a restart or a crash. Without it they live in memory only.
    #[arg(long, env = "SWITCHYARD_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Keys compared each second per tenant and double-write secondary to estimate how far the secondary is from
    /// the primary (`switchyard_repair_divergence_ratio`); what differs is repaired. 0: no sampling.
    #[arg(long, env = "SWITCHYARD_DIVERGENCE_SAMPLES", default_value_t = 5)]
    divergence_samples: u32,
}

/// `--listen`: an address, or none.
#[derive(Debug, Clone, Copy)]
struct Listen(Option<SocketAddr>);

fn parse_listen(text: &str) -> Result<Listen, String> {
    match text {
        "off" => Ok(Listen(None)),
        addr => addr
            .parse()
            .map(|addr| Listen(Some(addr)))
            .map_err(|e| format!("'{addr}': {e} (an address such as 127.0.0.1:6380, or off)")),
    }
}

/// The CPUs this process may run on (the standard library honours the affinity mask and a cgroup CPU quota),
/// as workers: see [`workers_for`].
fn default_workers() -> usize {
    workers_for(std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
}

/// One worker per CPU, except on a host of 2 CPUs or fewer, which gets one: there the gateway shares the CPUs
/// with what it serves (Redis, often the clients), and a second worker makes every request dearer (two backend
/// connections per node, each carrying half the batches) without adding a CPU to work on
/// (docs/operations.md#workers).
fn workers_for(cpus: usize) -> usize {
    match cpus {
        0..=2 => 1,
        cpus => cpus,
    }
}

/// `--workers`: at least one, since a gateway without workers would accept connections that nothing serves.
fn parse_workers(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("the gateway needs at least one worker".to_string()),
        Ok(workers) => Ok(workers),
        Err(e) => Err(format!("{e} (a number of worker threads, 1 or more)")),
    }
}

/// `Some(duration)`, or none for 0 (a bound turned off).
fn unless_zero(duration: Duration) -> Option<Duration> {
    (!duration.is_zero()).then_some(duration)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Command::Explain {
        routes_file,
        tenant,
        keys,
    }) = cli.command
    {
        for line in switchyard_gateway::explain(&routes_file, &tenant, &keys)? {
            println!("{line}");
        }
        return Ok(());
    }
    let args = cli.serve;
    let tls = match (args.tls_listen, args.tls_cert, args.tls_key) {
        (Some(listen), Some(cert), Some(key)) => Some(TlsListen {
            listen,
            files: ListenerFiles {
                cert,
                key,
                client_ca: args.tls_client_ca,
                client_auth: args.tls_auth_clients,
            },
        }),
        _ => None,
    };
    let Some(client_address) = args.listen.0.or(args.tls_listen) else {
        anyhow::bail!("--listen off needs --tls-listen: clients must have a way in");
    };
    let source = match (args.routes, &args.control_plane[..]) {
        (Some(routes), []) => RouteSource::File(routes),
        (None, [_, ..]) => RouteSource::ControlPlane(ControlPlaneConfig {
            urls: parse_control_plane_urls(&args.control_plane)
                .map_err(|e| anyhow::anyhow!("--control-plane: {e}"))?,
            token: args.gateway_token.unwrap_or_default(),
            ca_file: args.control_plane_ca,
            cache_file: args.cache_file,
            gateway_id: args
                .gateway_id
                .unwrap_or_else(|| default_gateway_id(client_address)),
            heartbeat_interval: Duration::from_millis(args.heartbeat_interval_ms),
        }),
        _ => {
            anyhow::bail!("give exactly one of --routes (a routes file) and --control-plane (URLs)")
        }
    };
    switchyard_runtime::telemetry::init_logging(args.log_format);
    let config = switchyard_gateway::Config {
        listen: args.listen.0,
        tls,
        admin_listen: args.admin_listen,
        source,
        workers: args.workers,
        backend_connections: args.backend_connections,
        connect_timeout: Duration::from_millis(args.connect_timeout_ms),
        command_timeout: Duration::from_millis(args.command_timeout_ms),
        max_clients: args.max_clients,
        max_unauthenticated_clients: args.max_unauthenticated_clients,
        max_unauthenticated_per_address: match args.max_unauthenticated_per_address {
            Some(0) => args.max_unauthenticated_clients,
            Some(share) => share,
            None => (args.max_unauthenticated_clients / 8).max(1),
        },
        auth_timeout: Duration::from_millis(args.auth_timeout_ms),
        proxy_protocol: args.proxy_protocol,
        max_dedicated_connections: args.max_dedicated_connections,
        dedicated_spares: args.dedicated_spares,
        dedicated_maxclients_percent: args.dedicated_maxclients_percent,
        backend_maxclients: args.backend_maxclients,
        shutdown_grace: Duration::from_millis(args.shutdown_grace_ms),
        limits: Limits {
            max_bulk_len: usize::try_from(args.max_bulk_len).unwrap_or(usize::MAX),
            max_args: args.max_args,
            max_inline_len: args.max_inline_len,
            unauthenticated: false,
        },
        clients: ClientLimits {
            output_buffer: args.output_buffer_limit,
            pubsub_output_buffer: args.pubsub_output_buffer_limit,
            write_timeout: unless_zero(Duration::from_millis(args.client_write_timeout_ms)),
            idle_timeout: unless_zero(Duration::from_secs(args.client_idle_timeout_s)),
            tcp_keepalive: unless_zero(Duration::from_secs(args.tcp_keepalive_s)),
            max_query_buffer: usize::try_from(args.max_query_buffer).unwrap_or(usize::MAX),
        },
        metrics: MetricsConfig {
            active_window: Duration::from_secs(args.metrics_active_window_s),
            tenant_latency: args.metrics_tenant_latency,
        },
        tracking: args.tracking.config(),
        state_dir: args.state_dir,
        divergence_samples: args.divergence_samples,
        near_cache_max_bytes: args.near_cache_max_bytes,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(switchyard_gateway::run(config, shutdown_signal()))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install SIGTERM/SIGINT handlers; stop the gateway with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
}

/// The host name and the listen port: stable across restarts, distinct for gateways sharing a host.
fn default_gateway_id(listen: SocketAddr) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "gateway".to_string());
    format!("{host}:{}", listen.port())
}

#[cfg(test)]
mod tests {
    use super::workers_for;

    #[test]
    fn one_worker_on_small_hosts_one_per_cpu_beyond() {
        let workers: Vec<usize> = (1..=8).map(workers_for).collect();
        assert_eq!(workers, [1, 1, 3, 4, 5, 6, 7, 8]);
    }
}
