//! What the console's responses and pages may do: the security headers on every file, only same-origin loads,
//! and a policy that blocks inline script.

use serde_json::Value;
use switchyard_tests::{ADMIN_TOKEN, ControlPlane};

use crate::browser::Browser;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_console_response_has_a_strict_policy() {
    let cp = ControlPlane::start();
    let http = reqwest::Client::new();
    for path in [
        "/console/",
        "/console/js/app.js",
        "/console/console.css",
        "/console/nothing.js",
    ] {
        let response = http
            .get(format!("{}{path}", cp.url()))
            .send()
            .await
            .expect("GET");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let policy = header("content-security-policy");
        for rule in [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "frame-ancestors 'none'",
            "connect-src 'self'",
        ] {
            assert!(
                policy.contains(rule),
                "{path}: {rule} missing from {policy:?}"
            );
        }
        assert!(!policy.contains("unsafe"), "{path}: {policy}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        let expected = if path.ends_with("nothing.js") {
            404
        } else {
            200
        };
        assert_eq!(response.status().as_u16(), expected, "{path}");
    }
    let redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
        .get(format!("{}/console", cp.url()))
        .send()
        .await
        .expect("GET /console");
    assert_eq!(
        redirect.headers().get("location").map(|v| v.as_bytes()),
        Some(&b"/console/"[..])
    );

    // In the browser: every page loads only the console's own files and the API, and the policy blocks an
    // injected inline script.
    let browser = Browser::start(&cp.url()).await;
    browser.open("").await;
    browser.on_page("sign-in").await;
    browser.fill("#token", ADMIN_TOKEN).await;
    browser.click("#sign-in").await;
    browser.on_page("tenants").await;
    for (fragment, page) in [
        ("#/resources", "resources"),
        ("#/gateways", "gateways"),
        ("#/audit", "audit"),
        ("#/tokens", "tokens"),
    ] {
        browser.open(fragment).await;
        browser.on_page(page).await;
        browser.assert_same_origin_only().await;
    }
    let ran = browser
        .js(
            "window.injected = false; const s = document.createElement('script'); s.textContent = 'window.injected = true'; \
             document.body.append(s); return window.injected",
            vec![],
        )
        .await;
    assert_eq!(
        ran,
        Value::Bool(false),
        "an inline script ran despite the policy"
    );
    browser.close().await;
}
