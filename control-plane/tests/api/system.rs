//! `/healthz`, `/metrics`, `/openapi.json`

use serde_json::json;
use sqlx::PgPool;

use crate::common::Api;

#[sqlx::test(migrations = "../migrations")]
async fn health_metrics_and_openapi(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let health = api.request("GET", "/healthz", None, &[], None).await;
    assert_eq!(health.status, 200);
    assert_eq!(health.body["status"], "ok");
    assert_eq!(health.body["revision"], 1);

    let metrics = api.request("GET", "/metrics", None, &[], None).await;
    assert_eq!(metrics.status, 200);
    let text = metrics.body.as_str().unwrap();
    assert!(text.contains("switchyard_cp_revision 1"), "{text}");
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        text.contains(&format!(
            "switchyard_build_info{{version=\"{version}\"}} 1\n"
        )),
        "{text}"
    );
    for family in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(text.contains(&format!("\n{family} ")), "{family}: {text}");
    }
    assert!(
        text.contains("switchyard_cp_responses_total{class=\"2xx\"}"),
        "{text}"
    );

    let openapi = api.request("GET", "/openapi.json", None, &[], None).await;
    assert_eq!(openapi.status, 200);
    assert_eq!(openapi.body["openapi"], "3.1.0");
    assert_eq!(openapi.body, switchyard_control_plane::openapi_document());

    // Without a database the service says so instead of pretending.
    // Calling close() marks the pool closed at once; awaiting it would wait for the LISTEN connection forever.
    drop(api.state.pool.close());
    let down = api.request("GET", "/healthz", None, &[], None).await;
    assert_eq!(down.status, 503);
    assert_eq!(down.body["status"], "database unavailable");
    // Any other request that needs it gets the one internal-error answer; the cause is only logged.
    let failed = api.admin("GET", "/v1/tenants", None).await;
    assert_eq!(failed.status, 500);
    assert_eq!(
        failed.body,
        json!({"error": "internal", "message": "internal error", "details": []})
    );
}

async fn request_id(api: &Api, headers: &[(&str, &str)]) -> String {
    let reply = api.request("GET", "/healthz", None, headers, None).await;
    reply.header("x-request-id").unwrap_or("").to_string()
}

/// Every response carries an `X-Request-Id`: the caller's when it is a plain token, else a new one (also when
/// the caller's could forge a log line).
#[sqlx::test(migrations = "../migrations")]
async fn every_response_carries_a_request_id(pool: PgPool) {
    let api = Api::new(pool).await;
    assert_eq!(
        request_id(&api, &[("x-request-id", "lb-7f3a.1:2_x")]).await,
        "lb-7f3a.1:2_x"
    );
    let generated = [
        request_id(&api, &[]).await,
        request_id(&api, &[]).await,
        request_id(&api, &[("x-request-id", "forged\" level=ERROR")]).await,
        request_id(&api, &[("x-request-id", &"x".repeat(200))]).await,
    ];
    for one in &generated {
        assert!(
            one.len() == 16 && one.bytes().all(|b| b.is_ascii_hexdigit()),
            "{generated:?}"
        );
    }
    assert_ne!(generated[0], generated[1]);
    // Unknown paths and refused requests get one too.
    let refused = api.request("GET", "/v1/tenants", None, &[], None).await;
    assert_eq!(refused.status, 401);
    assert_eq!(refused.header("x-request-id").map(str::len), Some(16));
}

/// An unfinished migration shows in `/metrics` by state, with when it last changed; a finished one is gone.
#[sqlx::test(migrations = "../migrations")]
async fn unfinished_migrations_are_in_the_metrics(pool: PgPool) {
    let api = Api::new(pool).await;
    let scrape = async || {
        let reply = api.request("GET", "/metrics", None, &[], None).await;
        reply.body.as_str().unwrap_or_default().to_string()
    };
    let text = scrape().await;
    assert!(
        text.contains("switchyard_cp_migrations{state=\"double_write\"} 0\n"),
        "{text}"
    );
    api.create_tenant("acme").await;
    let route = json!({"type": "single", "target": "redis://127.0.0.1:7001"});
    assert_eq!(api.put_route("acme", route).await.status, 200);
    let started = api
        .admin(
            "POST",
            "/v1/tenants/acme/migrations",
            Some(json!({"to": {"type": "single", "target": "redis://127.0.0.1:7002"}})),
        )
        .await;
    assert_eq!(started.status, 201, "{}", started.body);
    let id = started.body["id"].as_i64().unwrap();
    let text = scrape().await;
    assert!(
        text.contains("switchyard_cp_migrations{state=\"double_write\"} 1\n"),
        "{text}"
    );
    let updated = format!(
        "switchyard_cp_migration_updated_timestamp_seconds{{tenant=\"acme\",migration=\"{id}\",state=\"double_write\"}} "
    );
    let at: i64 = text
        .lines()
        .find_map(|line| line.strip_prefix(&updated))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {updated} in {text}"));
    let now = chrono::Utc::now().timestamp();
    assert!((now - 60..=now + 1).contains(&at), "{at} vs {now}");
    let aborted = api
        .admin(
            "POST",
            &format!("/v1/tenants/acme/migrations/{id}/abort"),
            None,
        )
        .await;
    assert_eq!(aborted.status, 200, "{}", aborted.body);
    let text = scrape().await;
    assert!(
        text.contains("switchyard_cp_migrations{state=\"double_write\"} 0\n"),
        "{text}"
    );
    assert!(!text.contains("migration=\""), "{text}");
}

/// `/metrics` counts the gateways by their heartbeats, and those that report an older revision than the latest.
#[sqlx::test(migrations = "../migrations")]
async fn gateways_behind_are_counted(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let revision = api.revision().await;
    for (id, at) in [("gw-current", revision), ("gw-behind", revision - 1)] {
        let beat =
            json!({"id": id, "address": "127.0.0.1:6380", "revision": at, "version": "0.1.0"});
        let reply = api
            .gateway("POST", "/v1/gateways/heartbeat", Some(beat))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let reply = api.request("GET", "/metrics", None, &[], None).await;
    let text = reply.body.as_str().unwrap_or_default();
    for line in [
        "switchyard_cp_gateways{state=\"live\"} 2\n",
        "switchyard_cp_gateways{state=\"stale\"} 0\n",
        "switchyard_cp_gateways_behind 1\n",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}
