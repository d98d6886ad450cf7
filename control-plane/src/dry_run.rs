//! `?dry_run=true` on any admin change: the handler runs every check and builds its answer, and the change's
//! transaction is rolled back instead of committed (`AppState::commit`; a gateway's removal, which is no change
//! of the snapshot, checks `active` itself), so nothing is written, audited or announced to gateways.
//!
//! The flag travels as a task-local for the duration of one request, so that every write handler gets it at the
//! one place all of them commit, rather than each handler threading it through.

use axum::extract::Request;
use axum::http::{Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

tokio::task_local! {
    static DRY_RUN: bool;
}

/// Whether the request being handled asked for a dry run.
pub(crate) fn active() -> bool {
    DRY_RUN.try_with(|dry| *dry).unwrap_or(false)
}

/// Takes `dry_run` out of a change's query (the handlers' own query types reject parameters they do not know)
/// and runs the handler with the flag set. A read keeps the parameter, which its query type then refuses.
pub(crate) async fn scope(mut request: Request, next: Next) -> Response {
    if request.method() == Method::GET {
        return next.run(request).await;
    }
    let Some(query) = request.uri().query() else {
        return DRY_RUN.scope(false, next.run(request)).await;
    };
    let mut dry = false;
    let mut rest = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("dry_run", "true" | "1" | "") => dry = true,
            ("dry_run", "false" | "0") => {}
            ("dry_run", other) => {
                return ApiError::BadRequest(format!(
                    "dry_run must be true or false, not '{other}'"
                ))
                .into_response();
            }
            _ => rest.push(pair),
        }
    }
    let path = request.uri().path();
    let path_and_query = match rest.is_empty() {
        true => path.to_string(),
        false => format!("{path}?{}", rest.join("&")),
    };
    let mut parts = request.uri().clone().into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    if let Ok(uri) = Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
    DRY_RUN.scope(dry, next.run(request)).await
}
