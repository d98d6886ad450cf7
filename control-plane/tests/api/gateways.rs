//! `/v1/gateways`

use serde_json::json;
use sqlx::PgPool;

use crate::common::Api;

#[sqlx::test(migrations = "../migrations")]
async fn heartbeats_show_convergence(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let revision = api.revision().await;

    // Nothing serves the revision: not converged.
    let empty = api.admin("GET", "/v1/gateways", None).await;
    assert_eq!(
        empty.body,
        json!({"revision": revision, "converged": false, "live": 0, "gateways": []})
    );

    for (id, seen) in [("gw-1", revision), ("gw-2", revision - 1)] {
        let ack = api
            .gateway(
                "POST",
                "/v1/gateways/heartbeat",
                Some(json!({"id": id, "address": "127.0.0.1:6380", "revision": seen, "version": "0.1.0"})),
            )
            .await;
        assert_eq!(ack.status, 200, "{}", ack.body);
        assert_eq!(ack.body, json!({"revision": revision}));
    }
    let fleet = api.admin("GET", "/v1/gateways", None).await;
    assert_eq!(fleet.status, 200);
    assert_eq!(fleet.body["converged"], false);
    assert_eq!(fleet.body["gateways"][0]["id"], "gw-1");
    assert_eq!(fleet.body["gateways"][0]["live"], true);
    assert_eq!(fleet.body["gateways"][0]["up_to_date"], true);
    assert_eq!(fleet.body["gateways"][0]["version"], "0.1.0");
    assert_eq!(fleet.body["gateways"][1]["up_to_date"], false);

    api.gateway(
        "POST",
        "/v1/gateways/heartbeat",
        Some(json!({"id": "gw-2", "revision": revision})),
    )
    .await;
    let fleet = api.admin("GET", "/v1/gateways", None).await;
    assert_eq!(fleet.body["converged"], true);
    assert_eq!(fleet.body["live"], 2);

    // A gateway that stopped reporting no longer holds convergence back.
    sqlx::query!(
        "UPDATE gateways SET last_seen = now() - interval '10 minutes', revision = 0 WHERE id = 'gw-1'",
    )
    .execute(&api.state.pool)
    .await
    .unwrap();
    let fleet = api.admin("GET", "/v1/gateways", None).await;
    assert_eq!(fleet.body["gateways"][0]["live"], false);
    assert_eq!(fleet.body["converged"], true);
    assert_eq!(fleet.body["live"], 1);

    assert_eq!(api.revision().await, revision, "heartbeats are not changes");

    let bad = api
        .gateway(
            "POST",
            "/v1/gateways/heartbeat",
            Some(json!({"id": "", "revision": 1})),
        )
        .await;
    assert_eq!(bad.status, 422);
    let missing = api
        .gateway(
            "POST",
            "/v1/gateways/heartbeat",
            Some(json!({"id": "gw-3"})),
        )
        .await;
    assert_eq!(missing.status, 422);
}

#[sqlx::test(migrations = "../migrations")]
async fn gateways_are_removed_and_forgotten(pool: PgPool) {
    let api = Api::new(pool).await;
    for id in ["gw-1", "gw-2", "gw-old"] {
        let ack = api
            .gateway(
                "POST",
                "/v1/gateways/heartbeat",
                Some(json!({"id": id, "revision": 0})),
            )
            .await;
        assert_eq!(ack.status, 200, "{}", ack.body);
    }
    let revision = api.revision().await;

    // A dry run checks and answers, and the gateway stays.
    let dry = api
        .admin("DELETE", "/v1/gateways/gw-1?dry_run=true", None)
        .await;
    assert_eq!(dry.status, 204, "{}", dry.body);
    let missing = api
        .admin("DELETE", "/v1/gateways/nope?dry_run=true", None)
        .await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    let fleet = api.admin("GET", "/v1/gateways", None).await;
    assert!(
        fleet.body.to_string().contains("\"gw-1\""),
        "{}",
        fleet.body
    );
    let audit = api.admin("GET", "/v1/audit", None).await;
    assert!(
        !audit.body.to_string().contains("gateway.delete"),
        "{}",
        audit.body
    );

    let removed = api.admin("DELETE", "/v1/gateways/gw-1", None).await;
    assert_eq!(removed.status, 204, "{}", removed.body);
    let again = api.admin("DELETE", "/v1/gateways/gw-1", None).await;
    assert_eq!((again.status, again.error()), (404, "not_found"));
    let by_gateway = api.gateway("DELETE", "/v1/gateways/gw-2", None).await;
    assert_eq!(by_gateway.status, 403, "only admins remove gateways");
    assert_eq!(
        api.revision().await,
        revision,
        "the fleet is not in the snapshot"
    );

    let audit = api.admin("GET", "/v1/audit", None).await;
    let entry = &audit.body["entries"][0];
    assert_eq!(entry["action"], "gateway.delete", "{}", audit.body);
    assert_eq!(entry["object"], "gateways/gw-1");
    assert_eq!(entry["before"]["id"], "gw-1");
    assert_eq!(entry["revision"], revision);

    // Silent for longer than the retention (an hour by default): forgotten.
    sqlx::query!("UPDATE gateways SET last_seen = now() - interval '2 hours' WHERE id = 'gw-old'",)
        .execute(&api.state.pool)
        .await
        .unwrap();
    let fleet = api.admin("GET", "/v1/gateways", None).await;
    let ids: Vec<_> = fleet.body["gateways"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!("gw-2")], "{}", fleet.body);
}

/// The answer to gateway `id`'s heartbeat (every second) with `demand`.
async fn beat(api: &Api, id: &str, demand: serde_json::Value) -> serde_json::Value {
    let body = json!({"id": id, "revision": 0, "interval_ms": 1000, "demand": demand});
    let ack = api
        .gateway("POST", "/v1/gateways/heartbeat", Some(body))
        .await;
    assert_eq!(ack.status, 200, "{}", ack.body);
    ack.body
}

/// A heartbeat with its interval gets its shares of fleet limits: none while no gateway reports demand (each holds
/// its limits divided by the live gateways, which the answer counts), then a share by demand that never takes what
/// another gateway may still use; a tenant limited per gateway gets none.
#[sqlx::test(migrations = "../migrations")]
async fn heartbeats_hand_out_shares_of_fleet_limits(pool: PgPool) {
    let api = Api::new(pool).await;
    let limits = json!({"max_ops_per_sec": 300, "max_connections": 30});
    for tenant in [
        json!({"name": "fleet", "limits": limits}),
        json!({"name": "alone", "limits": limits, "limits_scope": "gateway"}),
    ] {
        let created = api.admin("POST", "/v1/tenants", Some(tenant)).await;
        assert_eq!(created.status, 201, "{}", created.body);
    }
    let share = |ack: &serde_json::Value, field: &str| -> f64 {
        let shares = ack["shares"].as_array().expect("shares");
        assert_eq!(shares.len(), 1, "only the fleet-limited tenant: {ack}");
        assert_eq!(shares[0]["tenant"], "fleet");
        shares[0][field].as_f64().expect("a share")
    };
    let revision = api.revision().await;
    assert_eq!(
        beat(&api, "a", json!([])).await,
        json!({"revision": revision, "live_gateways": 1})
    );
    assert_eq!(
        beat(&api, "b", json!([])).await,
        json!({"revision": revision, "live_gateways": 2})
    );

    // a asks for 1000 ops/s and holds 10 connections; b has no share yet, so it is taken to hold the even split.
    let demand = json!([
        {"tenant": "fleet", "ops_per_sec": 1000.0, "connections": 10, "connections_refused": 4},
        {"tenant": "alone", "ops_per_sec": 1000.0, "connections": 10}
    ]);
    let a = beat(&api, "a", demand.clone()).await;
    assert_eq!(
        (share(&a, "ops_per_sec"), share(&a, "connections")),
        (150.0, 15.0)
    );
    // b, idle: the floor of the rate (5% of the even split); of connections, where a asks 14 of 30, the floor and
    // half of what is spare.
    let b = beat(&api, "b", json!([])).await;
    assert_eq!(
        (share(&b, "ops_per_sec"), share(&b, "connections")),
        (7.5, 8.0)
    );
    // a again: everything b does not hold back.
    let a = beat(&api, "a", demand).await;
    assert_eq!(share(&a, "ops_per_sec"), 292.5);
    assert_eq!(share(&a, "connections"), 22.0);

    // Without its interval a heartbeat is answered as before fleet limits, and takes no part.
    let legacy = api
        .gateway(
            "POST",
            "/v1/gateways/heartbeat",
            Some(json!({"id": "c", "revision": 0})),
        )
        .await;
    assert_eq!(legacy.body, json!({"revision": revision}));
}
