//! The guard of changes that move a tenant's keys without changing its route: a resource's new URL, a tenant's
//! new key namespace. Probes go to real redis-server processes, started per test on free ports.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{Api, Reply, details, single};

/// A redis-server on a free loopback port, stopped when dropped.
struct Redis {
    port: u16,
    child: Child,
}

impl Redis {
    fn start(args: &[&str]) -> Redis {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server on {port} did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Redis { port, child }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

async fn set_url(api: &Api, name: &str, body: Value) -> Reply {
    api.admin("PUT", &format!("/v1/resources/{name}"), Some(body))
        .await
}

/// Two tenants whose routes use resource `main` at `url`, put without `force` (the URL answers its probe).
async fn two_tenants_on(api: &Api, url: &str) {
    api.create_resource("main", url).await;
    for tenant in ["shop", "blog"] {
        api.create_tenant(tenant).await;
        let reply = api
            .admin(
                "PUT",
                &format!("/v1/tenants/{tenant}/route"),
                Some(json!({"route": single("main")})),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
}

async fn stored_url(api: &Api) -> String {
    let reply = api.admin("GET", "/v1/resources/main", None).await;
    reply.body["url"].as_str().unwrap().to_string()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_url_to_other_data_is_refused_naming_the_tenants_and_forced_is_saved(pool: PgPool) {
    let api = Api::new(pool).await;
    let (here, there) = (Redis::start(&[]), Redis::start(&[]));
    let url = format!("redis://127.0.0.1:{}", here.port);
    two_tenants_on(&api, &url).await;

    for elsewhere in [
        format!("redis://127.0.0.1:{}", there.port),
        format!("redis://127.0.0.1:{}/3", here.port),
    ] {
        let refused = set_url(&api, "main", json!({"url": elsewhere})).await;
        assert_eq!(
            (refused.status, refused.error()),
            (409, "keys_would_move"),
            "{}",
            refused.body
        );
        let message = refused.body["message"].as_str().unwrap();
        assert!(
            message.contains("tenant(s) blog, shop") || message.contains("tenant(s) shop, blog"),
            "{message}"
        );
        let lines = details(&refused);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines
                .iter()
                .all(|l| l.starts_with("/url: tenant '") && l.contains("100")),
            "{lines:?}"
        );
        assert_eq!(stored_url(&api).await, url);
    }

    let to = format!("redis://127.0.0.1:{}", there.port);
    let forced = set_url(&api, "main", json!({"url": to, "force": true})).await;
    assert_eq!(forced.status, 200, "{}", forced.body);
    assert_eq!(stored_url(&api).await, to);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_url_that_keeps_the_data_passes_when_it_answers(pool: PgPool) {
    let api = Api::new(pool).await;
    let redis = Redis::start(&["--requirepass", "s3cret"]);
    api.create_resource("main", &format!("redis://:old@127.0.0.1:{}", redis.port))
        .await;
    api.create_tenant("shop").await;
    // The old password is refused by the probe: the route is forced onto it.
    assert_eq!(api.put_route("shop", single("main")).await.status, 200);

    // Credentials and query parameters only: the same keys, and the new URL answers.
    let url = format!("redis://:s3cret@127.0.0.1:{}?scripts=deny", redis.port);
    let reply = set_url(&api, "main", json!({"url": url, "description": "rotated"})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);

    // The same data with a wrong password does not answer its probe.
    let wrong = format!("redis://:wrong@127.0.0.1:{}", redis.port);
    let refused = set_url(&api, "main", json!({"url": wrong})).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(
        details(&refused)[0].starts_with("/url: "),
        "{}",
        refused.body
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn a_url_where_nothing_listens_is_422_and_forceable(pool: PgPool) {
    let api = Api::new(pool).await;
    let redis = Redis::start(&[]);
    let url = format!("redis://127.0.0.1:{}", redis.port);
    two_tenants_on(&api, &url).await;
    drop(redis);

    // Same place, so no key moves; but nothing answers there any more.
    let refused = set_url(&api, "main", json!({"url": format!("{url}?scripts=deny")})).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    let lines = details(&refused);
    assert!(
        lines[0].starts_with("/url: redis://127.0.0.1:"),
        "{lines:?}"
    );
    assert_eq!(stored_url(&api).await, url);

    let forced = set_url(
        &api,
        "main",
        json!({"url": format!("{url}?scripts=deny"), "force": true}),
    )
    .await;
    assert_eq!(forced.status, 200, "{}", forced.body);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_url_change_of_an_unused_resource_is_not_guarded(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_resource("spare", "redis://127.0.0.1:1").await;
    let reply = set_url(&api, "spare", json!({"url": "redis://127.0.0.1:2/4"})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

async fn patch(api: &Api, tenant: &str, body: Value) -> Reply {
    api.admin("PATCH", &format!("/v1/tenants/{tenant}"), Some(body))
        .await
}

#[sqlx::test(migrations = "../migrations")]
async fn a_routed_tenants_namespace_change_is_refused_and_forced_is_saved(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("shop").await;
    // No route yet: no key was stored, nothing to strand.
    assert_eq!(
        patch(&api, "shop", json!({"namespace": "shop:"}))
            .await
            .status,
        200
    );
    assert_eq!(
        api.put_route("shop", single("redis://127.0.0.1:6379"))
            .await
            .status,
        200
    );

    for change in [json!({"namespace": "store:"}), json!({"namespace": null})] {
        let refused = patch(&api, "shop", change).await;
        assert_eq!(
            (refused.status, refused.error()),
            (409, "keys_would_move"),
            "{}",
            refused.body
        );
        assert!(
            refused.body["message"]
                .as_str()
                .unwrap()
                .starts_with("100.0% of the tenant's keys")
        );
        assert!(
            details(&refused)[0]
                .starts_with("/namespace: 100.0% of the keys: namespace 'shop:' -> ")
        );
    }
    let kept = api.admin("GET", "/v1/tenants/shop", None).await;
    assert_eq!(kept.body["namespace"], "shop:");
    // Other fields change as before.
    assert_eq!(
        patch(&api, "shop", json!({"description": "d"}))
            .await
            .status,
        200
    );

    let forced = patch(&api, "shop", json!({"namespace": "store:", "force": true})).await;
    assert_eq!(forced.status, 200, "{}", forced.body);
    assert_eq!(forced.body["namespace"], "store:");
}
