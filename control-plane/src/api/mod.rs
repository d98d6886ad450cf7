//! The REST API: the table of every endpoint (each `api/` file adds its resource's) and the router built from it.

pub(crate) mod audit;
pub(crate) mod credentials;
pub(crate) mod divergence;
pub(crate) mod gateways;
pub(crate) mod import;
pub(crate) mod keyspace;
pub(crate) mod migrations;
pub(crate) mod observations;
pub(crate) mod probes;
pub(crate) mod readiness;
pub(crate) mod resources;
pub(crate) mod routes;
pub(crate) mod snapshot;
pub(crate) mod system;
pub(crate) mod tenants;
pub(crate) mod tokens;
pub(crate) mod usage;

mod lookup;

use std::sync::Arc;

use axum::Router;
use axum::middleware::{from_fn, from_fn_with_state};
use serde_json::Value;

use crate::auth::{self, Access, Guard};
use crate::console;
use crate::error::ApiError;
use crate::openapi::{self, Operation};
use crate::state::AppState;
use crate::{dry_run, metrics};

/// Every endpoint the control plane serves.
pub fn operations() -> Vec<Operation> {
    [
        ("tenants", tenants::operations()),
        ("credentials", credentials::operations()),
        ("resources", resources::operations()),
        ("routes", routes::operations()),
        ("import", import::operations()),
        ("migrations", migrations::operations()),
        ("migrations", readiness::operations()),
        ("migrations", probes::operations()),
        ("snapshot", snapshot::operations()),
        ("gateways", gateways::operations()),
        ("observations", observations::operations()),
        ("usage", usage::operations()),
        ("usage", keyspace::operations()),
        ("usage", divergence::operations()),
        ("audit", audit::operations()),
        ("tokens", tokens::operations()),
        ("service", system::operations(openapi_document)),
    ]
    .into_iter()
    .flat_map(|(tag, operations)| {
        operations.into_iter().map(move |mut operation| {
            operation.tag = tag;
            operation
        })
    })
    .collect()
}

/// The OpenAPI document of every endpoint, as `GET /openapi.json` serves it.
pub fn openapi_document() -> Value {
    openapi::document(&operations())
}

/// Every endpoint, with its access rule applied, and the console's files (open: they hold no data).
pub fn router(state: AppState) -> Router {
    let mut router = Router::new();
    for operation in operations() {
        let mut handler = operation.handler;
        // Every change commits through `AppState::commit`, which is what makes `?dry_run=true` honest; the
        // gateways' heartbeat does not, so it is not offered there.
        if operation.access.by_role() {
            handler = handler.route_layer(from_fn(dry_run::scope));
        }
        if operation.access != Access::Public {
            let guard = Guard {
                pool: state.pool.clone(),
                tokens: Arc::clone(&state.tokens),
                access: operation.access,
            };
            handler = handler.route_layer(from_fn_with_state(guard, auth::require));
        }
        router = router.route(operation.path, handler);
    }
    router
        .merge(console::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(
            Arc::clone(&state.metrics),
            metrics::count,
        ))
        .layer(axum::middleware::from_fn(crate::access_log::log))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

/// The path exists, the method does not; axum still adds the `Allow` header listing the ones that do.
async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
