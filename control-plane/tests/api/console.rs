//! `/console`: the console's files, served to anyone, each with the security headers, and all of them reachable
//! from the page (a file the page imports but the binary lacks would break the console only in a browser).

use std::collections::BTreeSet;

use sqlx::PgPool;

use crate::common::{Api, Reply};

async fn fetch(api: &Api, path: &str) -> Reply {
    api.request("GET", path, None, &[], None).await
}

fn text(reply: &Reply) -> &str {
    reply.body.as_str().unwrap_or_default()
}

/// The console paths `source` (served at `at`) refers to: the page's `href`/`src`, a module's `from './x.js'`.
fn references(at: &str, source: &str) -> Vec<String> {
    let dir = &at[..=at.rfind('/').unwrap()];
    let mut found = Vec::new();
    for (open, close) in [("href=\"", '"'), ("src=\"", '"'), ("from './", '\'')] {
        for piece in source.split(open).skip(1) {
            let target = &piece[..piece.find(close).unwrap()];
            found.push(match open {
                "from './" => format!("{dir}{target}"),
                _ => target.to_string(),
            });
        }
    }
    found
}

#[sqlx::test(migrations = "../migrations")]
async fn every_file_the_page_needs_is_served_with_the_policy(pool: PgPool) {
    let api = Api::new(pool).await;
    let mut seen = BTreeSet::new();
    let mut queue = vec!["/console/".to_string()];
    while let Some(path) = queue.pop() {
        if !seen.insert(path.clone()) {
            continue;
        }
        let reply = fetch(&api, &path).await;
        assert_eq!(
            reply.status, 200,
            "{path} (no token needed: the files hold no data)"
        );
        let kind = reply.header("content-type").unwrap_or_default();
        let expected = match path.rsplit('.').next() {
            Some("js") => "text/javascript",
            Some("css") => "text/css",
            _ => "text/html",
        };
        assert!(kind.starts_with(expected), "{path}: {kind}");
        let policy = reply.header("content-security-policy").unwrap_or_default();
        assert!(
            policy.starts_with("default-src 'self'; script-src 'self'; style-src 'self';")
                && policy.contains("frame-ancestors 'none'")
                && !policy.contains("unsafe"),
            "{path}: {policy}"
        );
        assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
        let source = text(&reply);
        // The SVG namespace (what `createElementNS` makes chart elements in) is a name, not a place loaded from.
        let named = source.replace("'http://www.w3.org/2000/svg'", "");
        assert!(
            !named.contains("http://") && !named.contains("https://"),
            "{path} names another origin"
        );
        queue.extend(
            references(&path, source)
                .into_iter()
                .filter(|p| p.starts_with("/console/")),
        );
    }
    // The page, its stylesheet and every module of the app.
    assert!(seen.len() >= 12, "{seen:?}");
    assert!(seen.contains("/console/js/routes.js"), "{seen:?}");

    assert_eq!(fetch(&api, "/console/js/missing.js").await.status, 404);
    let bare = fetch(&api, "/console").await;
    assert_eq!(
        (bare.status, bare.header("location")),
        (308, Some("/console/"))
    );
    // Serving the console opens nothing of the API.
    assert_eq!(fetch(&api, "/v1/tenants").await.status, 401);
}
