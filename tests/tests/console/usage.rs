//! The usage pages under real traffic: two tenants' clients keep sending commands (some failing) through a real
//! gateway that reports to the control plane; the overview ranks them and draws every tenant's traffic, a
//! tenant's page draws its own, and its credential list shows where and when each credential was last used. The
//! charts are checked to hold points and, once the traffic spans two minutes, a line; the overview and the
//! resources page show the resource up, as the gateway sees it; a tenant that double-writes shows how far its
//! secondary is from the primary, sampled by the gateway; a tenant with the near cache shows its hits and hit
//! ratio, one without has no such card; screenshots are taken of both usage pages (docs/console/usage.png,
//! tenant-usage.png).

use std::time::Duration;

use serde_json::json;
use switchyard_tests::{ADMIN_TOKEN, ControlPlane, Gateway, RedisServer};

use crate::browser::Browser;
use crate::roles::sign_in_as;

/// Commands to `tenant` through `gateway` until aborted: pipelines of SETs and GETs, one in 50 an INCR of a
/// string (an error reply), `per_round` commands a round.
async fn traffic(gateway: u16, tenant: String, secret: String, per_round: usize) {
    let url = format!("redis://{tenant}:{secret}@127.0.0.1:{gateway}");
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    loop {
        if let Ok(mut con) = client.get_multiplexed_async_connection().await {
            loop {
                let mut pipe = redis::pipe();
                for i in 0..per_round {
                    match i % 50 {
                        0 => pipe.cmd("INCR").arg("text").ignore(),
                        1 => pipe.cmd("SET").arg("text").arg("not a number").ignore(),
                        n if n % 2 == 0 => pipe.cmd("GET").arg(format!("k{i}")).ignore(),
                        _ => pipe.cmd("SET").arg(format!("k{i}")).arg("v").ignore(),
                    };
                }
                let sent: redis::RedisResult<()> = pipe.query_async(&mut con).await;
                // An error reply is expected (the INCR); a connection lost is not: connect again.
                if let Err(e) = &sent
                    && (e.is_io_error() || e.is_connection_dropped())
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_pages_draw_real_traffic() {
    let redis = RedisServer::start();
    // globex double-writes to it: its page shows the secondary's divergence.
    let spare = RedisServer::start();
    let cp = ControlPlane::start();
    let cache = std::env::temp_dir().join(format!(
        "switchyard-console-usage-{}.json",
        std::process::id()
    ));
    let gateway = Gateway::builder()
        .arg("--tracking-report-interval-ms")
        .arg("500")
        .arg("--gateway-id")
        .arg("gw-eu-1")
        .arg("--metrics-tenant-latency")
        .start_with_control_plane(&cp, &cache);
    // acme's route names a registered resource, whose health the overview and the resources page show.
    cp.expect(
        "POST",
        "/v1/resources",
        Some(json!({"name": "shared", "url": redis.url()})),
        201,
    )
    .await;
    let mut load = Vec::new();
    let double_write = json!({"type": "double_write", "ack": "primary",
        "primary": {"type": "single", "target": redis.url()},
        "secondary": {"type": "single", "target": spare.url()}});
    // acme has the near cache (its GETs read keys again and again: hits), globex none.
    let near_cache = json!({"near_cache": {"max_bytes": 1 << 20, "keys": "all"}});
    for (tenant, per_round, policies, route) in [
        (
            "acme",
            200,
            near_cache,
            json!({"type": "single", "target": "shared"}),
        ),
        ("globex", 50, json!({}), double_write),
    ] {
        let mut body = policies;
        body["name"] = json!(tenant);
        let secret = cp.create_tenant_with(body, route).await;
        load.push(tokio::spawn(traffic(
            gateway.port(),
            tenant.into(),
            secret,
            per_round,
        )));
    }
    let browser = Browser::start(&cp.url()).await;
    sign_in_as(&browser, ADMIN_TOKEN).await;

    browser.open("#/usage").await;
    browser.on_page("usage").await;
    let charted = |id: &str| {
        format!(
            "Number(document.getElementById('{id}')?.dataset.points) > 0 && Number(document.getElementById('{id}').dataset.max) > 0"
        )
    };
    browser
        .wait_for(
            "the overview's charts and rankings",
            &format!(
                "{} && {} && {} && document.querySelector('#top-ops tbody tr td')?.textContent === 'acme' && document.querySelectorAll('#top-connections tbody tr').length === 2",
                charted("total-ops"),
                charted("total-errors"),
                charted("total-connections"),
            ),
        )
        .await;
    // Once the traffic spans two minutes, each chart draws a line (a minute alone is a dot).
    browser
        .wait_for_within(
            "a line over two minutes",
            "Number(document.getElementById('total-ops').dataset.points) >= 2 && document.querySelector('#total-ops polyline') !== null",
            Duration::from_secs(90),
        )
        .await;
    browser
        .wait_for(
            "the resource's health",
            "document.querySelector('#resource-health tr[data-resource=\"shared\"] .badge')?.textContent === 'up' && document.querySelector('#resource-health li[data-gateway=\"gw-eu-1\"]') !== null && document.getElementById('resources-summary').textContent.startsWith('1 up, 0 down')",
        )
        .await;
    browser.screenshot("usage").await;

    browser.open("#/resources").await;
    browser.on_page("resources").await;
    browser
        .wait_for(
            "the resources page's health column",
            "document.querySelector('#resources tr[data-resource=\"shared\"] .health')?.textContent.startsWith('upgw-eu-1: up since')",
        )
        .await;

    browser.open("#/tenants/acme/usage").await;
    browser.on_page("tenant-usage").await;
    browser
        .wait_for(
            "acme's charts",
            &format!(
                "{} && {} && {} && {} && document.querySelector('#tenant-ops polyline') !== null",
                charted("tenant-ops"),
                charted("tenant-errors"),
                charted("tenant-connections"),
                charted("tenant-p99"),
            ),
        )
        .await;
    // Its keys, asked of its Redis: the database it shares with globex without a namespace, counted whole.
    browser
        .wait_for(
            "acme's keys",
            "Number(document.getElementById('keyspace-keys')?.textContent.replace(/,/g, '')) > 0 && document.getElementById('keyspace').textContent.includes('globex')",
        )
        .await;
    // Its near cache: hits, and their ratio to the reads it answers.
    browser
        .wait_for(
            "acme's near cache",
            "Number(document.querySelector('#near-cache td[data-figure=\"hits\"]')?.textContent.replace(/,/g, '')) > 0 && /^[\\d.]+%$/.test(document.querySelector('#near-cache td[data-figure=\"hit-ratio\"]').textContent) && Number(document.getElementById('tenant-near-cache-ratio').dataset.points) > 0",
        )
        .await;
    browser.screenshot("tenant-usage").await;

    // globex's secondary, sampled by the gateway: its estimate and the keys it counts.
    browser.open("#/tenants/globex/usage").await;
    browser.on_page("tenant-usage").await;
    let spare_row = format!(
        "#divergence-table tr[data-resource^=\"127.0.0.1:{}\"]",
        spare.port()
    );
    browser
        .wait_for(
            "globex's divergence",
            &format!(
                "/%$/.test(document.querySelector('{spare_row} td:nth-child(2)')?.textContent ?? '') && /^\\d+ of [1-9]/.test(document.querySelector('{spare_row} td:nth-child(3)').textContent)"
            ),
        )
        .await;
    // Without the near cache, no card.
    assert_eq!(
        browser
            .js(
                "return document.getElementById('near-cache') === null",
                vec![]
            )
            .await,
        json!(true)
    );

    browser.open("#/tenants/acme").await;
    browser.on_page("tenant").await;
    browser
        .wait_for(
            "the credential's last use",
            "document.querySelector('#credential-list .last-used')?.textContent.includes('gw-eu-1') && document.querySelector('#credential-list .connections')?.textContent === '1'",
        )
        .await;
    // Times read as the API and the command line give them: ISO 8601 in UTC.
    browser
        .wait_for(
            "the last use in UTC",
            "/^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ on gw-eu-1$/.test(document.querySelector('#credential-list .last-used').textContent)",
        )
        .await;
    browser.assert_same_origin_only().await;
    for task in load {
        task.abort();
    }
    browser.close().await;
    let _ = std::fs::remove_file(&cache);
}
