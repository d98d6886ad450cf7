//! `GET /v1/audit`: the change log, filtered by tenant, actor, action and time.

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use switchyard_schemas::api::{AuditEntry, AuditPage};

use crate::auth::Access;
use crate::db;
use crate::error::{ApiError, ApiResult};
use crate::extract::ApiQuery;
use crate::openapi::Operation;
use crate::state::AppState;

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;

pub(crate) fn operations() -> Vec<Operation> {
    vec![
        Operation::new(
            "listAudit",
            Method::GET,
            "/v1/audit",
            "Changes, newest first",
            Access::Read,
            get(list),
        )
        .reply::<AuditPage>(200)
        .query("tenant", "Only changes to this tenant.")
        .query(
            "actor",
            "Only changes by this actor (`token:<name>`, or `admin:` + 8 hex digits for a start-up token).",
        )
        .query(
            "action",
            "Only actions that start with this: `route.put`, or `route.` for every route change.",
        )
        .query("since", "Only changes at or after this RFC 3339 time.")
        .query("until", "Only changes before this RFC 3339 time.")
        .query_integer("before", "Only entries with a smaller id (paging).")
        .query_integer("limit", "At most this many (default 100, at most 1000).")
        .errors(&[400]),
    ]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    tenant: Option<String>,
    actor: Option<String>,
    action: Option<String>,
    since: Option<String>,
    until: Option<String>,
    before: Option<i64>,
    limit: Option<i64>,
}

async fn list(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> ApiResult<Json<AuditPage>> {
    let since = time(query.since.as_deref(), "since")?;
    let until = time(query.until.as_deref(), "until")?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be 1 to {MAX_LIMIT}"
        )));
    }
    let filter = db::audit::AuditFilter {
        tenant: query.tenant.as_deref(),
        actor: query.actor.as_deref(),
        action: query.action.as_deref(),
        since,
        until,
        before_id: query.before,
        limit,
    };
    let rows = db::audit::list(&state.pool, &filter).await?;
    Ok(Json(AuditPage {
        entries: rows.into_iter().map(AuditEntry::from).collect(),
    }))
}

/// A time parameter: RFC 3339, else a 400 naming it.
fn time(text: Option<&str>, name: &str) -> ApiResult<Option<DateTime<Utc>>> {
    text.map(|text| {
        DateTime::parse_from_rfc3339(text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| {
                ApiError::BadRequest(format!(
                    "{name} must be an RFC 3339 time, like 2026-01-31T12:00:00Z"
                ))
            })
    })
    .transpose()
}
