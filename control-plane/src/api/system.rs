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
use crate::metrics::{GatewayCounts, MigrationFigures, Stored};
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
    let revision = state.revisions.latest();
    // Without the database the rest is still worth a scrape: the series read from it are left out, and their
    // absence is what an alert sees.
    let read = tokio::try_join!(
        db::migrations::unfinished(&state.pool),
        db::gateways::list(&state.pool, state.settings.gateway_ttl),
    );
    let rows = match read {
        Ok(rows) => Some(rows),
        Err(error) => {
            tracing::warn!(%error, "metrics: the database's series are unavailable");
            None
        }
    };
    let stored = rows.as_ref().map(|(migrations, gateways)| {
        let gateways: Vec<_> = gateways.iter().map(|row| row.to_api(revision)).collect();
        let live = gateways.iter().filter(|g| g.live);
        Stored {
            migrations: migrations
                .iter()
                .map(|row| MigrationFigures {
                    id: row.id,
                    tenant: &row.tenant,
                    state: &row.state,
                    progress: &row.progress.0,
                    updated_at: row.updated_at.timestamp(),
                })
                .collect(),
            gateways: GatewayCounts {
                live: live.clone().count(),
                stale: gateways.iter().filter(|g| !g.live).count(),
                behind: live.filter(|g| !g.up_to_date).count(),
            },
        }
    });
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(revision, stored.as_ref()),
    )
}
