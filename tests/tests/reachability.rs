//! Whether gateways reach the resources, end to end: a real gateway reports to a real control plane on Postgres
//! whether it reaches each resource its routes use; a resource whose Redis is killed shows down (with the error)
//! within a few reports while another stays up, and up again once its Redis is back, in the API and in
//! `switchyard-ctl resources list`.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Ctl, Gateway, RedisServer};

fn gateways(answer: &Value) -> &[Value] {
    answer["reachability"]["gateways"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_shows_down_and_comes_back_up() {
    let main = RedisServer::start();
    let spare = RedisServer::start();
    let cp = ControlPlane::start();
    let cache = std::env::temp_dir().join(format!("switchyard-reach-{}.json", std::process::id()));
    let _gateway = Gateway::builder()
        .arg("--tracking-report-interval-ms")
        .arg("300")
        .arg("--gateway-id")
        .arg("gw-reach")
        .start_with_control_plane(&cp, &cache);
    for (name, redis) in [("main", &main), ("spare", &spare)] {
        cp.expect(
            "POST",
            "/v1/resources",
            Some(json!({"name": name, "url": redis.url()})),
            201,
        )
        .await;
        cp.create_tenant(
            &format!("on-{name}"),
            json!({"type": "single", "target": name}),
        )
        .await;
    }

    let within = Duration::from_secs(10);
    let up = |answer: &Value| answer["reachability"]["up"] == 1;
    let seen = cp.poll("/v1/resources/main", within, up).await;
    let view = &gateways(&seen)[0];
    assert_eq!(view["gateway"], "gw-reach", "{seen}");
    assert!(view["since"].is_string(), "{seen}");
    cp.poll("/v1/resources/spare", within, up).await;

    // Its Redis killed: down within a few reports (300 ms each), the reason given; the other stays up.
    let port = main.port();
    drop(main);
    let killed = std::time::Instant::now();
    let down = cp
        .poll("/v1/resources/main", within, |answer| {
            answer["reachability"]["down"] == 1
        })
        .await;
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(5), "down after {took:?}: {down}");
    let view = &gateways(&down)[0];
    assert_eq!(view["up"], false, "{down}");
    let error = view["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("refused") || error.contains("closed"),
        "{down}"
    );
    assert!(view["last_error_at"].is_string(), "{down}");
    let (_, spare_now) = cp.call("GET", "/v1/resources/spare", None).await;
    assert_eq!(spare_now["reachability"]["up"], 1, "{spare_now}");

    let ctl = Ctl::new(&cp);
    let listed = ctl.ok(&["resources", "list"]);
    let row = |name: &str| {
        listed
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        listed.starts_with("NAME") && listed.contains("HEALTH"),
        "{listed}"
    );
    assert!(row("main").contains("down ("), "{listed}");
    assert!(row("spare").contains(" up "), "{listed}");

    // Back on its port: up again, since later than it went down.
    let restarted = RedisServer::builder().start_on(port);
    let back = cp.poll("/v1/resources/main", within, up).await;
    let view = &gateways(&back)[0];
    assert!(
        view["since"].as_str() > gateways(&down)[0]["since"].as_str(),
        "{back}"
    );
    drop(restarted);
    let _ = std::fs::remove_file(&cache);
}
