//! What an operator reads of a running fleet: the logs of a real control plane and gateway (no secret in any
//! line, no colour codes in a file, JSON lines that parse, the control plane's access log with request ids)
//! and the fleet series of the gateway's `/metrics` (revision served, last sync, control-plane reachability,
//! cache file).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{
    ADMIN_TOKEN, ControlPlane, Gateway, Pki, RawClient, RedisServer, wait_for, wait_for_async,
};

const BACKEND_PASSWORD: &str = "backend-pass-9f8e7d6c5b4a";
const IMPORTED_PASSWORD: &str = "imported-pass-0a1b2c3d4e5f";
const WRONG_PASSWORD: &str = "wrong-pass-5e4d3c2b1a09";
const VALUE: &str = "value-never-logged-7c6b5a";
const WRONG_TOKEN: &str = "wrong-bearer-token-3141592653";
const QUERY_KEY: &str = "queried-key-2718281828";

/// A temporary cache file path, removed on drop.
struct CacheFile(std::path::PathBuf);

impl CacheFile {
    fn new(label: &str) -> CacheFile {
        let path = std::env::temp_dir().join(format!(
            "switchyard-observability-{label}-{}.json",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        CacheFile(path)
    }
}

impl Drop for CacheFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Waits until the gateway serves the control plane's latest revision.
async fn serves_latest(cp: &ControlPlane, gateway: &Gateway) {
    let (_, health) = cp.call("GET", "/healthz", None).await;
    let revision = health["revision"].as_i64().expect("a revision");
    wait_for_async(
        "the gateway at the latest revision",
        Duration::from_secs(10),
        || gateway.metric("switchyard_snapshot_revision") >= revision,
    )
    .await;
}

/// A whole flow at debug level (tenants with an issued secret and an imported password, resources with a
/// password in their URL, the admin and gateway tokens, both processes' TLS keys, a wrong password, a wrong
/// token, a query string): neither process writes any of those secrets, nor a value, nor a colour code, to its log file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_line_carries_a_secret_or_a_colour_code() {
    let pki = Pki::new("observability");
    let redis = RedisServer::builder().password(BACKEND_PASSWORD).start();
    let cp = ControlPlane::builder()
        .env("RUST_LOG", "debug")
        .https(&pki)
        .start();
    let with_password = format!("redis://:{BACKEND_PASSWORD}@127.0.0.1:{}", redis.port());
    let resource = json!({"name": "main", "url": format!("{with_password}/0")});
    cp.expect("POST", "/v1/resources", Some(resource), 201)
        .await;
    let issued = cp
        .create_tenant("issued", json!({"type": "single", "target": "main"}))
        .await;
    let direct = json!({"type": "single", "target": format!("{with_password}/1")});
    cp.create_tenant("imported", direct).await;
    let import = json!({"password": IMPORTED_PASSWORD, "description": "from the old proxy"});
    cp.expect(
        "POST",
        "/v1/tenants/imported/credentials",
        Some(import),
        201,
    )
    .await;
    let (status, _) = cp
        .call(
            "GET",
            &format!("/v1/tenants/issued/route/explain?key={QUERY_KEY}"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let ca = std::fs::read(pki.ca_file()).expect("the CA certificate");
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("a CA PEM"))
        .build()
        .expect("an HTTPS client");
    let refused = https
        .get(format!("{}/v1/tenants", cp.url()))
        .bearer_auth(WRONG_TOKEN)
        .send()
        .await
        .expect("a request with a wrong token");
    assert_eq!(refused.status(), 401);

    let cache = CacheFile::new("secrets");
    let listener = pki.server("gateway-observability", &["127.0.0.1", "localhost"]);
    let gateway = Gateway::builder()
        .env("RUST_LOG", "debug")
        .arg("--control-plane-ca")
        .arg(pki.ca_file().display().to_string())
        .tls(&listener, None)
        .start_with_control_plane(&cp, &cache.0);
    serves_latest(&cp, &gateway).await;
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(format!("AUTH {issued}\r\n").as_bytes(), b"+OK\r\n");
    let set = format!(
        "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n{VALUE}\r\n",
        VALUE.len()
    );
    client.roundtrip(set.as_bytes(), b"+OK\r\n");
    let mut tls = RawClient::connect_tls(gateway.tls_port(), &pki.ca_file());
    tls.roundtrip(
        format!("AUTH {IMPORTED_PASSWORD}\r\n").as_bytes(),
        b"+OK\r\n",
    );
    let reply = format!("${}\r\n{VALUE}\r\n", VALUE.len());
    tls.roundtrip(set.as_bytes(), b"+OK\r\n");
    tls.roundtrip(b"GET k\r\n", reply.as_bytes());
    let mut wrong = RawClient::connect(gateway.port());
    wrong.send(format!("AUTH {WRONG_PASSWORD}\r\n").as_bytes());
    let refused = wrong.read_line();
    assert!(
        refused.starts_with(b"-"),
        "{}",
        String::from_utf8_lossy(&refused)
    );
    // A change the gateway applies as a delta, closing the tenant's connections.
    let (status, _) = cp.call("DELETE", "/v1/tenants/imported", None).await;
    assert!((200..300).contains(&status), "DELETE answered {status}");
    serves_latest(&cp, &gateway).await;

    let key_body = |path: &std::path::Path| {
        let key = std::fs::read_to_string(path).expect("a private key");
        key.lines()
            .filter(|line| !line.starts_with("-----"))
            .max_by_key(|line| line.len())
            .expect("a PEM body")
            .to_string()
    };
    let (gateway_key, cp_key) = (key_body(&listener.key), key_body(&cp.certificate().key));
    let secrets = [
        BACKEND_PASSWORD,
        IMPORTED_PASSWORD,
        WRONG_PASSWORD,
        VALUE,
        WRONG_TOKEN,
        QUERY_KEY,
        ADMIN_TOKEN,
        cp.gateway_token(),
        &issued,
        &gateway_key,
        &cp_key,
    ];
    let logs = [("control plane", cp.log()), ("gateway", gateway.log())];
    for (process, log) in &logs {
        // Debug logging is on and the flow ran: the logs are not trivially clean.
        assert!(
            log.contains("DEBUG"),
            "{process} logged nothing at debug:\n{log}"
        );
        for secret in secrets {
            assert!(
                !log.contains(secret),
                "the {process} logged {secret}:\n{log}"
            );
        }
        assert!(
            !log.contains('\u{1b}'),
            "the {process} wrote colour codes to a file:\n{log}"
        );
    }
    // The control plane's access log: one line per request, without the query string.
    let (_, cp_log) = &logs[0];
    let access = cp_log
        .lines()
        .find(|line| line.contains("path=/v1/tenants/issued/route/explain"))
        .unwrap_or_else(|| panic!("no access line for the explain request:\n{cp_log}"));
    for field in [
        "access",
        "method=GET",
        "status=200",
        "duration_ms=",
        "request_id=",
    ] {
        assert!(access.contains(field), "{field}: {access}");
    }
    assert!(
        cp_log.lines().any(|line| line.contains("access")
            && line.contains("path=/v1/tenants ")
            && line.contains("status=401")),
        "no access line for the refused request:\n{cp_log}"
    );
}

/// The fields of one JSON log line, or the line itself when it is not a JSON object.
fn json_line(line: &str) -> Result<serde_json::Map<String, Value>, String> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(fields)) => Ok(fields),
        _ => Err(line.to_string()),
    }
}

/// `--log-format json` (the gateway's flag, the control plane's environment variable): every line is a JSON
/// object with a timestamp, level, target and message; the access line carries the request's fields and the
/// caller's request id, which the response returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line() {
    let redis = RedisServer::start();
    let cp = ControlPlane::builder()
        .env("SWITCHYARD_LOG_FORMAT", "json")
        .start();
    cp.create_tenant("acme", json!({"type": "single", "target": redis.url()}))
        .await;
    let response = reqwest::Client::new()
        .get(format!("{}/v1/tenants/acme", cp.url()))
        .bearer_auth(ADMIN_TOKEN)
        .header("X-Request-Id", "e2e-json-1")
        .send()
        .await
        .expect("GET /v1/tenants/acme");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some("e2e-json-1")
    );
    // A line logged while a request is handled carries the request's id in its span.
    let (status, _) = cp
        .call_with(
            "POST",
            "/v1/tenants",
            Some(json!({"name": "other"})),
            &[("X-Request-Id", "e2e-json-2")],
        )
        .await;
    assert_eq!(status, 201);
    // An API token is named in the access line by its name, on a refusal too.
    let viewer = cp
        .expect(
            "POST",
            "/v1/tokens",
            Some(json!({"name": "dashboards", "role": "viewer"})),
            201,
        )
        .await;
    let viewer = viewer["token"].as_str().expect("the token").to_string();
    for (method, id, status) in [("GET", "e2e-json-3", 200), ("POST", "e2e-json-4", 403)] {
        let response = reqwest::Client::new()
            .request(
                method.parse().expect("a method"),
                format!("{}/v1/tenants", cp.url()),
            )
            .bearer_auth(&viewer)
            .header("X-Request-Id", id)
            .json(&json!({"name": "x"}))
            .send()
            .await
            .expect("a call with the viewer's token");
        assert_eq!(response.status(), status);
    }
    let cache = CacheFile::new("json");
    let gateway = Gateway::builder()
        .arg("--log-format")
        .arg("json")
        .arg("--gateway-id")
        .arg("gw json/1")
        .start_with_control_plane(&cp, &cache.0);
    serves_latest(&cp, &gateway).await;

    for (process, log) in [("control plane", cp.log()), ("gateway", gateway.log())] {
        let lines: Vec<_> = log.lines().map(json_line).collect();
        assert!(lines.len() >= 2, "the {process} logged:\n{log}");
        for line in &lines {
            let fields = line.as_ref().unwrap_or_else(|line| {
                panic!("the {process} wrote a line that is not JSON: {line}")
            });
            for field in ["timestamp", "level", "target", "message"] {
                assert!(fields.contains_key(field), "{field} missing in {fields:?}");
            }
        }
    }
    wait_for(
        "a heartbeat in the access log",
        Duration::from_secs(10),
        || cp.log().contains("\"path\":\"/v1/gateways/heartbeat\""),
    );
    let cp_log = cp.log();
    let access = cp_log
        .lines()
        .filter_map(|line| json_line(line).ok())
        .find(|fields| fields["target"] == "access" && fields["request_id"] == "e2e-json-1")
        .unwrap_or_else(|| panic!("no access line with the request id:\n{cp_log}"));
    assert_eq!(access["method"], "GET");
    assert_eq!(access["path"], "/v1/tenants/acme");
    assert_eq!(access["status"], 200);
    assert!(access["duration_ms"].as_f64().is_some(), "{access:?}");
    assert!(
        access["token"]
            .as_str()
            .is_some_and(|t| t.starts_with("admin:")),
        "{access:?}"
    );
    for id in ["e2e-json-3", "e2e-json-4"] {
        let line = cp_log
            .lines()
            .filter_map(|line| json_line(line).ok())
            .find(|fields| fields["target"] == "access" && fields["request_id"] == id)
            .unwrap_or_else(|| panic!("no access line {id}:\n{cp_log}"));
        assert_eq!(line["token"], "token:dashboards", "{line:?}");
    }
    // The gateway names itself in the id of its polls and heartbeats.
    for path in ["/v1/snapshot", "/v1/gateways/heartbeat"] {
        assert!(
            cp_log
                .lines()
                .filter_map(|line| json_line(line).ok())
                .any(|fields| fields["target"] == "access"
                    && fields["path"] == path
                    && fields["request_id"]
                        .as_str()
                        .is_some_and(|id| id.starts_with("gw_json_1."))),
            "no {path} from gw_json_1:\n{cp_log}"
        );
    }
    let committed = cp_log
        .lines()
        .filter_map(|line| json_line(line).ok())
        .find(|fields| {
            fields["message"] == "change committed"
                && fields["action"] == "tenant.create"
                && fields["object"] == "tenants/other"
        })
        .unwrap_or_else(|| panic!("no 'change committed' line for the tenant:\n{cp_log}"));
    assert_eq!(
        committed["span"]["request_id"], "e2e-json-2",
        "{committed:?}"
    );
    let gateway_log = gateway.log();
    assert!(
        gateway_log
            .lines()
            .filter_map(|line| json_line(line).ok())
            .any(|fields| fields["message"] == "snapshot applied" && fields["revision"].is_i64()),
        "no structured 'snapshot applied' line:\n{gateway_log}"
    );
}

/// The series an alert on a gateway that fell behind uses: the revision served follows the control plane's, the
/// last sync is recent, the control plane is up; killed, it is down and the last sync ages; a gateway restarted
/// meanwhile says it serves its cache file, until the control plane is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_reports_how_it_follows_the_control_plane() {
    let redis = RedisServer::start();
    let mut cp = ControlPlane::start();
    cp.create_tenant("acme", json!({"type": "single", "target": redis.url()}))
        .await;
    let cache = CacheFile::new("fleet");
    let gateway = Gateway::builder().start_with_control_plane(&cp, &cache.0);
    serves_latest(&cp, &gateway).await;
    let (_, health) = cp.call("GET", "/healthz", None).await;
    let (_, cp_metrics) = cp.get_text("/metrics").await;
    let cp_revision = health["revision"].as_i64().expect("a revision");
    assert!(cp_metrics.contains(&format!("switchyard_cp_revision {cp_revision}\n")));
    assert_eq!(gateway.metric("switchyard_snapshot_revision"), cp_revision);
    assert_eq!(gateway.metric("switchyard_control_plane_up"), 1);
    assert_eq!(gateway.metric("switchyard_serving_cache_file"), 0);
    let now = unix_now();
    let synced = gateway.metric("switchyard_control_plane_last_sync_timestamp_seconds");
    assert!((now - 5..=now + 1).contains(&synced), "{synced} vs {now}");
    let version = env!("CARGO_PKG_VERSION");
    let (_, metrics) = gateway.admin_get("/metrics");
    assert!(metrics.contains(&format!(
        "switchyard_build_info{{version=\"{version}\"}} 1\n"
    )));
    assert!(
        metrics.contains("\nprocess_resident_memory_bytes "),
        "{metrics}"
    );

    cp.stop();
    wait_for(
        "the control plane seen down",
        Duration::from_secs(10),
        || gateway.metric("switchyard_control_plane_up") == 0,
    );
    drop(gateway);
    let restarted = Gateway::builder().start_with_control_plane(&cp, &cache.0);
    assert_eq!(restarted.metric("switchyard_serving_cache_file"), 1);
    assert_eq!(
        restarted.metric("switchyard_snapshot_revision"),
        cp_revision
    );
    assert_eq!(restarted.metric("switchyard_control_plane_up"), 0);
    assert_eq!(
        restarted.metric("switchyard_control_plane_last_sync_timestamp_seconds"),
        0
    );
    cp.restart();
    let started = Instant::now();
    wait_for("the control plane back", Duration::from_secs(20), || {
        restarted.metric("switchyard_serving_cache_file") == 0
            && restarted.metric("switchyard_control_plane_up") == 1
    });
    assert!(started.elapsed() < Duration::from_secs(20));
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
