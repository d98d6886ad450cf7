//! Snapshot deltas end to end: a gateway that followed a long random sequence of changes as deltas, across a
//! control-plane restart, serves exactly what a gateway started fresh from the whole snapshot serves.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fastrand::Rng;
use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Gateway, RedisServer};

const TENANTS: usize = 2000;
const STEPS: usize = 400;

fn password(n: usize) -> String {
    format!("password-number-{n:08}")
}

/// What the test knows each tenant's passwords to be: credential id -> password.
type Passwords = BTreeMap<String, BTreeMap<i64, String>>;

async fn add_password(cp: &ControlPlane, tenant: &str, n: usize, passwords: &mut Passwords) {
    let path = format!("/v1/tenants/{tenant}/credentials");
    let (status, body) = cp
        .call("POST", &path, Some(json!({"password": password(n)})))
        .await;
    if status == 201 {
        let id = body["id"].as_i64().expect("a credential id");
        passwords
            .entry(tenant.to_string())
            .or_default()
            .insert(id, password(n));
    }
}

/// Waits until `gateway` reports `revision` to the control plane.
async fn reaches(cp: &ControlPlane, gateway: &Gateway, revision: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, served) = gateway.admin_get("/tenants");
        let served: Value = serde_json::from_str(&served).unwrap_or_default();
        if served["revision"].as_i64() >= Some(revision) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not reach revision {revision}: {}",
            cp.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a gateway serves, without what differs between two gateways serving the same (their own generation).
fn served(gateway: &Gateway) -> Value {
    let (status, body) = gateway.admin_get("/tenants");
    assert_eq!(status, 200, "{body}");
    let mut served: Value = serde_json::from_str(&body).expect("JSON from /tenants");
    served
        .as_object_mut()
        .expect("an object")
        .remove("generation");
    served
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_following_deltas_serves_what_a_fresh_one_does() {
    let redis = [RedisServer::start(), RedisServer::start()];
    let mut cp = ControlPlane::start();
    for (name, server) in ["a", "b"].iter().zip(&redis) {
        let resource = json!({"name": name, "url": server.url()});
        cp.expect("POST", "/v1/resources", Some(resource), 201)
            .await;
    }
    let targets = |dice: &mut Rng| match dice.usize(..4) {
        0 => json!("a"),
        1 => json!("b"),
        _ => json!(format!(
            "{}/{}",
            redis[dice.usize(..2)].url(),
            dice.usize(..16)
        )),
    };
    let mut dice = Rng::with_seed(0x0123_4567_89ab_cdef);
    let imports: Vec<_> = (0..TENANTS)
        .map(|n| {
            json!({"tenant": {"name": format!("t{n}")}, "credentials": [{"password": password(n)}],
                   "route": {"type": "single", "target": targets(&mut dice)}})
        })
        .collect();
    let imported = cp
        .expect("POST", "/v1/import", Some(json!({"tenants": imports})), 201)
        .await;
    let mut passwords = Passwords::new();
    for (n, tenant) in imported["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .enumerate()
    {
        let id = tenant["credentials"][0]["id"].as_i64().expect("an id");
        passwords
            .entry(format!("t{n}"))
            .or_default()
            .insert(id, password(n));
    }
    let dir = std::env::temp_dir().join(format!("switchyard-deltas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let follower = Gateway::builder().start_with_control_plane(&cp, &dir.join("follower.json"));
    reaches(
        &cp,
        &follower,
        imported["revision"].as_i64().expect("a revision"),
    )
    .await;

    let mut revoked = Vec::new();
    let mut next_password = TENANTS;
    for step in 0..STEPS {
        if step == STEPS / 2 {
            cp.stop();
            cp.restart();
        }
        // Mostly the tenants a previous step created, so that creates, deletes and re-creates meet.
        let tenant = format!("t{}", dice.usize(..TENANTS + 50));
        let path = format!("/v1/tenants/{tenant}");
        let (status, _) = match dice.usize(..10) {
            0 | 1 => {
                cp.call("POST", "/v1/tenants", Some(json!({"name": tenant})))
                    .await;
                next_password += 1;
                add_password(&cp, &tenant, next_password, &mut passwords).await;
                let route = json!({"route": {"type": "single", "target": targets(&mut dice)}});
                cp.call("PUT", &format!("{path}/route"), Some(route)).await
            }
            2 => {
                let route = json!({"route": {"type": "single", "target": targets(&mut dice)}});
                cp.call("PUT", &format!("{path}/route"), Some(route)).await
            }
            3 => {
                next_password += 1;
                add_password(&cp, &tenant, next_password, &mut passwords).await;
                (200, Value::Null)
            }
            4 => {
                let owned = passwords.get_mut(&tenant).and_then(|ids| ids.pop_first());
                match owned {
                    Some((id, secret)) => {
                        revoked.push(secret);
                        cp.call("DELETE", &format!("{path}/credentials/{id}"), None)
                            .await
                    }
                    None => (404, Value::Null),
                }
            }
            5 | 6 => {
                let patch = json!({"disabled": dice.usize(..4) == 0, "allow_admin": dice.usize(..3) == 0,
                                   "limits": {"max_connections": 1 + dice.usize(..1000)}});
                cp.call("PATCH", &path, Some(patch)).await
            }
            7 => {
                let (name, server) = if dice.usize(..2) == 0 {
                    ("a", 1)
                } else {
                    ("b", 0)
                };
                // Forced: the point is the deltas, not the keys the move leaves behind.
                let url = json!({"url": format!("{}/{}", redis[server].url(), dice.usize(..16)), "force": true});
                cp.call("PUT", &format!("/v1/resources/{name}"), Some(url))
                    .await
            }
            _ => {
                passwords.remove(&tenant);
                cp.call("DELETE", &path, None).await
            }
        };
        assert!(status < 500, "step {step}: {status}\n{}", cp.log());
    }

    let revision = cp.expect("GET", "/v1/gateways", None, 200).await["revision"]
        .as_i64()
        .expect("a revision");
    reaches(&cp, &follower, revision).await;
    let fresh = Gateway::builder().start_with_control_plane(&cp, &dir.join("fresh.json"));
    reaches(&cp, &fresh, revision).await;
    let (followed, started) = (served(&follower), served(&fresh));
    assert_eq!(
        followed["tenants"].as_array().map(Vec::len),
        started["tenants"].as_array().map(Vec::len)
    );
    assert!(followed == started, "the follower serves something else");

    let deltas = follower.metric("switchyard_snapshots_applied_total{kind=\"delta\"}");
    let fulls = follower.metric("switchyard_snapshots_applied_total{kind=\"full\"}");
    assert!(deltas > 50, "{deltas} deltas applied");
    assert_eq!(fulls, 1, "only the first snapshot is whole");

    // The cache file (written behind the applies) becomes the whole snapshot the control plane sends now.
    let snapshot = cp.expect("GET", "/v1/snapshot", None, 200).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let cache = std::fs::read(dir.join("follower.json")).expect("the follower's cache file");
        let cached: Value = serde_json::from_slice(&cache).expect("JSON");
        if cached["revision"] == snapshot["revision"] {
            assert!(cached == snapshot, "the cache file is not the snapshot");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cache file stays at {}",
            cached["revision"]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // And the digests index answers AUTH as the tenants' credentials say.
    let auth = async |secret: &str| -> redis::RedisResult<()> {
        let mut con = switchyard_tests::connect(&follower.url(None)).await;
        redis::cmd("AUTH").arg(secret).query_async(&mut con).await
    };
    assert!(!revoked.is_empty());
    for secret in &revoked {
        assert!(
            auth(secret).await.is_err(),
            "a revoked password still works"
        );
    }
    let served_names: Vec<String> = followed["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    for name in served_names.iter().step_by(10) {
        for secret in passwords.get(name).into_iter().flat_map(BTreeMap::values) {
            let authenticated = auth(secret).await;
            assert!(authenticated.is_ok(), "{name}: {authenticated:?}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
