//! Divergence measured end to end: real redis-servers, a real gateway reporting to a real control plane. Keys of a
//! double-write tenant are changed on the secondary behind the gateway's back, so that no failed write records
//! them; the gateway's sampler finds them: the estimated share of differing keys rises to the true share in
//! `/metrics`, in the control plane's API and in `switchyard-ctl tenants divergence`, while the repair is refused
//! (the secondary's user may not `RESTORE`). Once it may, the keys the sampler found are repaired and the estimate
//! falls to 0. Keys of another tenant in the same databases are never sampled nor copied.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Ctl, Gateway, RedisServer, wait_for_async};

/// The tenant's keys, and those of them changed on the secondary: the true share is 20%.
const KEYS: usize = 1000;
const CHANGED: usize = 200;

/// A sample of the gateway's `/metrics` family `name` for tenant `a`.
fn series(gateway: &Gateway, name: &str) -> Option<f64> {
    let (_, text) = gateway.admin_get("/metrics");
    let prefix = format!("{name}{{tenant=\"a\",");
    text.lines()
        .find(|line| line.starts_with(&prefix))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

/// The keys of `server` matching `pattern`.
fn keys(server: &RedisServer, pattern: &str) -> BTreeSet<String> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut server.client())
        .unwrap();
    keys.into_iter().collect()
}

/// The tenant's keys whose values differ between the two servers.
fn differing(primary: &RedisServer, secondary: &RedisServer) -> usize {
    let (mut p, mut s) = (primary.client(), secondary.client());
    let names: Vec<String> = (0..KEYS).map(|i| format!("a:k{i}")).collect();
    let ours: Vec<Option<String>> = redis::cmd("MGET").arg(&names).query(&mut p).unwrap();
    let theirs: Vec<Option<String>> = redis::cmd("MGET").arg(&names).query(&mut s).unwrap();
    ours.iter().zip(&theirs).filter(|(a, b)| a != b).count()
}

fn acl(server: &RedisServer, rules: &[&str]) {
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("sy")
        .arg(rules)
        .query(&mut server.client())
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divergence_behind_the_gateways_back_is_estimated_then_repaired() {
    let (primary, secondary) = (RedisServer::start(), RedisServer::start());
    // The route reaches the secondary as a user that may do everything but `RESTORE`: the repair is refused.
    acl(
        &secondary,
        &["on", ">sy-pass", "~*", "&*", "+@all", "-restore"],
    );
    let cp = ControlPlane::start();
    let cache =
        std::env::temp_dir().join(format!("switchyard-divergence-{}.json", std::process::id()));
    let gateway = Gateway::builder()
        .arg("--tracking-report-interval-ms")
        .arg("300")
        .arg("--gateway-id")
        .arg("gw-div")
        .arg("--divergence-samples")
        .arg("200")
        .start_with_control_plane(&cp, &cache);
    let secondary_url = format!("redis://sy:sy-pass@127.0.0.1:{}/0", secondary.port());
    let secret = cp
        .create_tenant_with(
            json!({"name": "a", "namespace": "a:"}),
            json!({"type": "double_write", "ack": "primary",
                   "primary": {"type": "single", "target": format!("{}/0", primary.url())},
                   "secondary": {"type": "single", "target": secondary_url}}),
        )
        .await;
    // Another tenant's keys in the primary's database, more of them than the tenant's: never sampled, never copied.
    let mut other = redis::pipe();
    for i in 0..2 * KEYS {
        other
            .cmd("SET")
            .arg(format!("other:{i}"))
            .arg("theirs")
            .ignore();
    }
    let () = other.query(&mut primary.client()).unwrap();

    let client =
        redis::Client::open(format!("redis://a:{secret}@127.0.0.1:{}", gateway.port())).unwrap();
    let mut con = None;
    wait_for_async(
        "the tenant's route on the gateway",
        Duration::from_secs(20),
        || {
            con = client.get_connection().ok();
            con.is_some()
        },
    )
    .await;
    let mut con = con.unwrap();
    let mut writes = redis::pipe();
    for i in 0..KEYS {
        writes
            .cmd("SET")
            .arg(format!("k{i}"))
            .arg(format!("v{i}"))
            .ignore();
    }
    let () = writes.query(&mut con).unwrap();
    wait_for_async("both copies", Duration::from_secs(20), || {
        keys(&secondary, "a:*").len() == KEYS && differing(&primary, &secondary) == 0
    })
    .await;

    // Behind the gateway's back: no failed write names these keys.
    let mut behind = redis::pipe();
    for i in 0..CHANGED {
        behind
            .cmd("SET")
            .arg(format!("a:k{}", i * KEYS / CHANGED))
            .arg("changed")
            .ignore();
    }
    let () = behind.query(&mut secondary.client()).unwrap();
    assert_eq!(differing(&primary, &secondary), CHANGED);
    let before = series(&gateway, "switchyard_repair_sampled_keys_total").unwrap_or(0.0);

    // Two windows later, the estimate is the true share (20%, one standard deviation 1.3 points over 1000 samples).
    let true_share = CHANGED as f64 / KEYS as f64;
    wait_for_async("two windows of samples", Duration::from_secs(60), || {
        series(&gateway, "switchyard_repair_sampled_keys_total")
            .is_some_and(|n| n >= before + 2000.0)
    })
    .await;
    let ratio = series(&gateway, "switchyard_repair_divergence_ratio").unwrap();
    assert!(
        (ratio - true_share).abs() < 0.06,
        "estimated {ratio}, true {true_share}"
    );
    assert_eq!(
        series(&gateway, "switchyard_repair_divergence_samples"),
        Some(1000.0)
    );
    // What it found is owed to the secondary, and not repaired: RESTORE is refused.
    let pending = series(&gateway, "switchyard_repair_pending_keys").unwrap_or(0.0);
    assert!(
        pending > 0.0 && pending <= CHANGED as f64,
        "pending {pending}"
    );
    assert!(series(&gateway, "switchyard_repair_failures_total").unwrap_or(0.0) > 0.0);
    assert_eq!(differing(&primary, &secondary), CHANGED);

    // The control plane and the command line show the same.
    let within = Duration::from_secs(20);
    let estimate = |answer: &Value| answer["secondaries"][0]["estimate"].as_f64();
    let seen = cp
        .poll("/v1/tenants/a/divergence", within, |answer| {
            answer["secondaries"][0]["samples"] == 1000
                && answer["secondaries"][0]["pending"].as_u64() > Some(0)
        })
        .await;
    let shown = estimate(&seen).unwrap();
    assert!((shown - true_share).abs() < 0.06, "{seen}");
    let one = &seen["secondaries"][0];
    assert_eq!(
        one["resource"],
        format!("127.0.0.1:{}/0", secondary.port()),
        "{seen}"
    );
    assert_eq!(one["gateways"][0]["gateway"], "gw-div", "{seen}");
    let ctl = Ctl::new(&cp);
    let listed = ctl.json(&["tenants", "divergence", "a"]);
    let listed_estimate = estimate(&listed).unwrap();
    assert!((listed_estimate - true_share).abs() < 0.06, "{listed}");
    let table = ctl.ok(&["tenants", "divergence", "a"]);
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("RESOURCE") && header.contains("ESTIMATE") && header.contains("PENDING"),
        "{table}"
    );
    assert!(
        table.contains(&format!("127.0.0.1:{}/0", secondary.port())),
        "{table}"
    );

    // The repair may now: every changed key is found and repaired, and the estimate falls to 0.
    acl(&secondary, &["+restore"]);
    wait_for_async(
        "every changed key repaired",
        Duration::from_secs(90),
        || differing(&primary, &secondary) == 0,
    )
    .await;
    wait_for_async("the estimate back to 0", Duration::from_secs(60), || {
        series(&gateway, "switchyard_repair_divergence_ratio") == Some(0.0)
            && series(&gateway, "switchyard_repair_pending_keys") == Some(0.0)
    })
    .await;
    assert!(series(&gateway, "switchyard_repair_repaired_total").unwrap_or(0.0) >= CHANGED as f64);
    let repaired = cp
        .poll("/v1/tenants/a/divergence", within, |answer| {
            estimate(answer) == Some(0.0) && answer["secondaries"][0]["pending"] == 0
        })
        .await;
    assert!(
        repaired["secondaries"][0]["repaired"].as_u64() >= Some(CHANGED as u64),
        "{repaired}"
    );
    assert_eq!(
        estimate(&ctl.json(&["tenants", "divergence", "a"])),
        Some(0.0)
    );

    // The other tenant's keys never reached the secondary.
    assert!(keys(&secondary, "other:*").is_empty());
    assert_eq!(keys(&primary, "other:*").len(), 2 * KEYS);
    let _ = std::fs::remove_file(&cache);
}
