//! The operators' web console under `/console`: a page and its scripts and styles, embedded in the binary.
//!
//! The console is a client of the public REST API and nothing else: its scripts call `/v1/...` with the token
//! the operator signs in with, so it can do exactly what that token's role can do over curl (and offers no more). This module only
//! serves the static files, open to anyone (they hold no data), each with headers that keep the page from
//! running or loading anything that is not one of these files: a Content-Security-Policy allowing only this
//! origin's scripts and styles (no inline script or style, no `eval`), no framing, and `nosniff`.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// What every console response carries. `connect-src 'self'`: the scripts may call this origin's API only.
const SECURITY_HEADERS: [(HeaderName, &str); 5] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
         object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::REFERRER_POLICY, "no-referrer"),
    // A new binary brings new files under the same names: the browser asks again rather than mixing versions.
    (header::CACHE_CONTROL, "no-cache"),
];

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file of the console: its path under `/console/`, its type and its text.
const ASSETS: &[(&str, &str, &str)] = &[
    ("", HTML, include_str!("assets/index.html")),
    ("console.css", CSS, include_str!("assets/console.css")),
    ("js/app.js", JS, include_str!("assets/js/app.js")),
    ("js/api.js", JS, include_str!("assets/js/api.js")),
    ("js/dom.js", JS, include_str!("assets/js/dom.js")),
    ("js/notice.js", JS, include_str!("assets/js/notice.js")),
    ("js/diff.js", JS, include_str!("assets/js/diff.js")),
    ("js/json.js", JS, include_str!("assets/js/json.js")),
    ("js/schema.js", JS, include_str!("assets/js/schema.js")),
    ("js/tenants.js", JS, include_str!("assets/js/tenants.js")),
    (
        "js/resources.js",
        JS,
        include_str!("assets/js/resources.js"),
    ),
    ("js/routes.js", JS, include_str!("assets/js/routes.js")),
    ("js/gateways.js", JS, include_str!("assets/js/gateways.js")),
    (
        "js/migrations.js",
        JS,
        include_str!("assets/js/migrations.js"),
    ),
    ("js/audit.js", JS, include_str!("assets/js/audit.js")),
    ("js/session.js", JS, include_str!("assets/js/session.js")),
    ("js/tokens.js", JS, include_str!("assets/js/tokens.js")),
    ("js/chart.js", JS, include_str!("assets/js/chart.js")),
    ("js/usage.js", JS, include_str!("assets/js/usage.js")),
];

/// `/console`, `/console/` and `/console/{file}`.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(|| async { asset("") }))
        .route(
            "/console/{*file}",
            get(|Path(file): Path<String>| async move { asset(&file) }),
        )
}

fn asset(file: &str) -> Response {
    let (status, content_type, body) = match ASSETS.iter().find(|(path, _, _)| *path == file) {
        Some((_, content_type, body)) => (StatusCode::OK, *content_type, *body),
        None => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "no such console file\n",
        ),
    };
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
