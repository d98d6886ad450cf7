//! The migrations page: a migration of a few thousand keys stepped through to `finished`, its progress bar
//! watched as it moves.

use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_tests::{ControlPlane, Gateway, RedisServer};

use crate::browser::Browser;
use crate::{redis_get, wait_until};

/// Migrates acme from `old` to `new` with a few thousand keys, step by step, watching the progress bar move.
pub(crate) async fn migrate(
    browser: &Browser,
    cp: &ControlPlane,
    old: &RedisServer,
    new: &RedisServer,
    gateway: &Gateway,
    secret: &str,
) {
    let mut con = old.client();
    for chunk in 0..30 {
        let mut pipe = redis::pipe();
        for i in 0..100 {
            pipe.set(format!("key:{chunk}:{i}"), format!("value {i}"))
                .ignore();
        }
        let () = pipe.query(&mut con).expect("fill the old deployment");
    }
    browser.open("#/tenants/acme/migrations").await;
    browser.on_page("migrations").await;
    browser.fill("#migration-to", "spare").await;
    browser.fill("#migration-rate", "1500").await;
    browser.click("#start-migration button[type=submit]").await;
    browser.on_page("migration").await;
    let state = async || {
        browser
            .js(
                "return document.getElementById('migration-state').dataset.state",
                vec![],
            )
            .await
    };
    let step = async |name: &str, reaches: &str| {
        browser
            .wait_for(
                &format!("{name} enabled"),
                &format!("!document.getElementById('step-{name}').disabled"),
            )
            .await;
        browser.click(&format!("#step-{name}")).await;
        browser
            .wait_for(
                &format!("state {reaches}"),
                &format!(
                    "document.getElementById('migration-state').dataset.state === '{reaches}'"
                ),
            )
            .await;
    };
    assert_eq!(state().await, json!("double_write"));
    // Only the next step and abort are enabled.
    let enabled = browser
        .js("return [...document.querySelectorAll('[id^=step-]')].filter(b => !b.disabled).map(b => b.id)", vec![])
        .await;
    assert!(
        enabled == json!(["step-backfill", "step-abort"]) || enabled == json!(["step-abort"]),
        "{enabled}"
    );

    // Backfill at 1,500 keys/s: the bar is seen between empty and full.
    browser
        .wait_for(
            "backfill enabled",
            "!document.getElementById('step-backfill').disabled",
        )
        .await;
    browser.click("#step-backfill").await;
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let bar = browser
            .js("const p = document.querySelector('#progress-backfill progress'); return p ? [p.value, document.getElementById('migration-state').dataset.state] : null", vec![])
            .await;
        if let Some(value) = bar[0].as_f64()
            && seen.last() != Some(&value)
        {
            // The first picture of a bar part way: what docs/console.md shows.
            if value > 0.0 && value < 100.0 && !seen.iter().any(|v| *v > 0.0 && *v < 100.0) {
                browser.screenshot("migration").await;
            }
            seen.push(value);
        }
        if bar[1] == json!("backfilled") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "backfill did not finish: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        seen.iter().any(|v| *v > 0.0 && *v < 100.0),
        "the bar never showed progress: {seen:?}"
    );
    browser
        .wait_for(
            "the full bar",
            "document.querySelector('#progress-backfill progress').value === 100",
        )
        .await;
    assert!(
        browser
            .text("#progress-backfill")
            .await
            .contains("copied 3,000")
    );

    step("verify", "verified").await;
    assert!(
        browser
            .text("#progress-verify")
            .await
            .contains("matched 3,000")
    );
    step("cutover", "cut_over").await;
    step("finish", "finished").await;
    let buttons = browser
        .js(
            "return [...document.querySelectorAll('[id^=step-]')].filter(b => !b.disabled).length",
            vec![],
        )
        .await;
    assert_eq!(buttons, json!(0), "no step after finished");
    browser.screenshot("migration-finished").await;

    let route = cp.expect("GET", "/v1/tenants/acme/route", None, 200).await;
    assert_eq!(route["route"], json!({"type": "single", "target": "spare"}));
    let copied: Option<String> = redis::cmd("GET")
        .arg("key:29:99")
        .query(&mut new.client())
        .expect("GET on new");
    assert_eq!(copied.as_deref(), Some("value 99"));
    wait_until("the gateway reads from the new deployment", async || {
        redis::cmd("SET")
            .arg("only-new")
            .arg("x")
            .exec(&mut new.client())
            .expect("SET on new");
        redis_get(gateway, secret, "only-new")
            .await
            .ok()
            .flatten()
            .as_deref()
            == Some("x")
    })
    .await;

    // A second migration, back to the old server, aborted from its page: the route is the one before it.
    let second = cp
        .expect(
            "POST",
            "/v1/tenants/acme/migrations",
            Some(json!({"to": old.url(), "ack": "primary"})),
            201,
        )
        .await;
    browser.open("#/tenants/acme/migrations").await;
    browser.on_page("migrations").await;
    assert!(browser.text("#migration-list").await.contains("finished"));
    browser
        .click(&format!(
            "#migration-list a[href$='/migrations/{}']",
            second["id"]
        ))
        .await;
    browser.on_page("migration").await;
    browser
        .wait_for(
            "abort enabled",
            "!document.getElementById('step-abort').disabled",
        )
        .await;
    browser.click("#step-abort").await;
    browser
        .wait_for(
            "state aborted",
            "document.getElementById('migration-state').dataset.state === 'aborted'",
        )
        .await;
    let route = cp.expect("GET", "/v1/tenants/acme/route", None, 200).await;
    assert_eq!(route["route"], json!({"type": "single", "target": "spare"}));
}
