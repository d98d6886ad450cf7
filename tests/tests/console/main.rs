//! The operators' console in a real headless Chromium, against a real control plane on Postgres, a real gateway
//! and real redis-servers: an operator's day, page by page, with a screenshot of each page in
//! target/console-screenshots/. Needs `chromium` and `chromedriver` (scripts/test installs them).

mod browser;
mod guard;
mod migration;
mod roles;
mod security;
mod usage;

use std::time::{Duration, Instant};

use browser::Browser;
use serde_json::{Value, json};
use switchyard_tests::{ADMIN_TOKEN, ControlPlane, Gateway, RedisServer};

/// A gateway following `cp`, with its snapshot cache in a file removed at the end.
struct CachedGateway {
    gateway: Gateway,
    cache: std::path::PathBuf,
}

impl CachedGateway {
    fn start(cp: &ControlPlane) -> CachedGateway {
        let cache = std::env::temp_dir().join(format!(
            "switchyard-console-cache-{}.json",
            std::process::id()
        ));
        let gateway = Gateway::builder().start_with_control_plane(cp, &cache);
        CachedGateway { gateway, cache }
    }
}

impl Drop for CachedGateway {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.cache);
    }
}

/// Signs in through the sign-in page (a wrong token first: refused, and the page says so).
async fn sign_in(browser: &Browser) {
    browser.open("").await;
    browser.on_page("sign-in").await;
    browser.screenshot("sign-in").await;
    browser.fill("#token", "not-the-admin-token-at-all").await;
    browser.click("#sign-in").await;
    browser
        .wait_for("the refusal", "document.querySelector('.sign-in .error-text').textContent.includes('not a valid token')")
        .await;
    browser.fill("#token", ADMIN_TOKEN).await;
    browser.click("#sign-in").await;
    browser.on_page("tenants").await;
    // The token is in the tab's session storage only: not in the URL, not in a cookie.
    let kept = browser
        .js("return [sessionStorage.getItem('switchyard.console.token'), document.cookie, location.href, localStorage.length]", vec![])
        .await;
    assert_eq!(kept[0], json!(ADMIN_TOKEN));
    assert_eq!(kept[1], json!(""));
    assert!(!kept[2].as_str().unwrap_or_default().contains(ADMIN_TOKEN));
    assert_eq!(kept[3], json!(0));
}

pub(crate) async fn redis_get(
    gateway: &Gateway,
    secret: &str,
    key: &str,
) -> redis::RedisResult<Option<String>> {
    let mut con = redis::Client::open(gateway.url(Some(secret)))?
        .get_multiplexed_async_connection()
        .await?;
    redis::cmd("GET").arg(key).query_async(&mut con).await
}

/// Sets the route editor's text and saves it.
/// The tenants page searched for "acme": the two tenants whose names start with it.
async fn search_acme(browser: &Browser) {
    browser.open("#/tenants").await;
    browser.on_page("tenants").await;
    browser.fill("#tenant-search", "acme").await;
    browser
        .wait_for(
            "the search",
            "document.querySelectorAll('#tenants tbody tr').length === 2",
        )
        .await;
}

pub(crate) async fn save_route(browser: &Browser, route: &str, comment: &str) {
    browser.set_value("#route-editor", route).await;
    browser.fill("#route-comment", comment).await;
    browser.click("#save-route").await;
}

pub(crate) async fn wait_until(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !condition().await {
        assert!(Instant::now() < deadline, "{what} within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_day_in_the_console() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let cp = ControlPlane::start();
    let gw = CachedGateway::start(&cp);
    let browser = Browser::start(&cp.url()).await;
    sign_in(&browser).await;

    // Tenants: create one through the form, and find it by prefix among others.
    for other in ["globex", "initech", "acme-eu"] {
        cp.expect("POST", "/v1/tenants", Some(json!({"name": other})), 201)
            .await;
    }
    browser.fill("#new-tenant-name", "acme").await;
    browser.fill("#new-tenant-description", "Acme Corp").await;
    browser.click("#create-tenant button[type=submit]").await;
    browser.on_page("tenant").await;
    assert_eq!(
        cp.expect("GET", "/v1/tenants/acme", None, 200).await["description"],
        "Acme Corp"
    );
    search_acme(&browser).await;
    assert_eq!(
        browser
            .text("#tenants tbody tr:first-child .tenant-link")
            .await,
        "acme"
    );
    browser.screenshot("tenants").await;

    // 60 more tenants: pages of 50, Next and Previous.
    let bulk: Vec<Value> = (0..60)
        .map(|i| json!({"tenant": {"name": format!("bulk-{i:03}")}, "credentials": [], "comment": ""}))
        .collect();
    cp.expect("POST", "/v1/import", Some(json!({"tenants": bulk})), 201)
        .await;
    let rows = "document.querySelectorAll('#tenants tbody tr .tenant-link')";
    browser.fill("#tenant-search", "bulk-").await;
    browser
        .wait_for(
            "a full first page",
            &format!("{rows}.length === 50 && {rows}[49].textContent === 'bulk-049'"),
        )
        .await;
    browser.click(".pager button:last-child").await;
    browser
        .wait_for(
            "the second page",
            &format!("{rows}.length === 10 && {rows}[0].textContent === 'bulk-050'"),
        )
        .await;
    assert_eq!(
        browser
            .js(
                "return document.querySelectorAll('.pager button').length",
                vec![]
            )
            .await,
        json!(1),
        "no Next on the last page"
    );
    browser.click(".pager button").await;
    browser
        .wait_for(
            "the first page again",
            &format!("{rows}.length === 50 && {rows}[0].textContent === 'bulk-000'"),
        )
        .await;

    // Disable one from its page.
    browser.open("#/tenants/globex").await;
    browser.on_page("tenant").await;
    browser
        .click_and_confirm("#toggle-disabled", "the disable confirmation")
        .await;
    browser
        .wait_for(
            "the enable button",
            "document.getElementById('toggle-disabled').textContent === 'Enable'",
        )
        .await;
    assert_eq!(
        cp.expect("GET", "/v1/tenants/globex", None, 200).await["disabled"],
        true
    );
    search_acme(&browser).await;

    // Limits: a bad one is shown at its field, a good one saved.
    browser.click("#tenants .tenant-link").await;
    browser.on_page("tenant").await;
    browser
        .set_value(
            "#tenant-limits",
            r#"{"output_buffer_limit": {"hard_bytes": 10, "soft_bytes": 20, "soft_seconds": 5}}"#,
        )
        .await;
    browser.click("#save-tenant").await;
    browser
        .wait_for("the limit's error at its field", "document.querySelector('[data-path=\"/limits\"] .field-error').textContent.includes('hard_bytes')")
        .await;
    browser
        .set_value("#tenant-limits", r#"{"max_connections": 500}"#)
        .await;
    browser.click("#save-tenant").await;
    browser.notice_ok("the save").await;
    let tenant = cp.expect("GET", "/v1/tenants/acme", None, 200).await;
    assert_eq!(tenant["limits"], json!({"max_connections": 500}));

    // A near cache, as JSON: a bad one is shown at its field, a good one saved.
    browser
        .set_value(
            "#tenant-near-cache",
            r#"{"max_bytes": 100, "max_value_bytes": 200}"#,
        )
        .await;
    browser.click("#save-tenant").await;
    browser
        .wait_for("the near cache's error at its field", "document.querySelector('[data-path=\"/near_cache\"] .field-error').textContent.includes('max_bytes')")
        .await;
    browser
        .set_value("#tenant-near-cache", r#"{"max_bytes": 65536}"#)
        .await;
    browser.click("#save-tenant").await;
    browser.notice_ok("the near cache's save").await;
    // The notice may still be the limits' save's: the saved policy is what tells.
    cp.poll("/v1/tenants/acme", Duration::from_secs(10), |tenant| {
        tenant["near_cache"] == json!({"max_bytes": 65536})
    })
    .await;

    // Credentials: issue one; the secret is shown once, with its warning and a copy button.
    browser.fill("#issue-description", "checkout").await;
    browser.click("#issue").await;
    let secret = browser.text("#new-secret").await;
    assert!(secret.starts_with("sy_") && secret.len() == 67, "{secret}");
    assert!(
        browser
            .text("#secret-box")
            .await
            .contains("shown only once")
    );
    browser
        .js("window.scrollTo(0, 0); return true", vec![])
        .await;
    browser.screenshot("credentials").await;
    browser.open("#/tenants").await;
    browser.open("#/tenants/acme").await;
    browser.on_page("tenant").await;
    browser.find("#credential-list tbody tr").await;
    let page = browser.client.source().await.expect("page source");
    assert!(!page.contains(&secret), "the secret is never shown twice");
    // Import an old proxy's password, then revoke it.
    browser
        .fill("#import-password", "the-old-proxy-password")
        .await;
    browser.fill("#import-description", "old proxy").await;
    browser
        .click("#import-credential button[type=submit]")
        .await;
    browser
        .wait_for(
            "the imported credential",
            "document.querySelectorAll('#credential-list tbody tr').length === 2",
        )
        .await;
    browser
        .click_and_confirm(
            "#credential-list tbody tr:nth-child(2) button",
            "the revoke confirmation",
        )
        .await;
    browser
        .wait_for("the revoked credential", "document.querySelector('#credential-list tbody tr:nth-child(2)').classList.contains('revoked')")
        .await;
    let listed = cp
        .expect("GET", "/v1/tenants/acme/credentials", None, 200)
        .await;
    assert!(listed["credentials"][0]["revoked_at"].is_null(), "{listed}");
    assert!(
        listed["credentials"][1]["revoked_at"].is_string(),
        "{listed}"
    );

    // A readiness probe, from the tenant's page: started, shown with its readiness, stopped.
    browser.fill("#probe-to-input", &new.url()).await;
    browser.click("#readiness-probe button.primary").await;
    browser
        .wait_for(
            "the probe's readiness",
            "document.querySelector('#readiness-probe #migration-readiness') !== null",
        )
        .await;
    assert!(
        browser
            .text("#probe-to")
            .await
            .contains(&new.port().to_string()),
        "the probe's destination is shown"
    );
    cp.expect("GET", "/v1/tenants/acme/readiness-probe", None, 200)
        .await;
    browser.click("#readiness-probe button.danger").await;
    browser
        .wait_for(
            "the probe stopped",
            "document.querySelector('#probe-to-input') !== null",
        )
        .await;
    let (status, _) = cp
        .call("GET", "/v1/tenants/acme/readiness-probe", None)
        .await;
    assert_eq!(status, 404, "stopped");

    // Resources: register two, through the form.
    browser.open("#/resources").await;
    browser.on_page("resources").await;
    for (name, server) in [("main", &old), ("spare", &new)] {
        browser.fill("#new-resource-name", name).await;
        browser.fill("#new-resource-url", &server.url()).await;
        browser
            .fill("#new-resource-description", &format!("{name} deployment"))
            .await;
        browser.click("#create-resource button[type=submit]").await;
        browser
            .wait_for(
                "the new resource",
                &format!("document.querySelector('#resources tr[data-resource=\"{name}\"]')"),
            )
            .await;
    }

    // A URL with a password is shown masked, and edited as shown: `***` keeps the stored password.
    cp.expect(
        "POST",
        "/v1/resources",
        Some(json!({"name": "vault", "url": "redis://:vault-password-1234@127.0.0.1:7001", "description": ""})),
        201,
    )
    .await;
    browser.open("#/tenants").await;
    browser.open("#/resources").await;
    browser.on_page("resources").await;
    let row = browser.text("#resources tr[data-resource='vault']").await;
    assert!(row.contains("redis://:***@127.0.0.1:7001"), "{row}");
    let page = browser.client.source().await.expect("page source");
    assert!(!page.contains("vault-password-1234"));
    browser
        .click("#resources tr[data-resource='vault'] button")
        .await;
    let url = browser.find("tr.editing .edit-url").await;
    let shown = url.prop("value").await.expect("value").unwrap_or_default();
    browser
        .fill("tr.editing .edit-url", &shown.replace(":7001", ":7002"))
        .await;
    browser.click("tr.editing button[type=submit]").await;
    browser
        .wait_for("the edited URL", "document.querySelector('#resources tr[data-resource=\"vault\"]').textContent.includes('@127.0.0.1:7002')")
        .await;
    assert_eq!(
        cp.expect("GET", "/v1/resources/vault", None, 200).await["url"],
        "redis://:***@127.0.0.1:7002"
    );

    // Route: a field the schema does not know and a syntax mistake are caught as they are typed; the server's
    // 422 is shown on its line; then saved.
    browser.open("#/tenants/acme/route").await;
    browser.on_page("route").await;
    browser
        .set_value("#route-editor", "{\n  \"type\": \"single\",\n  \"target\": {\n    \"raed\": {\"resources\": [\"main\"]}\n  }\n}")
        .await;
    browser
        .wait_for(
            "the schema's complaint on line 4, before any save",
            "[...document.querySelectorAll('#route-errors li')].some(li => li.dataset.line === '4' && li.textContent.includes(\"unknown field 'raed'\"))",
        )
        .await;
    browser.screenshot("route-schema").await;
    browser
        .set_value(
            "#route-editor",
            "{\"type\": \"single\",\n  \"target\": \"main\"\n",
        )
        .await;
    browser
        .wait_for(
            "the syntax error",
            "document.getElementById('route-status').textContent.startsWith('Not JSON')",
        )
        .await;
    save_route(
        &browser,
        "{\n  \"type\": \"single\",\n  \"target\": \"nowhere\"\n}",
        "first route",
    )
    .await;
    browser
        .wait_for("the server's error on line 3", "[...document.querySelectorAll('#route-errors li')].some(li => li.dataset.line === '3' && li.textContent.includes('nowhere'))")
        .await;
    assert_eq!(
        browser
            .js(
                "return document.querySelectorAll('.gutter .bad-line').length",
                vec![]
            )
            .await,
        json!(1)
    );
    browser.screenshot("route-error").await;
    save_route(
        &browser,
        "{\n  \"type\": \"single\",\n  \"target\": \"main\"\n}",
        "first route",
    )
    .await;
    browser
        .wait_for(
            "version 1",
            "document.querySelector('#route-view h2').textContent === 'Version 1'",
        )
        .await;

    // The issued secret now authenticates through the gateway.
    wait_until(
        "AUTH with the issued secret through the gateway",
        async || redis_get(&gw.gateway, &secret, "k").await.is_ok(),
    )
    .await;

    // Version 2 double-writes to both; the readable view says so.
    let double = r#"{"type": "single", "target": {"write": {"resources": ["main", "spare"], "ack": "all"}}}"#;
    save_route(&browser, double, "double-write to spare").await;
    browser
        .wait_for(
            "version 2",
            "document.querySelector('#route-view h2').textContent === 'Version 2'",
        )
        .await;
    assert!(
        browser
            .text("#route-view")
            .await
            .contains("double-written, ack all")
    );
    browser.fill("#explain-key", "user:42").await;
    browser.click("#explain button[type=submit]").await;
    browser
        .wait_for(
            "the explanation",
            "document.querySelector('#explain-result dl')",
        )
        .await;
    browser.screenshot("route").await;

    // Someone changes it over the API meanwhile: saving the stale edit is a 412, shown as a diff.
    let theirs = json!({"type": "single", "target": {"read": {"resources": ["spare", "main"], "policy": "ordered"}, "write": {"resources": ["main"]}}});
    cp.expect(
        "PUT",
        "/v1/tenants/acme/route",
        Some(json!({"route": theirs, "comment": "from curl"})),
        200,
    )
    .await;
    save_route(
        &browser,
        r#"{"type": "single", "target": "spare"}"#,
        "stale edit",
    )
    .await;
    browser
        .wait_for(
            "the conflict",
            "document.querySelector('#route-conflict .diff-table')",
        )
        .await;
    let conflict = browser.text("#route-conflict").await;
    assert!(
        conflict.contains("version 3") && conflict.contains("\"ordered\""),
        "{conflict}"
    );
    browser.screenshot("route-conflict").await;
    assert_eq!(
        cp.expect("GET", "/v1/tenants/acme/route", None, 200).await["version"],
        3
    );

    // History: versions 1 and 3 side by side, then a rollback to 1 (a new version 4).
    browser.open("#/tenants/acme/history").await;
    browser.on_page("history").await;
    browser
        .find("#diff-left option[value='1']")
        .await
        .click()
        .await
        .expect("pick 1");
    browser
        .find("#diff-right option[value='3']")
        .await
        .click()
        .await
        .expect("pick 3");
    browser
        .js(
            "document.querySelector('#diff-out').replaceChildren(); return true",
            vec![],
        )
        .await;
    browser.click(".card .inline button").await;
    browser
        .wait_for("the diff of 1 and 3", "document.querySelector('#diff-out th') && document.querySelector('#diff-out th').textContent === 'Version 1' && document.querySelectorAll('#diff-out th')[1].textContent === 'Version 3'")
        .await;
    assert!(browser.text("#diff-out").await.contains("\"ordered\""));
    browser.screenshot("history").await;
    browser
        .click_and_confirm(
            "#versions tr[data-version='1'] .rollback",
            "the rollback prompt",
        )
        .await;
    browser
        .wait_for(
            "version 4",
            "document.querySelector('#versions tbody tr').dataset.version === '4'",
        )
        .await;
    let current = cp.expect("GET", "/v1/tenants/acme/route", None, 200).await;
    assert_eq!(
        (current["version"].clone(), current["route"].clone()),
        (json!(4), json!({"type": "single", "target": "main"}))
    );

    guard::refuse_and_force(&browser, &cp).await;

    migration::migrate(&browser, &cp, &old, &new, &gw.gateway, &secret).await;

    // Resources: the one the route now uses cannot be deleted (the page says why); the other can.
    browser.open("#/resources").await;
    browser.on_page("resources").await;
    browser
        .click_and_confirm(
            "#resources tr[data-resource='spare'] .danger",
            "the delete confirmation",
        )
        .await;
    browser
        .wait_for("the 409 explained", "document.getElementById('notice').textContent.includes('spare cannot be deleted: the current route of acme uses it')")
        .await;
    browser.screenshot("resources").await;
    browser
        .click_and_confirm(
            "#resources tr[data-resource='main'] .danger",
            "the delete confirmation",
        )
        .await;
    browser
        .wait_for(
            "main deleted",
            "!document.querySelector('#resources tr[data-resource=\"main\"]')",
        )
        .await;

    // Gateways: a frozen gateway falls behind a change, and the page says so; thawed, it converges.
    browser.open("#/gateways").await;
    browser.on_page("gateways").await;
    let converged_at = |revision: &Value| {
        format!(
            "document.getElementById('convergence').dataset.converged === 'true' && document.getElementById('convergence').dataset.revision === '{revision}'"
        )
    };
    let revision = cp.expect("GET", "/healthz", None, 200).await["revision"].clone();
    browser
        .wait_for("convergence", &converged_at(&revision))
        .await;
    gw.gateway.signal("STOP");
    cp.expect(
        "PATCH",
        "/v1/tenants/acme",
        Some(json!({"description": "Acme Corporation"})),
        200,
    )
    .await;
    browser
        .wait_for(
            "the gateway behind",
            "document.getElementById('convergence').dataset.converged === 'false'",
        )
        .await;
    assert!(
        browser
            .text("#gateways tbody")
            .await
            .contains("behind by 1")
    );
    browser.screenshot("gateways-behind").await;
    gw.gateway.signal("CONT");
    let revision = cp.expect("GET", "/healthz", None, 200).await["revision"].clone();
    browser
        .wait_for("convergence again", &converged_at(&revision))
        .await;
    assert!(browser.text("#gateways tbody").await.contains("live"));
    browser.screenshot("gateways").await;

    // Audit: route changes only.
    browser.open("#/audit").await;
    browser.on_page("audit").await;
    browser.fill("#audit-action", "route.").await;
    browser.click("#audit-filters button[type=submit]").await;
    browser
        .wait_for("route changes only", "[...document.querySelectorAll('#audit tbody tr:not(.detail) td:nth-child(4)')].every(td => td.textContent.startsWith('route.')) && document.querySelectorAll('#audit tbody tr:not(.detail)').length === 6")
        .await;
    browser.click("#audit tbody tr:first-child button").await;
    browser.find("#audit tr.detail .diff-table").await;
    browser.screenshot("audit").await;
    browser.assert_same_origin_only().await;
    browser.close().await;
}
