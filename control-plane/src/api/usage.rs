//! What gateways report of tenants' traffic, over the usage window: the platform's overview (`GET /v1/usage`, the
//! busiest tenants now and every tenant's traffic by minute) and one tenant's minutes (`GET
//! /v1/tenants/{tenant}/usage`). Figures only, no keys nor values: viewers read both, a tenant-owner its tenant's.
//! The reports arrive with the tracking reports (`api::observations`); each credential's use is in the credential
//! listing (`api::credentials`).

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use serde::Deserialize;
use switchyard_schemas::api::{TenantUsageNow, TenantUsageSeries, UsageOverview, UsageRates};

use crate::api::lookup;
use crate::auth::Access;
use crate::db;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery};
use crate::openapi::Operation;
use crate::state::AppState;

/// How long usage is kept, at one-minute resolution.
pub(crate) const WINDOW: Duration = Duration::from_secs(24 * 3600);
const RESOLUTION: Duration = Duration::from_secs(60);
/// "Now" in the overview: the current minute and the one before it.
const RECENT: Duration = Duration::from_secs(120);
/// A gateway's report of a credential's connections counts this long (it repeats them at every report while
/// they are open).
pub(crate) const FRESH: Duration = db::observations::FRESH;
const DEFAULT_TOP: usize = 10;
const MAX_TOP: usize = 1000;

pub(crate) fn operations() -> Vec<Operation> {
    vec![
        Operation::new(
            "getUsage",
            Method::GET,
            "/v1/usage",
            "The platform's overview: the busiest tenants now by ops/s, errors and connections, and every tenant's traffic by minute over the window",
            Access::Read,
            get(overview),
        )
        .reply::<UsageOverview>(200)
        .query_integer(
            "limit",
            "At most this many tenants in each top list (default 10, at most 1000).",
        )
        .errors(&[400]),
        Operation::new(
            "getTenantUsage",
            Method::GET,
            "/v1/tenants/{tenant}/usage",
            "The tenant's traffic minute by minute (ops/s, errors/s, bytes/s, connections, p99) over the window",
            Access::TenantRead,
            get(tenant_usage),
        )
        .reply::<TenantUsageSeries>(200)
        .query_integer(
            "minutes",
            "Only the last this many minutes (default and at most 1440, the whole window).",
        )
        .errors(&[400, 404]),
    ]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Top {
    limit: Option<usize>,
}

async fn overview(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<Top>,
) -> ApiResult<Json<UsageOverview>> {
    let limit = query.limit.unwrap_or(DEFAULT_TOP);
    if !(1..=MAX_TOP).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be 1 to {MAX_TOP}"
        )));
    }
    let now = db::usage::now(&state.pool).await?;
    let top = |key: fn(&UsageRates) -> f64| {
        let mut tenants: Vec<TenantUsageNow> = now
            .iter()
            .filter(|t| key(&t.usage) > 0.0)
            .cloned()
            .collect();
        tenants.sort_by(|a, b| {
            key(&b.usage)
                .total_cmp(&key(&a.usage))
                .then_with(|| a.tenant.cmp(&b.tenant))
        });
        tenants.truncate(limit);
        tenants
    };
    let total = db::usage::series(&state.pool, None, WINDOW).await?;
    Ok(Json(UsageOverview {
        by_ops: top(|t| t.ops_per_sec),
        by_errors: top(|t| t.errors_per_sec),
        by_connections: top(|t| t.connections as f64),
        total,
        recent_s: RECENT.as_secs(),
        window_s: WINDOW.as_secs(),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Span {
    minutes: Option<u64>,
}

async fn tenant_usage(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiQuery(query): ApiQuery<Span>,
) -> ApiResult<Json<TenantUsageSeries>> {
    let most = WINDOW.as_secs() / RESOLUTION.as_secs();
    let minutes = query.minutes.unwrap_or(most);
    if !(1..=most).contains(&minutes) {
        return Err(ApiError::BadRequest(format!("minutes must be 1 to {most}")));
    }
    let row = lookup::tenant(&state.pool, &tenant).await?;
    let window = RESOLUTION * u32::try_from(minutes).unwrap_or(u32::MAX);
    let points = db::usage::series(&state.pool, Some(row.id), window).await?;
    Ok(Json(TenantUsageSeries {
        tenant: row.name,
        points,
        window_s: window.as_secs(),
        resolution_s: RESOLUTION.as_secs(),
    }))
}
