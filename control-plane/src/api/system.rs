//! Endpoints about the service itself: health, metrics, and the OpenAPI document.

use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::Value;
use switchyard_schemas::api::Health;

use crate::auth::Access;
use crate::db;
use crate::openapi::Operation;
use crate::state::AppState;

/// `openapi_document` builds what `GET /openapi.json` serves; it is passed in because the endpoint list it
/// describes is built from this module's own.
pub(crate) fn operations(openapi_document: fn() -> Value) -> Vec<Operation> {
    vec![
        Operation::new(
            "health",
            Method::GET,
            "/healthz",
            "Whether the database answers",
            Access::Public,
            get(health),
        )
        .reply::<Health>(200)
        .also_reply::<Health>(503),
        Operation::new(
            "metrics",
            Method::GET,
            "/metrics",
            "Prometheus metrics",
            Access::Public,
            get(metrics),
        )
        .reply_text("text/plain; version=0.0.4"),
        Operation::new(
            "openapi",
            Method::GET,
            "/openapi.json",
            "This API's OpenAPI 3.1 document",
            Access::Public,
            get(move || async move { Json(openapi_document()) }),
        )
        .reply::<Value>(200),
    ]
}

async fn health(State(state): State<AppState>) -> impl IntoResponse {
    match db::revision::current(&state.pool).await {
        Ok(revision) => (
            StatusCode::OK,
            Json(Health {
                status: "ok".to_string(),
                revision,
            }),
        ),
        Err(error) => {
            tracing::warn!(%error, "health check: database unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(Health {
                    status: "database unavailable".to_string(),
                    revision: state.revisions.latest(),
                }),
            )
        }
    }
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(state.revisions.latest()),
    )
}
