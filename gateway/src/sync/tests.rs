//! The sync loop against scripted control planes over real sockets.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::state::test_config;

const BASE: &str = "http://cp.example:8080/";

fn next_url(served: &Snapshot, rejected: Option<i64>, full: bool) -> reqwest::Url {
    let (after, epoch) = next_poll(served, rejected, full);
    snapshot_url(BASE, after, epoch.as_deref(), POLL_WAIT).unwrap()
}

/// The poll asks for a delta (passes `epoch` with `after`) only when the served snapshot names an epoch and
/// no full snapshot is wanted; the epoch travels URL-encoded.
#[test]
fn the_poll_carries_the_epoch_only_when_a_delta_may_apply() {
    let gateway = Gateway::new(test_config(), None);
    let start = "http://cp.example:8080/v1/snapshot?wait=30000ms";
    // The first poll: nothing served yet.
    assert_eq!(next_url(&gateway.snapshot(), None, false).as_str(), start);
    // A control plane that names no epoch is never sent one.
    gateway
        .apply_control_plane(br#"{"revision":4,"tenants":[]}"#)
        .unwrap();
    let url = next_url(&gateway.snapshot(), None, false);
    assert_eq!(url.as_str(), format!("{start}&after=4"));

    let epoch = "db 1/&=+é";
    let body = format!(r#"{{"revision":5,"epoch":"{epoch}","tenants":[]}}"#);
    gateway.apply_control_plane(body.as_bytes()).unwrap();
    let url = next_url(&gateway.snapshot(), None, false);
    assert_eq!(
        url.as_str(),
        format!("{start}&after=5&epoch=db+1%2F%26%3D%2B%C3%A9")
    );
    let sent: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    assert_eq!(sent[2], ("epoch".to_string(), epoch.to_string()));
    // After a delta that did not apply: a full snapshot after the revision served; after a rejected one,
    // a full snapshot after the rejected revision.
    let url = next_url(&gateway.snapshot(), None, true);
    assert_eq!(url.as_str(), format!("{start}&after=5"));
    let url = next_url(&gateway.snapshot(), Some(7), true);
    assert_eq!(url.as_str(), format!("{start}&after=7"));
}

fn tenant(name: &str) -> String {
    crate::cache::test_tenant(name, 1)
}

/// Holds `stream` open without answering, as a control plane with nothing new (or a hung one) would.
fn hold(stream: tokio::net::TcpStream) {
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(stream);
    });
}

/// A control plane that answers each `GET /v1/snapshot` with the next scripted (status, body), records what
/// was asked, and once the script is done holds the poll open; heartbeats get 200. Once the flag returned is
/// set it goes silent: it accepts connections and answers nothing.
async fn scripted_control_plane(
    script: Vec<(u16, String)>,
) -> (String, Arc<Mutex<Vec<String>>>, Arc<AtomicBool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let asked = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&asked);
    let silent = Arc::new(AtomicBool::new(false));
    let silenced = Arc::clone(&silent);
    tokio::spawn(async move {
        let mut script = script.into_iter();
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let mut chunk = [0u8; 1024];
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                }
            }
            let line = String::from_utf8_lossy(&head)
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            if silenced.load(Ordering::Relaxed) {
                hold(stream);
                continue;
            }
            let (status, body) = match line.strip_prefix("GET ") {
                Some(request) => {
                    let path = request.split(' ').next().unwrap_or("").to_string();
                    record.lock().unwrap().push(path);
                    match script.next() {
                        Some(answer) => answer,
                        None => {
                            hold(stream);
                            continue;
                        }
                    }
                }
                None => (200, "{}".to_string()),
            };
            let response = format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        }
    });
    (url, asked, silent)
}

/// The sample lines of the gateway's `switchyard_snapshot_*`, `switchyard_control_plane_*` and
/// `switchyard_serving_*` series.
fn fleet_series(gateway: &Gateway) -> Vec<String> {
    let config = crate::MetricsConfig {
        active_window: Duration::from_secs(1),
        tenant_latency: false,
    };
    let text = gateway
        .metrics
        .render(&[], gateway.snapshot().revision, &config, Instant::now());
    text.lines()
        .filter(|line| {
            [
                "switchyard_snapshot_",
                "switchyard_control_plane_",
                "switchyard_serving_",
            ]
            .iter()
            .any(|prefix| line.starts_with(prefix))
        })
        .map(str::to_string)
        .collect()
}

/// Follows the control plane at `urls` (its replicas), with a cache file.
fn follower(urls: Vec<String>, cache: &std::path::Path, gateway: &Gateway) -> Sync {
    let config = ControlPlaneConfig {
        urls,
        token: "t".to_string(),
        ca_file: None,
        cache_file: Some(cache.to_path_buf()),
        gateway_id: "g".to_string(),
        heartbeat_interval: Duration::from_secs(2),
    };
    Sync::new(config, Arc::clone(&gateway.metrics)).unwrap()
}

/// The whole loop against a control plane: the first poll asks for a full snapshot, then deltas are asked
/// for with the epoch; a delta that does not apply is rejected and a full snapshot asked for; a 400 to the
/// epoch makes the gateway ask without it; the cache file ends as the full snapshot served, and a gateway
/// started from it asks for deltas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_asks_for_deltas_and_falls_back_to_full_snapshots() {
    let (a, b, c) = (tenant("a"), tenant("b"), tenant("c"));
    let delta = |after: i64, revision: i64, tenants: &str| {
        format!(
            r#"{{"revision":{revision},"epoch":"e 1","tenants":[{tenants}],"delta":{{"after":{after},"removed_tenants":[]}}}}"#
        )
    };
    let full_6 = format!(r#"{{"revision":6,"epoch":"e 1","tenants":[{a},{b},{c}]}}"#);
    let full_7 = format!(r#"{{"revision":7,"epoch":"e 1","tenants":[{a},{b},{c}]}}"#);
    let script = vec![
        (
            200,
            format!(r#"{{"revision":3,"epoch":"e 1","tenants":[{a}]}}"#),
        ),
        (200, delta(3, 4, &b)),
        (200, delta(2, 5, &c)),
        (200, full_6.clone()),
        (400, "unknown parameter epoch".to_string()),
        (304, String::new()),
        (200, full_7.clone()),
        (304, String::new()),
    ];
    let (url, asked, _) = scripted_control_plane(script).await;
    let cache = std::env::temp_dir().join(format!("switchyard-sync-{}.json", std::process::id()));
    let gateway = Arc::new(Gateway::new(test_config(), None));
    let sync = follower(vec![url], &cache, &gateway);
    sync.bootstrap(&gateway).await;
    tokio::spawn(Arc::new(sync).run(Arc::clone(&gateway)));

    let deadline = Instant::now() + Duration::from_secs(10);
    while asked.lock().unwrap().len() < 9 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let poll = "/v1/snapshot?wait=30000ms";
    assert_eq!(
        *asked.lock().unwrap(),
        [
            "/v1/snapshot?wait=0ms".to_string(),
            format!("{poll}&after=3&epoch=e+1"),
            format!("{poll}&after=4&epoch=e+1"),
            format!("{poll}&after=4"),
            format!("{poll}&after=6&epoch=e+1"),
            format!("{poll}&after=6"),
            format!("{poll}&after=6"),
            // Refused once, the epoch is not sent again, also after the next snapshot.
            format!("{poll}&after=7"),
            format!("{poll}&after=7"),
        ]
    );
    let snapshot = gateway.snapshot();
    let names: Vec<&str> = snapshot.tenants().iter().map(|t| t.name.as_str()).collect();
    assert_eq!((snapshot.revision, names), (Some(7), vec!["a", "b", "c"]));
    let metrics = &gateway.metrics;
    let count = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    assert_eq!(count(&metrics.snapshots_applied_full), 3);
    assert_eq!(count(&metrics.snapshots_applied_delta), 1);
    assert_eq!(count(&metrics.snapshots_rejected), 1);
    let health = fleet_series(&gateway);
    assert!(health.contains(&"switchyard_serving_cache_file 0".to_string()));
    assert!(health.contains(&"switchyard_control_plane_up 1".to_string()));
    assert!(
        !health.contains(&"switchyard_control_plane_last_sync_timestamp_seconds 0".to_string())
    );
    let expected: switchyard_schemas::Snapshot = serde_json::from_str(&full_7).unwrap();
    let written = loop {
        let written = std::fs::read(&cache)
            .ok()
            .and_then(|body| serde_json::from_slice::<switchyard_schemas::Snapshot>(&body).ok());
        match written {
            Some(written) if written.revision == 7 => break written,
            _ if Instant::now() > deadline => panic!("the cache file never reached revision 7"),
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    assert_eq!(written, expected);

    // A gateway restarted while the control plane fails serves its cache file, and goes on with deltas.
    let (url, asked, _) = scripted_control_plane(vec![(503, String::new())]).await;
    let restarted = Arc::new(Gateway::new(test_config(), None));
    let sync = follower(vec![url], &cache, &restarted);
    sync.bootstrap(&restarted).await;
    assert_eq!(restarted.snapshot().revision, Some(7));
    let health = fleet_series(&restarted);
    for series in [
        "switchyard_snapshot_revision 7",
        "switchyard_serving_cache_file 1",
        // A 503 is an answer: the control plane is reachable, only not syncing.
        "switchyard_control_plane_up 1",
        "switchyard_control_plane_last_sync_timestamp_seconds 0",
    ] {
        assert!(health.contains(&series.to_string()), "{series}: {health:?}");
    }
    tokio::spawn(Arc::new(sync).run(Arc::clone(&restarted)));
    while asked.lock().unwrap().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        *asked.lock().unwrap(),
        [
            "/v1/snapshot?wait=0ms".to_string(),
            // Not known to be current yet: the poll asks for an answer at once.
            "/v1/snapshot?wait=0ms&after=7&epoch=e+1".to_string()
        ]
    );
    let _ = std::fs::remove_file(&cache);
}

/// Three replicas: the first refuses connections, so the start follows the second; when that one goes silent
/// (accepts connections, answers nothing: its long-poll would hold for 30 s) the gateway moves to the third within
/// a few seconds, asks it at once for the delta after the revision the second gave (one history across replicas),
/// and `/metrics` says which replica it follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_or_silent_replica_is_left_for_the_next() {
    let (a, b) = (tenant("a"), tenant("b"));
    let first = format!(r#"{{"revision":3,"epoch":"e 1","tenants":[{a}]}}"#);
    let delta = format!(
        r#"{{"revision":4,"epoch":"e 1","tenants":[{b}],"delta":{{"after":3,"removed_tenants":[]}}}}"#
    );
    let refusing = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let (second, second_asked, silence) = scripted_control_plane(vec![(200, first)]).await;
    let (third, third_asked, _) = scripted_control_plane(vec![(200, delta)]).await;
    let cache =
        std::env::temp_dir().join(format!("switchyard-failover-{}.json", std::process::id()));
    let gateway = Arc::new(Gateway::new(test_config(), None));
    let urls = vec![refusing.clone(), second.clone(), third.clone()];
    let sync = follower(urls, &cache, &gateway);
    sync.bootstrap(&gateway).await;
    assert_eq!(gateway.snapshot().revision, Some(3));
    tokio::spawn(Arc::new(sync).run(Arc::clone(&gateway)));
    // Following the second replica: its long-poll is held.
    let deadline = Instant::now() + Duration::from_secs(5);
    while second_asked.lock().unwrap().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let following = |url: &str, followed: u8| {
        format!(r#"switchyard_control_plane_following{{url="{url}",address=""}} {followed}"#)
    };
    let health = fleet_series(&gateway);
    for series in [
        following(&refusing, 0),
        following(&second, 1),
        following(&third, 0),
        "switchyard_control_plane_failovers_total 1".to_string(),
    ] {
        assert!(health.contains(&series), "{series}: {health:?}");
    }

    silence.store(true, Ordering::Relaxed);
    let silenced = Instant::now();
    while gateway.snapshot().revision != Some(4) {
        assert!(
            silenced.elapsed() < Duration::from_secs(8),
            "still on the silent replica: {health:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = silenced.elapsed();
    assert!(
        took < Duration::from_secs(6),
        "left the silent replica after {took:?}"
    );
    assert_eq!(
        third_asked.lock().unwrap().first().map(String::as_str),
        Some("/v1/snapshot?wait=0ms&after=3&epoch=e+1")
    );
    assert_eq!(
        gateway
            .metrics
            .snapshots_applied_delta
            .load(Ordering::Relaxed),
        1
    );
    let health = fleet_series(&gateway);
    for series in [
        following(&second, 0),
        following(&third, 1),
        "switchyard_control_plane_failovers_total 2".to_string(),
    ] {
        assert!(health.contains(&series), "{series}: {health:?}");
    }
    let _ = std::fs::remove_file(&cache);
}
