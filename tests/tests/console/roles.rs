//! The console as each role sees it: an admin creates tokens on the Tokens page (each secret shown once); a viewer
//! and a tenant-owner then sign in and are offered only what their role may do, and what the page does not offer
//! is refused by the API (403) when tried anyway.

use serde_json::{Value, json};
use switchyard_tests::{ADMIN_TOKEN, ControlPlane, RedisServer};

use crate::browser::Browser;

/// Signs in with `token` and waits for the tenants page.
pub(crate) async fn sign_in_as(browser: &Browser, token: &str) {
    browser.open("").await;
    browser.on_page("sign-in").await;
    // Nothing to navigate to before signing in: no links, no sign-out.
    let shown = browser
        .js(
            "return ['nav', 'sign-out', 'whoami'].filter(id => document.getElementById(id).offsetParent !== null)",
            vec![],
        )
        .await;
    assert_eq!(shown, serde_json::json!([]), "shown on the sign-in page");
    browser.fill("#token", token).await;
    browser.click("#sign-in").await;
    browser.on_page("tenants").await;
}

async fn sign_out(browser: &Browser) {
    browser.click("#sign-out").await;
    browser.on_page("sign-in").await;
}

/// How many elements match `css`.
async fn count(browser: &Browser, css: &str) -> u64 {
    let script = format!("return document.querySelectorAll({css:?}).length");
    browser.js(&script, vec![]).await.as_u64().expect("a count")
}

/// The visible navigation links, by section.
async fn nav(browser: &Browser) -> Value {
    browser
        .js(
            "return [...document.querySelectorAll('#nav a')].filter(a => !a.hidden).map(a => a.dataset.section)",
            vec![],
        )
        .await
}

/// Calls the API from the page, with the signed-in token, as a person with the browser's devtools would:
/// (status, message).
async fn from_the_page(browser: &Browser, method: &str, path: &str, body: Value) -> (u64, String) {
    let done = browser
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1]; \
             fetch(arguments[1], {method: arguments[0], body: arguments[0] === 'GET' ? undefined : arguments[2], \
               headers: {'Content-Type': 'application/json', \
               Authorization: `Bearer ${sessionStorage.getItem('switchyard.console.token')}`}}) \
             .then(r => r.json().then(b => done([r.status, b.message || '']))) \
             .catch(e => done([0, String(e)]))",
            vec![json!(method), json!(path), json!(body.to_string())],
        )
        .await
        .expect("a fetch from the page");
    (
        done[0].as_u64().unwrap_or_default(),
        done[1].as_str().unwrap_or_default().to_string(),
    )
}

/// Creates a token on the Tokens page and returns its secret, read from the box that shows it once.
async fn create_token(browser: &Browser, name: &str, role: &str, setup: &str) -> String {
    browser.open("#/tokens").await;
    browser.on_page("tokens").await;
    browser.fill("#new-token-name", name).await;
    browser
        .js(
            &format!(
                "const role = document.getElementById('new-token-role'); role.value = '{role}'; \
                 role.dispatchEvent(new Event('change')); {setup} return true"
            ),
            vec![],
        )
        .await;
    let listed = format!(
        "document.querySelector('#tokens tr[data-token=\"{name}\"]') && document.getElementById('new-secret')"
    );
    browser.click("#create-token button[type=submit]").await;
    browser.wait_for("the new token's secret", &listed).await;
    let secret = browser.text("#new-secret").await;
    assert!(secret.starts_with("syt_"), "{secret}");
    secret
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_is_offered_only_what_it_may_do() {
    let cp = ControlPlane::start();
    // A Redis that answers: a route's new resource must pass the control plane's probe.
    let redis = RedisServer::start();
    let route = json!({"type": "single", "target": redis.url()});
    for tenant in ["acme", "globex"] {
        cp.create_tenant(tenant, route.clone()).await;
    }
    cp.expect(
        "POST",
        "/v1/resources",
        Some(json!({"name": "main", "url": "redis://127.0.0.1:6398"})),
        201,
    )
    .await;
    let browser = Browser::start(&cp.url()).await;

    // An admin: the Tokens page creates a viewer and a tenant-owner of acme that may change ip_allow.
    sign_in_as(&browser, ADMIN_TOKEN).await;
    assert_eq!(
        nav(&browser).await,
        json!([
            "tenants",
            "usage",
            "resources",
            "gateways",
            "audit",
            "tokens"
        ])
    );
    let viewer = create_token(&browser, "watch", "viewer", "").await;
    let owner = create_token(
        &browser,
        "acme-team",
        "tenant-owner",
        "document.getElementById('new-token-tenants').value = 'acme'; \
         document.querySelector('.new-token-policy[value=ip_allow]').checked = true;",
    )
    .await;
    browser.screenshot("tokens").await;
    // A token to revoke from the page: it stops working at once.
    let doomed = create_token(&browser, "doomed", "operator", "").await;
    browser
        .click_and_confirm(
            "#tokens tr[data-token='doomed'] .revoke",
            "the revoke confirmation",
        )
        .await;
    browser
        .wait_for("the revoked token", "document.querySelector('#tokens tr[data-token=\"doomed\"]').classList.contains('revoked')")
        .await;
    let refused = reqwest::Client::new()
        .get(format!("{}/v1/whoami", cp.url()))
        .bearer_auth(&doomed)
        .send()
        .await
        .expect("GET /v1/whoami");
    assert_eq!(refused.status().as_u16(), 401);
    sign_out(&browser).await;

    // A viewer: every section but Tokens, and no action anywhere.
    sign_in_as(&browser, &viewer).await;
    assert_eq!(browser.text("#whoami").await, "token:watch (viewer)");
    assert_eq!(
        nav(&browser).await,
        json!(["tenants", "usage", "resources", "gateways", "audit"])
    );
    assert_eq!(count(&browser, "#tenants tbody tr").await, 2);
    assert_eq!(count(&browser, "#create-tenant").await, 0);
    browser.open("#/tenants/acme").await;
    browser.on_page("tenant").await;
    browser.find("#credential-list tbody tr").await;
    for absent in [
        "#toggle-disabled",
        "#save-tenant",
        "#edit-tenant .danger",
        "#issue-credential",
        "#import-credential",
        "#credential-list button",
    ] {
        assert_eq!(
            count(&browser, absent).await,
            0,
            "a viewer is offered {absent}"
        );
    }
    assert_eq!(
        count(
            &browser,
            "#edit-tenant input:not([disabled]), #edit-tenant textarea:not([disabled])"
        )
        .await,
        0
    );
    assert!(
        !browser
            .client
            .source()
            .await
            .expect("source")
            .contains("sy_"),
        "no secret on the page"
    );
    browser.screenshot("viewer-tenant").await;
    browser.open("#/tenants/acme/route").await;
    browser.on_page("route").await;
    assert_eq!(count(&browser, "#route-form").await, 0);
    assert_eq!(count(&browser, "#explain").await, 1);
    browser.open("#/tenants/acme/history").await;
    browser.on_page("history").await;
    assert_eq!(count(&browser, ".rollback").await, 0);
    browser.open("#/tenants/acme/migrations").await;
    browser.on_page("migrations").await;
    assert_eq!(count(&browser, "#start-migration").await, 0);
    browser.open("#/resources").await;
    browser.on_page("resources").await;
    assert_eq!(
        count(&browser, "#resources tr[data-resource='main']").await,
        1
    );
    assert_eq!(
        count(&browser, "#create-resource, #resources button").await,
        0
    );
    let (status, message) =
        from_the_page(&browser, "POST", "/v1/tenants", json!({"name": "mine"})).await;
    assert_eq!(status, 403, "{message}");
    assert!(
        message.contains("needs the role admin or operator"),
        "{message}"
    );
    let (status, _) = from_the_page(&browser, "GET", "/v1/tokens", json!(null)).await;
    assert_eq!(status, 403);
    sign_out(&browser).await;

    // A tenant-owner of acme: acme only, its credentials, and ip_allow.
    sign_in_as(&browser, &owner).await;
    assert_eq!(
        browser.text("#whoami").await,
        "token:acme-team (tenant-owner)"
    );
    assert_eq!(nav(&browser).await, json!(["tenants"]));
    assert_eq!(browser.text("#tenants tbody").await.lines().count(), 1);
    assert_eq!(browser.text("#tenants .tenant-link").await, "acme");
    assert_eq!(count(&browser, "#create-tenant").await, 0);
    browser.click("#tenants .tenant-link").await;
    browser.on_page("tenant").await;
    assert_eq!(count(&browser, ".tabs [data-tab='migrations']").await, 0);
    assert_eq!(
        count(&browser, "#toggle-disabled, #edit-tenant .danger").await,
        0
    );
    let editable = browser
        .js("return [...document.querySelectorAll('#edit-tenant input, #edit-tenant textarea')].filter(e => !e.disabled).map(e => e.id)", vec![])
        .await;
    assert_eq!(editable, json!(["tenant-ip-allow"]));
    browser.set_value("#tenant-ip-allow", "10.0.0.0/8").await;
    browser.click("#save-tenant").await;
    browser.notice_ok("the save").await;
    assert_eq!(
        cp.expect("GET", "/v1/tenants/acme", None, 200).await["ip_allow"],
        json!(["10.0.0.0/8"])
    );
    // Its credentials: issued here, the secret shown once.
    browser.fill("#issue-description", "from the owner").await;
    browser.click("#issue").await;
    assert!(browser.text("#new-secret").await.starts_with("sy_"));
    assert_eq!(
        count(&browser, "#credential-list button").await,
        2,
        "each valid credential can be revoked"
    );
    browser.screenshot("owner-tenant").await;
    browser.open("#/tenants/acme/route").await;
    browser.on_page("route").await;
    assert_eq!(count(&browser, "#route-form").await, 0);
    // Another tenant's page: the API's refusal, said.
    browser.open("#/tenants/globex").await;
    browser
        .wait_for(
            "the refusal",
            "document.getElementById('notice').textContent.includes('is not one of its tenants')",
        )
        .await;
    for (method, path, body) in [
        (
            "PATCH",
            "/v1/tenants/acme",
            json!({"limits": {"max_connections": 5}}),
        ),
        ("GET", "/v1/tenants/globex", json!(null)),
        ("GET", "/v1/resources", json!(null)),
    ] {
        let (status, message) = from_the_page(&browser, method, path, body).await;
        assert_eq!(status, 403, "{method} {path}: {message}");
        assert!(message.contains("the role"), "{message}");
    }
    browser.assert_same_origin_only().await;
    browser.close().await;
}
