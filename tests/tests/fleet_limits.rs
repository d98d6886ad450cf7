//! Fleet limits: three gateways follow one control plane, and a tenant's `max_ops_per_sec` and `max_connections`
//! hold for the three together, however unevenly its clients spread over them, and again for the two left when
//! one stops.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_tests::{ControlPlane, Gateway, RawClient, RedisServer};

/// Short heartbeats, so that shares are handed out again every 200 ms.
const HEARTBEAT_MS: &str = "200";

/// Three gateways following `control_plane`, each with its cache file.
fn fleet(control_plane: &ControlPlane, name: &str) -> Vec<(Gateway, PathBuf)> {
    (0..3)
        .map(|i| {
            let cache = std::env::temp_dir()
                .join(format!("switchyard-{name}-{}-{i}.json", std::process::id()));
            let gateway = Gateway::builder()
                .arg("--heartbeat-interval-ms")
                .arg(HEARTBEAT_MS)
                .arg("--gateway-id")
                .arg(format!("{name}-{i}"))
                .start_with_control_plane(control_plane, &cache);
            (gateway, cache)
        })
        .collect()
}

/// Creates the tenant with `limits` (fleet-wide, the default) and waits until every gateway serves it.
async fn limited_tenant(
    control_plane: &ControlPlane,
    redis: &RedisServer,
    limits: serde_json::Value,
) -> String {
    let secret = control_plane
        .create_tenant_with(
            json!({"name": "metered", "limits": limits}),
            json!({"type": "single", "target": redis.url()}),
        )
        .await;
    let fleet = control_plane.expect("GET", "/v1/gateways", None, 200).await;
    control_plane
        .converged(3, fleet["revision"].as_i64().expect("revision"))
        .await;
    secret
}

/// A thread of clients that runs until it is stopped (or dropped).
struct Background {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Background {
    /// Runs `work` on a thread, with the flag that says when to stop.
    fn spawn(work: impl FnOnce(Arc<AtomicBool>) + Send + 'static) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        Background {
            stop,
            thread: Some(std::thread::spawn(move || work(stopped))),
        }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the clients' thread");
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A client sending `GET`s through one gateway at a steady `per_sec`, in a batch every 20 ms, counting those the
/// rate limit admitted.
struct Load {
    admitted: Arc<AtomicU64>,
    clients: Background,
}

impl Load {
    fn start(gateway: &Gateway, secret: &str, per_sec: u64) -> Load {
        let admitted = Arc::new(AtomicU64::new(0));
        let mut client = RawClient::connect(gateway.port());
        client.roundtrip(format!("AUTH {secret}\r\n").as_bytes(), b"+OK\r\n");
        let count = Arc::clone(&admitted);
        let clients = Background::spawn(move |stopped| {
            let tick = Duration::from_millis(20);
            let batch = (per_sec / 50).max(1) as usize;
            let request = b"*2\r\n$3\r\nGET\r\n$6\r\nmissed\r\n".repeat(batch);
            let mut next = Instant::now();
            while !stopped.load(Ordering::Relaxed) {
                client.send(&request);
                for _ in 0..batch {
                    let reply = client.read_reply_line();
                    match &reply[..] {
                        b"$-1\r\n" => {
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                        refused if refused.starts_with(b"-ERR tenant 'metered' rate limit") => {}
                        other => panic!("unexpected reply {:?}", String::from_utf8_lossy(other)),
                    }
                }
                next += tick;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        Load { admitted, clients }
    }
}

/// Commands the fleet admitted per second over `window`.
async fn admitted_per_sec(loads: &[Load], window: Duration) -> f64 {
    let total = || -> u64 {
        loads
            .iter()
            .map(|l| l.admitted.load(Ordering::Relaxed))
            .sum()
    };
    let (before, started) = (total(), Instant::now());
    tokio::time::sleep(window).await;
    (total() - before) as f64 / started.elapsed().as_secs_f64()
}

/// 300 ops/s for the tenant, offered 600 ops/s through one gateway, 150 and 100 through the others: after a few
/// seconds of rebalancing the three admit 300 a second between them (each gateway alone would admit up to 300);
/// one gateway stopped, the two left admit 300 a second again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_admits_the_tenants_rate_whatever_gateways_its_clients_use() {
    let redis = RedisServer::start();
    let control_plane = ControlPlane::start();
    let mut gateways = fleet(&control_plane, "fleet-rate");
    let secret = limited_tenant(&control_plane, &redis, json!({"max_ops_per_sec": 300})).await;
    let mut loads: Vec<Load> = gateways
        .iter()
        .zip([600, 150, 100])
        .map(|((gateway, _), per_sec)| Load::start(gateway, &secret, per_sec))
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rate = admitted_per_sec(&loads, Duration::from_secs(5)).await;
    assert!(
        (270.0..=330.0).contains(&rate),
        "three gateways admitted {rate:.1} ops/s for a fleet limit of 300"
    );
    let shares = control_plane.expect("GET", "/v1/gateways", None, 200).await;
    assert_eq!(shares["live"], 3, "{shares}");

    // The second gateway stops: once it has missed its heartbeats (at least 3 s), its share goes to the others.
    loads.remove(1).clients.stop();
    let (stopped, cache) = gateways.remove(1);
    drop(stopped);
    let _ = std::fs::remove_file(cache);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rate = admitted_per_sec(&loads, Duration::from_secs(5)).await;
    assert!(
        (270.0..=330.0).contains(&rate),
        "the two gateways left admitted {rate:.1} ops/s for a fleet limit of 300"
    );
    drop(loads);
    for (_, cache) in gateways {
        let _ = std::fs::remove_file(cache);
    }
}

/// Clients of one gateway that keep as many connections open as they are let, up to `wanted`, trying again every
/// 50 ms; `held` counts those open.
struct Holder {
    wanted: Arc<AtomicUsize>,
    held: Arc<AtomicUsize>,
    clients: Background,
}

impl Holder {
    fn start(gateway: &Gateway, secret: &str, wanted: usize) -> Holder {
        let want = Arc::new(AtomicUsize::new(wanted));
        let held = Arc::new(AtomicUsize::new(0));
        let (wanted, count) = (Arc::clone(&want), Arc::clone(&held));
        let (port, auth) = (gateway.port(), format!("AUTH {secret}\r\n"));
        let clients = Background::spawn(move |stopped| {
            let mut open = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                while open.len() < wanted.load(Ordering::Relaxed) {
                    let mut client = RawClient::connect(port);
                    client.send(auth.as_bytes());
                    match &client.read_line()[..] {
                        b"+OK\r\n" => open.push(client),
                        b"-ERR max number of clients reached\r\n" => break,
                        other => panic!("unexpected reply {:?}", String::from_utf8_lossy(other)),
                    }
                }
                count.store(open.len(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Holder {
            wanted: want,
            held,
            clients,
        }
    }

    fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// The connections `holders` hold, sampled every 100 ms over `window`: the fewest and the most.
async fn held_over(holders: &[Holder], window: Duration) -> (usize, usize) {
    let started = Instant::now();
    let (mut fewest, mut most) = (usize::MAX, 0);
    while started.elapsed() < window {
        let held: usize = holders.iter().map(Holder::held).sum();
        (fewest, most) = (fewest.min(held), most.max(held));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (fewest, most)
}

/// 30 connections for the tenant: its clients want 40 through one gateway, 10 and 5 through the others (each
/// gateway alone would let 30 in). The fleet holds 30 (at least 27 after rebalancing, never more than 30); one
/// gateway stopped (its connections with it), the clients of the two left want more, and they hold 30 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_holds_the_tenants_connections_whatever_gateways_its_clients_use() {
    let redis = RedisServer::start();
    let control_plane = ControlPlane::start();
    let mut gateways = fleet(&control_plane, "fleet-connections");
    let secret = limited_tenant(&control_plane, &redis, json!({"max_connections": 30})).await;
    // Every gateway has had a heartbeat's answer since it took the tenant: each holds its share of the limit.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut holders: Vec<Holder> = gateways
        .iter()
        .zip([40, 10, 5])
        .map(|((gateway, _), wanted)| Holder::start(gateway, &secret, wanted))
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (fewest, most) = held_over(&holders, Duration::from_secs(3)).await;
    assert!(
        fewest >= 27 && most <= 30,
        "three gateways held {fewest} to {most} connections for a fleet limit of 30"
    );

    // Stops trying and closes every connection, then the gateway stops.
    holders.remove(0).clients.stop();
    let (stopped, cache) = gateways.remove(0);
    drop(stopped);
    let _ = std::fs::remove_file(cache);
    for holder in &holders {
        holder.wanted.store(25, Ordering::Relaxed);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (fewest, most) = held_over(&holders, Duration::from_secs(3)).await;
    assert!(
        fewest >= 27 && most <= 30,
        "the two gateways left held {fewest} to {most} connections for a fleet limit of 30"
    );
    drop(holders);
    for (_, cache) in gateways {
        let _ = std::fs::remove_file(cache);
    }
}
