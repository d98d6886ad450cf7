//! A tenant's keys and memory, asked of its real Redis by a real control plane: exact for a tenant that owns its
//! database, a sampled estimate for tenants that share one under key namespaces, in the API and
//! `switchyard-ctl tenants keyspace`.

use serde_json::json;
use switchyard_tests::{ControlPlane, Ctl, RedisServer};

/// Writes `count` keys named `prefix` + a number into database `db`.
fn fill(redis: &RedisServer, db: i64, prefix: &str, count: usize) {
    let mut con = redis.client();
    let mut pipe = redis::pipe();
    pipe.cmd("SELECT").arg(db).ignore();
    for i in 0..count {
        pipe.cmd("SET")
            .arg(format!("{prefix}{i}"))
            .arg("v".repeat(100))
            .ignore();
    }
    let () = pipe.query(&mut con).expect("the keys written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_counted_where_owned_and_estimated_under_a_namespace() {
    let redis = RedisServer::start();
    let cp = ControlPlane::start();
    let own = format!("{}/1", redis.url());
    let shared = format!("{}/2", redis.url());
    cp.create_tenant("whole", json!({"type": "single", "target": own}))
        .await;
    for name in ["alpha", "beta"] {
        cp.create_tenant_with(
            json!({"name": name, "namespace": format!("{name}:")}),
            json!({"type": "single", "target": shared}),
        )
        .await;
    }
    fill(&redis, 1, "k", 300);
    fill(&redis, 2, "alpha:", 600);
    fill(&redis, 2, "beta:", 200);

    let whole = cp
        .expect("GET", "/v1/tenants/whole/keyspace", None, 200)
        .await;
    assert_eq!(whole["method"], "exact", "{whole}");
    assert!(whole["shared_with"].is_null(), "{whole}");
    assert_eq!(whole["keys"], 300, "{whole}");
    assert_eq!(whole["servers"][0]["server_keys"], 1100, "{whole}");
    let memory = whole["memory_bytes"].as_u64().unwrap_or(0);
    let used = whole["servers"][0]["used_memory"].as_u64().unwrap_or(0);
    // Its share of the server's memory: 300 of the 1,100 keys.
    assert!(
        memory > 0 && memory.abs_diff(used * 300 / 1100) <= 1,
        "{whole}"
    );

    // 400 random keys of 800: alpha's share is 0.75 (one standard deviation 0.022), beta's 0.25.
    let alpha = cp
        .expect("GET", "/v1/tenants/alpha/keyspace", None, 200)
        .await;
    assert_eq!(alpha["method"], "sampled", "{alpha}");
    assert_eq!(alpha["shared_with"], json!(["beta"]), "{alpha}");
    assert_eq!(alpha["servers"][0]["db_keys"], 800, "{alpha}");
    let keys = alpha["keys"].as_u64().unwrap_or(0);
    assert!((520..=680).contains(&keys), "{alpha}");
    let beta = cp
        .expect("GET", "/v1/tenants/beta/keyspace", None, 200)
        .await;
    let keys = beta["keys"].as_u64().unwrap_or(0);
    assert!((120..=280).contains(&keys), "{beta}");

    let shown = Ctl::new(&cp).ok(&["tenants", "keyspace", "whole"]);
    assert!(
        shown.contains("KEYS") && shown.contains("300") && shown.contains("exact"),
        "{shown}"
    );

    // A Redis that is gone: the answer says why, with no figures.
    drop(redis);
    let gone = cp
        .expect("GET", "/v1/tenants/whole/keyspace", None, 200)
        .await;
    assert!(
        gone["keys"].is_null() && gone["error"].is_string(),
        "{gone}"
    );
}
