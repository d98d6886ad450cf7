//! What gateways notice of tenants' requests: their tracking reports (`POST /v1/gateways/observations`, which
//! also carry migration readiness, see `api::readiness`, tenants' usage, see `api::usage`, and whether each
//! resource is reached, see `api::resources`), and each tenant's hot keys, big keys and slow log
//! across every gateway (admin only: keys are tenant data).

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{get, post};
use axum::{Extension, Json};
use serde::Deserialize;
use switchyard_schemas::api::{
    BigKeys, FleetHotKeys, HotKey, HotKeys, ObservationReport, SlowLog, SlowLogEntry, TenantHotKey,
    TokenRole,
};

use crate::api::lookup;
use crate::auth::{Access, Caller, Kind};
use crate::db;
use crate::db::audit::Actor;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, JsonBody};
use crate::openapi::Operation;
use crate::state::AppState;

/// How long reports are kept: the big keys and slow log endpoints show this much.
const RETENTION: Duration = Duration::from_secs(3600);
/// The hot keys endpoint sums the counts of this last stretch of reports.
const HOT_WINDOW: Duration = Duration::from_secs(60);
/// How many entries a listing gives without `limit`, and at most.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 1000;

pub(crate) fn operations() -> Vec<Operation> {
    vec![
        Operation::new(
            "reportObservations",
            Method::POST,
            "/v1/gateways/observations",
            "A gateway reports its tenants' hot keys, big keys, slow commands and usage, and whether it reaches each resource",
            Access::Gateway,
            post(report),
        )
        .request::<ObservationReport>()
        .example(serde_json::json!({
            "gateway": "gw-1",
            "interval_ms": 10000,
            "tenants": [{"tenant": "acme", "hot_keys": [{"key": "user:1", "count": 1200}]}]
        }))
        .reply_empty(204),
        Operation::new(
            "getHotKeys",
            Method::GET,
            "/v1/tenants/{tenant}/hot-keys",
            "The tenant's most accessed keys over the last minute, across gateways",
            Access::TenantRead,
            get(hot_keys),
        )
        .reply::<HotKeys>(200)
        .query_integer(
            "limit",
            "At most this many keys (default 20, at most 1000).",
        )
        .errors(&[400, 404]),
        Operation::new(
            "getFleetHotKeys",
            Method::GET,
            "/v1/hot-keys",
            "Every tenant's most accessed keys over the last minute, across gateways: the view across tenants",
            Access::Read,
            get(fleet_hot_keys),
        )
        .reply::<FleetHotKeys>(200)
        .query_integer(
            "limit",
            "At most this many keys (default 20, at most 1000).",
        )
        .errors(&[400]),
        Operation::new(
            "getBigKeys",
            Method::GET,
            "/v1/tenants/{tenant}/big-keys",
            "The tenant's largest requests and replies over the last hour, across gateways",
            Access::TenantRead,
            get(big_keys),
        )
        .reply::<BigKeys>(200)
        .query_integer(
            "limit",
            "At most this many keys (default 20, at most 1000).",
        )
        .errors(&[400, 404]),
        Operation::new(
            "getSlowLog",
            Method::GET,
            "/v1/tenants/{tenant}/slowlog",
            "The tenant's slow commands over the last hour, across gateways, newest first",
            Access::TenantRead,
            get(slowlog),
        )
        .reply::<SlowLog>(200)
        .query_integer(
            "limit",
            "At most this many entries (default 20, at most 1000).",
        )
        .errors(&[400, 404]),
    ]
}

async fn report(
    State(state): State<AppState>,
    Extension(_gateway): Extension<Actor>,
    JsonBody(report): JsonBody<ObservationReport>,
) -> ApiResult<StatusCode> {
    db::observations::record(&state.pool, &report.gateway, &report.tenants, RETENTION).await?;
    db::readiness::record(&state.pool, &report.gateway, &report.readiness).await?;
    db::usage::record(
        &state.pool,
        &report.gateway,
        report.interval_ms,
        &report.usage,
        super::usage::WINDOW,
    )
    .await?;
    db::reachability::record(
        &state.pool,
        &report.gateway,
        &report.resources,
        super::usage::WINDOW,
    )
    .await?;
    db::divergence::record(
        &state.pool,
        &report.gateway,
        &report.divergence,
        super::usage::WINDOW,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Listing {
    limit: Option<usize>,
}

impl Listing {
    fn limit(&self) -> ApiResult<usize> {
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::BadRequest(format!(
                "limit must be 1 to {MAX_LIMIT}"
            )));
        }
        Ok(limit)
    }
}

async fn hot_keys(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiQuery(query): ApiQuery<Listing>,
) -> ApiResult<Json<HotKeys>> {
    let limit = query.limit()?;
    let row = lookup::tenant(&state.pool, &tenant).await?;
    let reports = db::observations::hot_keys(&state.pool, row.id, HOT_WINDOW).await?;
    let keys = hottest(
        reports
            .into_iter()
            .flatten()
            .map(|hot| (hot.key, hot.count)),
        limit,
    )
    .into_iter()
    .map(|(key, count)| HotKey { key, count })
    .collect();
    Ok(Json(HotKeys {
        keys,
        window_s: HOT_WINDOW.as_secs(),
    }))
}

async fn fleet_hot_keys(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<Listing>,
) -> ApiResult<Json<FleetHotKeys>> {
    let limit = query.limit()?;
    let reports = db::observations::fleet_hot_keys(&state.pool, HOT_WINDOW).await?;
    let counted = reports.into_iter().flat_map(|(tenant, report)| {
        report
            .into_iter()
            .map(move |hot| ((tenant.clone(), hot.key), hot.count))
    });
    let keys = hottest(counted, limit)
        .into_iter()
        .map(|((tenant, key), count)| TenantHotKey { tenant, key, count })
        .collect();
    Ok(Json(FleetHotKeys {
        keys,
        window_s: HOT_WINDOW.as_secs(),
    }))
}

/// The `limit` most counted of `counts` (every report's counts of a key summed), most counted first, then by key.
fn hottest<K: Ord + std::hash::Hash>(
    counts: impl Iterator<Item = (K, u64)>,
    limit: usize,
) -> Vec<(K, u64)> {
    let mut summed: HashMap<K, u64> = HashMap::new();
    for (key, count) in counts {
        *summed.entry(key).or_default() += count;
    }
    let mut hottest: Vec<(K, u64)> = summed.into_iter().collect();
    hottest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    hottest.truncate(limit);
    hottest
}

async fn big_keys(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiQuery(query): ApiQuery<Listing>,
) -> ApiResult<Json<BigKeys>> {
    let limit = query.limit()?;
    let row = lookup::tenant(&state.pool, &tenant).await?;
    // One entry per key, command, direction and gateway: its largest size and latest time.
    let mut largest: HashMap<_, switchyard_schemas::api::BigKey> = HashMap::new();
    for big in db::observations::big_keys(&state.pool, row.id, RETENTION).await? {
        let id = (
            big.key.clone(),
            big.command.clone(),
            big.direction,
            big.gateway.clone(),
        );
        match largest.get_mut(&id) {
            Some(known) => {
                known.bytes = known.bytes.max(big.bytes);
                known.elements = known.elements.max(big.elements);
                known.at_ms = known.at_ms.max(big.at_ms);
            }
            None => {
                largest.insert(id, big);
            }
        }
    }
    let mut keys: Vec<_> = largest.into_values().collect();
    keys.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| b.at_ms.cmp(&a.at_ms)));
    keys.truncate(limit);
    Ok(Json(BigKeys {
        keys,
        window_s: RETENTION.as_secs(),
    }))
}

/// A viewer sees that commands were slow, not the tenant's data they carried: their argument values are left
/// out. Operators and the tenant's own tenant-owners see them whole.
async fn slowlog(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(tenant): ApiPath<String>,
    ApiQuery(query): ApiQuery<Listing>,
) -> ApiResult<Json<SlowLog>> {
    let limit = query.limit()?;
    let row = lookup::tenant(&state.pool, &tenant).await?;
    let mut entries = db::observations::slowlog(&state.pool, row.id, RETENTION).await?;
    entries.sort_by(|a, b| (b.timestamp, &b.gateway, b.id).cmp(&(a.timestamp, &a.gateway, a.id)));
    entries.truncate(limit);
    if caller.kind == Kind::Role(TokenRole::Viewer) {
        entries = entries
            .into_iter()
            .map(SlowLogEntry::without_values)
            .collect();
    }
    Ok(Json(SlowLog {
        entries,
        window_s: RETENTION.as_secs(),
    }))
}
