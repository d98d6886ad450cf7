//! `/v1/tenants/{tenant}/migrations/{id}/readiness`: whether the tenant's live commands would work on the
//! migration's destination, from what every gateway counted (see the gateway's `readiness`, and
//! docs/migration.md#readiness). `cutover` consults the same sums and refuses a migration that is not ready
//! unless forced.

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use switchyard_schemas::api::{
    ErrorDetail, MigrationReadiness, ReadinessCounts, ReadinessExample, merge_examples,
};

use crate::api::lookup;
use crate::auth::Access;
use crate::db;
use crate::db::timestamp;
use crate::error::{ApiError, ApiResult};
use crate::extract::ApiPath;
use crate::openapi::Operation;
use crate::state::AppState;

pub(crate) fn operations() -> Vec<Operation> {
    vec![
        Operation::new(
            "getMigrationReadiness",
            Method::GET,
            "/v1/tenants/{tenant}/migrations/{id}/readiness",
            "What of the tenant's live commands would fail on the migration's destination, across gateways",
            Access::Read,
            get(show),
        )
        .reply::<MigrationReadiness>(200)
        .errors(&[400, 404]),
    ]
}

async fn show(
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, i64)>,
) -> ApiResult<Json<MigrationReadiness>> {
    lookup::migration(&state.pool, &tenant, id).await?;
    Ok(Json(of_migration(&state, id).await?))
}

/// Every gateway's sums for migration `id`, added up. A gateway gone since still counts: what it saw happened.
pub(crate) async fn of_migration(state: &AppState, id: i64) -> ApiResult<MigrationReadiness> {
    let rows = db::readiness::of_migration(&state.pool, id).await?;
    let mut counts = ReadinessCounts::default();
    let mut examples: Vec<ReadinessExample> = Vec::new();
    let mut checked = 0u64;
    for row in &rows {
        checked = checked.saturating_add(u64::try_from(row.checked).unwrap_or(0));
        counts.add(&row.counts.0);
        merge_examples(&mut examples, &row.examples.0);
    }
    Ok(MigrationReadiness {
        ready: counts.failing() == 0,
        checked,
        counts,
        examples,
        gateways: rows.iter().map(|row| row.gateway.clone()).collect(),
        updated_at: rows.iter().map(|row| row.updated_at).max().map(timestamp),
    })
}

/// The 409 of a cutover refused because commands counted would fail on the destination: the counts in its
/// message, each kind and each example in its details.
pub(crate) fn not_ready(id: i64, readiness: &MigrationReadiness) -> ApiError {
    let c = &readiness.counts;
    let message = format!(
        "migration {id} is not ready: on the destination, {} multi-key commands, {} transactions and {} scripts \
         seen through the gateways would fail with CROSSSLOT (GET .../migrations/{id}/readiness); fix the \
         clients (hash tags) or cut over anyway with ?force=true",
        c.cross_slot, c.transactions, c.scripts
    );
    let mut details: Vec<ErrorDetail> = [
        ("cross_slot", c.cross_slot),
        ("transactions", c.transactions),
        ("scripts", c.scripts),
    ]
    .into_iter()
    .filter(|(_, count)| *count > 0)
    .map(|(kind, count)| ErrorDetail {
        path: format!("/readiness/counts/{kind}"),
        message: format!("{count} would fail"),
    })
    .collect();
    details.extend(
        readiness
            .examples
            .iter()
            .enumerate()
            .filter(|(_, example)| example.kind.fails())
            .map(|(i, example)| ErrorDetail {
                path: format!("/readiness/examples/{i}"),
                message: format!(
                    "{} {} ({} times): {}",
                    serde_json::to_value(example.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    example.command,
                    example.count,
                    example.keys.join(", ")
                ),
            }),
    );
    ApiError::ConflictWithDetails {
        code: "not_ready",
        message,
        details,
    }
}
