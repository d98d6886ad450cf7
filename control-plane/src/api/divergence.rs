//! `GET /v1/tenants/{tenant}/divergence`: how far each secondary the gateways double-write the tenant's keys to is
//! from the primary, from the gateways' recent tracking reports (`api::observations`): their divergence samplers'
//! windows together (an estimate weighted by each gateway's samples), and the repair's backlog summed. Figures
//! only, no keys nor values: viewers read it, a tenant-owner its tenant's.

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use switchyard_schemas::api::{DivergenceCounts, DivergenceSummary, TenantDivergence};

use crate::api::lookup;
use crate::auth::Access;
use crate::db;
use crate::db::divergence::DivergenceRow;
use crate::error::ApiResult;
use crate::extract::ApiPath;
use crate::openapi::Operation;
use crate::state::AppState;

pub(crate) fn operations() -> Vec<Operation> {
    vec![
        Operation::new(
            "getTenantDivergence",
            Method::GET,
            "/v1/tenants/{tenant}/divergence",
            "How far each double-write secondary of the tenant is from the primary: the estimated share of differing keys (sampled by the gateways), the repair's backlog and what it repaired",
            Access::TenantRead,
            get(divergence),
        )
        .reply::<TenantDivergence>(200)
        .errors(&[404]),
    ]
}

async fn divergence(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
) -> ApiResult<Json<TenantDivergence>> {
    let row = lookup::tenant(&state.pool, &tenant).await?;
    let rows = db::divergence::fresh(&state.pool, row.id, super::usage::FRESH).await?;
    Ok(Json(TenantDivergence {
        tenant: row.name,
        secondaries: summarize(&rows),
    }))
}

/// One summary per resource of `rows` (ordered by resource): every gateway's samples and backlog summed.
fn summarize(rows: &[DivergenceRow]) -> Vec<DivergenceSummary> {
    let mut out: Vec<DivergenceSummary> = Vec::new();
    for row in rows {
        let view = row.to_api();
        if out.last().is_none_or(|last| last.resource != row.resource) {
            out.push(DivergenceSummary {
                resource: row.resource.clone(),
                estimate: None,
                counts: DivergenceCounts::default(),
                reported_at: view.reported_at.clone(),
                gateways: Vec::new(),
            });
        }
        let Some(summary) = out.last_mut() else {
            continue;
        };
        summary.counts.add(&view.counts);
        summary.reported_at = summary.reported_at.clone().max(view.reported_at.clone());
        let DivergenceCounts {
            samples, differing, ..
        } = summary.counts;
        summary.estimate = (samples > 0).then(|| differing as f64 / samples as f64);
        summary.gateways.push(view);
    }
    out
}
