//! Multi-process Redis deployments for end-to-end tests: a Redis Cluster (masters + replicas, built with
//! `redis-cli --cluster create`) and a sentinel group (a master, replicas and `redis-server --sentinel`
//! processes). Everything runs on allocated loopback ports, readiness is polled, and processes die with the guard.
//!
//! Either deployment may speak TLS on every hop ([`NodeTls`]): each node then has a TLS port beside its plain one,
//! and the nodes reach each other over TLS (cluster bus, replication, sentinels to nodes and to each other), so
//! whatever the deployment tells a client about its nodes names their TLS ports. The plain ports stay for the
//! harness's own checks (INFO, CLIENT LIST, CLUSTER NODES as the tests read them), which keeps those checks the
//! same in both modes; the gateway is only ever given TLS ports.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::redis_server::redis_tls_args;
use crate::{CertFiles, Pki, RedisServerBuilder};

mod cluster;
mod sentinel;

pub use cluster::{ClusterNode, RedisCluster};
pub use sentinel::SentinelGroup;

const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The `redis://` URL of a loopback node, with the credentials given.
fn node_url(port: u16, user: Option<&str>, password: Option<&str>) -> String {
    match (user, password) {
        (Some(user), Some(password)) => format!("redis://{user}:{password}@127.0.0.1:{port}"),
        (None, Some(password)) => format!("redis://:{password}@127.0.0.1:{port}"),
        _ => format!("redis://127.0.0.1:{port}"),
    }
}

fn connect(port: u16, user: Option<&str>, password: Option<&str>) -> redis::Connection {
    redis::Client::open(node_url(port, user, password))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"))
}

/// Polls `check` every 50 ms until it holds, panicking with `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`wait_for`] for async tests: polls without holding up a runtime thread, so that the tasks the condition
/// watches keep running.
pub async fn wait_for_async(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A replication offset (`master_repl_offset`, `slave_repl_offset`) from `INFO replication` on `node`.
fn repl_offset(node: &mut redis::Connection, field: &str) -> Option<u64> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(node)
        .unwrap_or_default();
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().parse().ok())
}

/// Waits until the replica at `port` (reached through `connect`) has applied its master's writes up to offset
/// `written`.
fn wait_replicated(port: u16, written: u64, connect: impl Fn() -> redis::Connection) {
    wait_for(
        &format!("replica {port} to reach offset {written}"),
        READY_TIMEOUT,
        || repl_offset(&mut connect(), "slave_repl_offset").is_some_and(|o| o >= written),
    );
}

/// TLS on every node of a deployment: one certificate, signed by a test's [`Pki`], that every node (data nodes
/// and sentinels alike) presents on its TLS port, and the CA the nodes and the gateway trust. Client
/// certificates are not asked for.
#[derive(Debug, Clone)]
pub struct NodeTls {
    ca: PathBuf,
    files: CertFiles,
}

impl NodeTls {
    /// Nodes whose certificate names `names` (DNS names or IP addresses): `["localhost", "127.0.0.1"]` for one
    /// that every client accepts, `["localhost"]` for nodes announced by an address their certificate lacks.
    /// The files live in `pki`'s directory: keep `pki` as long as the deployment (a restarted node reads them).
    pub fn new(pki: &Pki, names: &[&str]) -> NodeTls {
        NodeTls {
            ca: pki.ca_file(),
            files: pki.server(&format!("topology-{}", crate::allocate_port()), names),
        }
    }

    pub fn ca_file(&self) -> &Path {
        &self.ca
    }

    /// A node's TLS settings, its TLS port `port`, and TLS to the nodes it replicates from (and, for a
    /// sentinel, to the nodes it monitors and to the other sentinels).
    fn server_args(&self, port: u16) -> Vec<String> {
        let mut args = redis_tls_args(&self.ca, &self.files, false);
        args.extend(
            ["--tls-port", &port.to_string(), "--tls-replication", "yes"].map(String::from),
        );
        args
    }

    /// `builder` with [`NodeTls::server_args`].
    fn configure(&self, builder: RedisServerBuilder, port: u16) -> RedisServerBuilder {
        self.server_args(port)
            .iter()
            .fold(builder, |builder, arg| builder.arg(arg))
    }
}

/// A resource URL: `scheme` (its `rediss` form under TLS, which then trusts the deployment's CA), the
/// credentials and addresses of `location`, and the query parameters `params`.
fn resource_url(
    scheme: &str,
    location: &str,
    mut params: Vec<String>,
    tls: Option<&NodeTls>,
) -> String {
    let scheme = match (tls, scheme.strip_prefix("redis")) {
        (Some(tls), Some(rest)) => {
            params.push(format!("tlsCaFile={}", tls.ca.display()));
            format!("rediss{rest}")
        }
        _ => scheme.to_string(),
    };
    match params.is_empty() {
        true => format!("{scheme}://{location}"),
        false => format!("{scheme}://{location}?{}", params.join("&")),
    }
}
