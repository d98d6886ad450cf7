//! `/v1/tenants/{tenant}/readiness-probe`: "would the tenant's traffic work on that destination?", asked before
//! any migration. The probe's destination goes to gateways with the tenant's snapshot as placement only; they
//! count the tenant's commands against it as they do for a migration's destination, and the answer is a
//! migration's readiness (see `api::readiness`, docs/migration.md#readiness).

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, put};
use axum::{Extension, Json};
use switchyard_schemas::api::{ReadinessProbe, ReadinessProbeSet};

use crate::api::{lookup, migrations, readiness};
use crate::auth::Access;
use crate::db::audit::{Actor, AuditRecord};
use crate::db::change::Change;
use crate::db::readiness::ProbeRow;
use crate::db::{self, timestamp};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, JsonBody, from_value};
use crate::openapi::Operation;
use crate::route_schema;
use crate::state::AppState;

pub(crate) fn operations() -> Vec<Operation> {
    let path = "/v1/tenants/{tenant}/readiness-probe";
    vec![
        Operation::new(
            "setReadinessProbe",
            Method::PUT,
            path,
            "Check the tenant's live commands against a destination without migrating (replaces its probe)",
            Access::Change,
            put(set),
        )
        .request::<ReadinessProbeSet>()
        .example(serde_json::json!({"to": "redis-cluster://10.0.0.5:7000"}))
        .reply::<ReadinessProbe>(200)
        .errors(&[404, 422]),
        Operation::new(
            "getReadinessProbe",
            Method::GET,
            path,
            "What of the tenant's live commands would fail on its probe's destination, across gateways",
            Access::TenantRead,
            get(show),
        )
        .reply::<ReadinessProbe>(200)
        .errors(&[404]),
        Operation::new(
            "deleteReadinessProbe",
            Method::DELETE,
            path,
            "Stop the tenant's readiness probe (its counts go with it)",
            Access::Change,
            delete(remove),
        )
        .reply_empty(204)
        .errors(&[404]),
    ]
}

fn object(tenant: &str) -> String {
    format!("tenants/{tenant}/readiness-probe")
}

fn no_probe(tenant: &str) -> ApiError {
    ApiError::not_found(format!("tenant '{tenant}' has no readiness probe"))
}

async fn answer(state: &AppState, tenant_id: i64, probe: ProbeRow) -> ApiResult<ReadinessProbe> {
    let rows = db::readiness::Subject::Probe(tenant_id)
        .rows(&state.pool)
        .await?;
    let readiness = readiness::summed(state, &rows, &probe.destination.0).await?;
    Ok(ReadinessProbe {
        to: probe.destination.0,
        author: probe.author,
        created_at: timestamp(probe.created_at),
        readiness,
    })
}

async fn show(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
) -> ApiResult<Json<ReadinessProbe>> {
    let row = lookup::tenant(&state.pool, &tenant).await?;
    let probe = db::readiness::probe(&state.pool, row.id)
        .await?
        .ok_or_else(|| no_probe(&tenant))?;
    Ok(Json(answer(&state, row.id, probe).await?))
}

async fn set(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(tenant): ApiPath<String>,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> ApiResult<Json<ReadinessProbe>> {
    // A table is checked against the route-table schema for precise paths; a target is left to serde.
    if let Some(to) = body.get("to").filter(|to| to.get("type").is_some()) {
        route_schema::check(to, "/to")?;
    }
    let body: ReadinessProbeSet = from_value(body)?;
    let destination = migrations::destination_table(body.to)?;
    let mut change = Change::begin(&state.pool).await?;
    let row = lookup::tenant_for_update(change.conn(), &tenant).await?;
    migrations::validate_destination(&mut change, &destination).await?;
    let before = db::readiness::probe(change.conn(), row.id).await?;
    let probe = db::readiness::set_probe(change.conn(), row.id, &destination, &actor.0).await?;
    let record = AuditRecord::new(
        "tenant.readiness_probe.set",
        Some(&tenant),
        object(&tenant),
        before
            .map(|b| serde_json::json!({"to": b.destination.0}))
            .as_ref(),
        Some(&serde_json::json!({"to": destination})),
    );
    state.commit(change, &actor, record).await?;
    Ok(Json(answer(&state, row.id, probe).await?))
}

async fn remove(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(tenant): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let mut change = Change::begin(&state.pool).await?;
    let row = lookup::tenant_for_update(change.conn(), &tenant).await?;
    let before = db::readiness::probe(change.conn(), row.id)
        .await?
        .ok_or_else(|| no_probe(&tenant))?;
    db::readiness::remove_probe(change.conn(), row.id).await?;
    let record = AuditRecord::new(
        "tenant.readiness_probe.delete",
        Some(&tenant),
        object(&tenant),
        Some(&serde_json::json!({"to": before.destination.0})),
        None::<&serde_json::Value>,
    );
    state.commit(change, &actor, record).await?;
    Ok(StatusCode::NO_CONTENT)
}
