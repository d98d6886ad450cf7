//! `/metrics` bounded by activity: a real gateway and redis-server, tenants connecting and going quiet, the
//! exposition read off the admin port as Prometheus would.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{Gateway, RawClient, RedisServer, wait_for};

/// Tenants `t0` .. `t{n-1}`, password `pw-tN`, all on one Redis.
fn tenants(backend: &RedisServer, n: usize) -> Value {
    let tenants: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("t{i}"), "passwords": [format!("pw-t{i}")], "route": {"type": "single", "target": backend.url()}}))
        .collect();
    json!({ "tenants": tenants })
}

fn authed(gateway: &Gateway, tenant: usize) -> RawClient {
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(format!("AUTH pw-t{tenant}\r\n").as_bytes(), b"+OK\r\n");
    client
}

fn has_series_of(metrics: &str, tenant: &str) -> bool {
    metrics.contains(&format!("tenant=\"{tenant}\""))
}

#[test]
fn idle_tenants_leave_the_exposition_and_the_gateway_totals_still_count_them() {
    let backend = RedisServer::start();
    let gateway = Gateway::builder()
        .arg("--metrics-active-window-s")
        .arg("2")
        .start(&tenants(&backend, 50));
    let (_, metrics) = gateway.admin_get("/metrics");
    assert!(metrics.contains("switchyard_tenants 50\n"), "{metrics}");
    assert!(
        metrics.contains("switchyard_tenants_active 0\n"),
        "{metrics}"
    );
    assert!(!metrics.contains("tenant=\"t"), "{metrics}");

    // t1 does three SETs and leaves; t2 does one and stays connected.
    let mut quick = authed(&gateway, 1);
    for _ in 0..3 {
        quick.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    }
    quick.roundtrip(b"QUIT\r\n", b"+OK\r\n");
    quick.expect_closed();
    let mut stays = authed(&gateway, 2);
    stays.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    wait_for("t1's connection gone", Duration::from_secs(10), || {
        gateway.metric("switchyard_gateway_tenant_connections") == 1
    });
    let (_, metrics) = gateway.admin_get("/metrics");
    assert!(
        metrics.contains("switchyard_commands_total{tenant=\"t1\",command=\"set\"} 3\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchyard_tenant_connections{tenant=\"t2\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchyard_tenants_active 2\n"),
        "{metrics}"
    );
    assert!(!has_series_of(&metrics, "t3"), "{metrics}");

    // Past the window, t1 is gone; t2 stays while its connection is open; the totals still count both.
    wait_for("t1 idle past the window", Duration::from_secs(20), || {
        !has_series_of(&gateway.admin_get("/metrics").1, "t1")
    });
    let (_, metrics) = gateway.admin_get("/metrics");
    assert!(has_series_of(&metrics, "t2"), "{metrics}");
    assert!(
        metrics.contains("switchyard_tenants_active 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchyard_gateway_commands_total{command=\"set\"} 4\n"),
        "{metrics}"
    );
    // The gateway-wide histogram times t1's SETs too (t2 alone has done one command beside its AUTH), among the
    // writes.
    let writes = "switchyard_gateway_command_duration_seconds_count{family=\"write\"}";
    assert_eq!(gateway.metric(writes), 4);
    // Per-tenant histograms are opt-in.
    assert!(
        !metrics.contains("switchyard_command_duration_seconds_count{"),
        "{metrics}"
    );

    // Back from idle, t1's series returns with everything it ever counted.
    let mut back = authed(&gateway, 1);
    back.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    assert_eq!(
        gateway.metric("switchyard_commands_total{tenant=\"t1\",command=\"set\"}"),
        4
    );
}

#[test]
fn per_tenant_latency_histograms_are_written_with_the_flag() {
    let backend = RedisServer::start();
    let gateway = Gateway::builder()
        .arg("--metrics-tenant-latency")
        .start(&tenants(&backend, 3));
    let mut client = authed(&gateway, 0);
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    client.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n");
    let (_, metrics) = gateway.admin_get("/metrics");
    assert!(
        metrics.contains("switchyard_command_duration_seconds_bucket{tenant=\"t0\",le=\"+Inf\"}"),
        "{metrics}"
    );
    assert!(!has_series_of(&metrics, "t1"), "{metrics}");
}

#[test]
fn a_scrape_of_many_tenants_does_not_hold_up_new_connections() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&tenants(&backend, 100_000));
    authed(&gateway, 0).roundtrip(b"PING\r\n", b"+PONG\r\n");
    // New connections one after another while a scrape sums 100,000 tenants' counters.
    let (scrape, slowest) = std::thread::scope(|scope| {
        let scraper = scope.spawn(|| {
            let started = Instant::now();
            assert_eq!(gateway.admin_get("/metrics").0, 200);
            started.elapsed()
        });
        let mut slowest = Duration::ZERO;
        while !scraper.is_finished() {
            let started = Instant::now();
            authed(&gateway, 0).roundtrip(b"PING\r\n", b"+PONG\r\n");
            slowest = slowest.max(started.elapsed());
        }
        (scraper.join().expect("the scrape"), slowest)
    });
    assert!(
        scrape > Duration::from_millis(50),
        "the scrape took {scrape:?}: too quick to tell"
    );
    assert!(
        slowest < scrape / 2,
        "a new connection took {slowest:?} during a scrape of {scrape:?}"
    );
}

#[test]
fn bytes_each_way_and_each_backends_latency_and_error_replies_are_counted() {
    let backend = RedisServer::start();
    let gateway = Gateway::builder().start(&tenants(&backend, 2));
    let node = format!("backend=\"127.0.0.1:{}\"", backend.port());
    let series = |name: &str| format!("{name}{{{node}}}");
    let timed_before = gateway.metric(&series("switchyard_backend_request_duration_seconds_count"));
    let mut client = RawClient::connect(gateway.port());
    let exchanges: [(&[u8], &[u8]); 4] = [
        (b"AUTH pw-t0\r\n", b"+OK\r\n"),
        (b"SET k value\r\n", b"+OK\r\n"),
        (b"GET k\r\n", b"$5\r\nvalue\r\n"),
        (
            b"INCR k\r\n",
            b"-ERR value is not an integer or out of range\r\n",
        ),
    ];
    for (request, reply) in exchanges {
        client.roundtrip(request, reply);
    }
    let received: usize = exchanges.iter().map(|(request, _)| request.len()).sum();
    let sent: usize = exchanges.iter().map(|(_, reply)| reply.len()).sum();
    let tenant = |name: &str| gateway.metric(&format!("{name}{{tenant=\"t0\"}}"));
    assert_eq!(tenant("switchyard_received_bytes_total"), received as i64);
    assert_eq!(tenant("switchyard_sent_bytes_total"), sent as i64);
    assert_eq!(
        gateway.metric("switchyard_gateway_received_bytes_total"),
        received as i64
    );
    // The backend node answered the three commands, one with an error.
    let timed = gateway.metric(&series("switchyard_backend_request_duration_seconds_count"));
    assert_eq!(timed - timed_before, 3);
    assert_eq!(
        gateway.metric(&series("switchyard_backend_error_replies_total")),
        1
    );
    let (_, metrics) = gateway.admin_get("/metrics");
    assert!(
        metrics.contains(&format!(
            "switchyard_backend_request_duration_seconds_bucket{{{node},le=\"+Inf\"}} {timed}\n"
        )),
        "{metrics}"
    );
    // INFO shows the tenant the same figures, as Redis shows its own.
    let info = String::from_utf8_lossy(&client.request(&[b"INFO", b"stats"])).into_owned();
    assert!(
        info.contains(&format!("total_net_input_bytes:{received}\r\n")),
        "{info}"
    );
    assert!(
        info.contains(&format!("total_net_output_bytes:{sent}\r\n")),
        "{info}"
    );
}
