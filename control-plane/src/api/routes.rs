//! `/v1/tenants/{tenant}/route`: the current route table, its immutable history, changes and rollbacks.
//!
//! A change locks the tenant row, so changes to one tenant are serialized; with `If-Match` the loser of a race
//! gets a 412 instead of silently overwriting the winner.

use axum::extract::State;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Extension, Json};
use serde::Deserialize;
use switchyard_schemas::RouteTable;
use switchyard_schemas::api::{
    MAX_EXPLAIN_KEYS, RingPoint, RouteChange, RouteExplainKeys, RouteExplanation,
    RouteExplanations, RoutePut, RouteRollback, RouteVersion, RouteVersionPage,
    RouteVersionSummary, WritePlace, WriteTable,
};
use switchyard_schemas::placement::{KeyPoint, TablePlacement};

use crate::api::lookup;
use crate::auth::Access;
use crate::db;
use crate::db::audit::{Actor, AuditRecord};
use crate::db::change::Change;
use crate::db::resources::Lock;
use crate::error::{ApiError, ApiResult};
use crate::etag::etag;
use crate::extract::{ApiPath, ApiQuery, JsonBody, from_value, if_match};
use crate::guard::Guarded;
use crate::openapi::Operation;
use crate::route_schema;
use crate::state::AppState;
use crate::{databases, redact, references};

const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;

pub(crate) fn operations() -> Vec<Operation> {
    let path = "/v1/tenants/{tenant}/route";
    let if_match =
        "Only if the current version is this one (`3` or `\"3\"`; `0`: no route yet); else 412.";
    vec![
        Operation::new(
            "getRoute",
            Method::GET,
            path,
            "The current route table (ETag: its version)",
            Access::TenantRead,
            get(current),
        )
        .reply::<RouteVersion>(200)
        .errors(&[404]),
        Operation::new(
            "putRoute",
            Method::PUT,
            path,
            "Set the route table: a new version",
            Access::Change,
            put(replace),
        )
        .request::<RoutePut>()
        .example(serde_json::json!({"route": {"type": "sharded", "hash": {"algorithm": "crc16", "buckets": 16384},
            "shards": [{"name": "s1", "target": "main", "buckets": ["0-8191"]},
                       {"name": "s2", "target": "redis://127.0.0.1:6380", "buckets": ["8192-16383"]}]},
            "comment": "split in two"}))
        .reply::<RouteChange>(200)
        .header("If-Match", if_match)
        // 409: the tenant has an active migration, which owns the route; or the change would move keys
        // (`keys_would_move`, unless `force`). 422 also: a new resource that does not answer its probe.
        .errors(&[404, 409, 412]),
        Operation::new(
            "listRouteVersions",
            Method::GET,
            "/v1/tenants/{tenant}/route/versions",
            "Route history, newest first",
            Access::TenantRead,
            get(history),
        )
        .reply::<RouteVersionPage>(200)
        .query_integer(
            "before",
            "Only versions below this one (the previous page's next_before).",
        )
        .query_integer("limit", "At most this many (default 50, at most 500).")
        .errors(&[400, 404]),
        Operation::new(
            "getRouteVersion",
            Method::GET,
            "/v1/tenants/{tenant}/route/versions/{version}",
            "One version of the route table",
            Access::TenantRead,
            get(version),
        )
        .reply::<RouteVersion>(200)
        .errors(&[400, 404]),
        Operation::new(
            "explainRoute",
            Method::GET,
            "/v1/tenants/{tenant}/route/explain",
            "Where a key goes under the current route: shard, bucket or ring point, read and every write target",
            Access::TenantRead,
            get(explain),
        )
        .reply::<RouteExplanation>(200)
        .query("key", "The key to place (required).")
        .errors(&[400, 404]),
        Operation::new(
            "explainRouteKeys",
            Method::POST,
            "/v1/tenants/{tenant}/route/explain",
            "Where each of several keys goes under the current route (up to 1,000)",
            Access::TenantRead,
            post(explain_many),
        )
        .request::<RouteExplainKeys>()
        .example(serde_json::json!({"keys": ["user:42", "user:43", "{user:42}.cart"]}))
        .reply::<RouteExplanations>(200)
        .errors(&[404]),
        Operation::new(
            "rollbackRoute",
            Method::POST,
            "/v1/tenants/{tenant}/route/rollback",
            "Make a new version equal to an earlier one",
            Access::Change,
            post(rollback),
        )
        .request::<RouteRollback>()
        .example(serde_json::json!({"version": 1, "comment": "back to one shard"}))
        .reply::<RouteChange>(200)
        .header("If-Match", if_match)
        // 409 and 422 as for putRoute.
        .errors(&[404, 409, 412]),
    ]
}

fn with_etag(version: i64, body: impl IntoResponse) -> Response {
    ([etag(version)], body).into_response()
}

async fn current(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
) -> ApiResult<Response> {
    let row = lookup::tenant(&state.pool, &tenant).await?;
    let current: RouteVersion = db::routes::get(&state.pool, row.id, None)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("tenant '{tenant}' has no route yet")))?
        .into();
    Ok(with_etag(current.version, Json(current)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExplainQuery {
    key: Option<String>,
}

async fn explain(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiQuery(query): ApiQuery<ExplainQuery>,
) -> ApiResult<Json<RouteExplanation>> {
    let key = query
        .key
        .ok_or_else(|| ApiError::BadRequest("the key query parameter is required".into()))?;
    let mut answer = explain_keys(&state, &tenant, std::slice::from_ref(&key)).await?;
    answer
        .explanations
        .pop()
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("tenant '{tenant}' has no shards")))
}

async fn explain_many(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    JsonBody(body): JsonBody<RouteExplainKeys>,
) -> ApiResult<Json<RouteExplanations>> {
    if body.keys.is_empty() || body.keys.len() > MAX_EXPLAIN_KEYS {
        return Err(ApiError::invalid(
            "/keys",
            format!("1 to {MAX_EXPLAIN_KEYS} keys"),
        ));
    }
    Ok(Json(explain_keys(&state, &tenant, &body.keys).await?))
}

/// Uses `switchyard_schemas::placement`, the gateways' own placement code, so the answer is where the data is:
/// each table of the route (both of a double-write one) is placed by its own sharding.
async fn explain_keys(
    state: &AppState,
    tenant: &str,
    keys: &[String],
) -> ApiResult<RouteExplanations> {
    let row = lookup::tenant(&state.pool, tenant).await?;
    let current: RouteVersion = db::routes::get(&state.pool, row.id, None)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("tenant '{tenant}' has no route yet")))?
        .into();
    let migration = db::migrations::active(&state.pool, row.id).await?;
    let (tables, ack) = match &current.route {
        RouteTable::DoubleWrite {
            primary,
            secondary,
            ack,
        } => (
            vec![
                (WriteTable::Primary, TablePlacement::new(primary)),
                (WriteTable::Secondary, TablePlacement::new(secondary)),
            ],
            Some(*ack),
        ),
        route => (vec![(WriteTable::Route, TablePlacement::new(route))], None),
    };
    let shown = |resources: &[String]| resources.iter().map(|r| redact::url(r)).collect();
    let mut explanations = Vec::with_capacity(keys.len());
    for key in keys {
        let mut writes = Vec::with_capacity(tables.len());
        let mut read = None;
        for (table, placement) in &tables {
            let (shard, target) = placement
                .target_of(key.as_bytes())
                .ok_or_else(|| ApiError::not_found(format!("tenant '{tenant}' has no shards")))?;
            let (bucket, ring_point) = point(placement.point_of(key.as_bytes()));
            read.get_or_insert(target);
            writes.push(WritePlace {
                table: *table,
                shard: shard.map(str::to_string),
                bucket,
                ring_point,
                write: shown(target.write_resources()),
            });
        }
        let (Some(target), Some(first)) = (read, writes.first()) else {
            return Err(ApiError::not_found(format!(
                "tenant '{tenant}' has no shards"
            )));
        };
        explanations.push(RouteExplanation {
            key: key.clone(),
            version: current.version,
            shard: first.shard.clone(),
            bucket: first.bucket,
            ring_point: first.ring_point.clone(),
            read: shown(target.read_resources()),
            read_policy: target.read_policy(),
            write: first.write.clone(),
            ack: ack.unwrap_or_else(|| target.ack()),
            writes,
            migration,
        });
    }
    Ok(RouteExplanations {
        version: current.version,
        explanations,
    })
}

fn point(point: Option<KeyPoint>) -> (Option<u32>, Option<RingPoint>) {
    match point {
        None => (None, None),
        Some(KeyPoint::Bucket(bucket)) => (Some(bucket), None),
        Some(KeyPoint::Ring { hash, point }) => (
            None,
            Some(RingPoint {
                hash: format!("{hash:016x}"),
                point: format!("{point:016x}"),
            }),
        ),
    }
}

async fn replace(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(tenant): ApiPath<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> ApiResult<Response> {
    if let Some(route) = body.get("route") {
        route_schema::check(route, "/route")?;
    }
    let body: RoutePut = from_value(body)?;
    let change = NewVersion {
        tenant: &tenant,
        expected: if_match(&headers)?,
        route: body.route,
        comment: body.comment,
        action: "route.put",
        error_prefix: "/route",
    };
    change.apply(&state, &actor, body.force).await
}

async fn rollback(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(tenant): ApiPath<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<RouteRollback>,
) -> ApiResult<Response> {
    let expected = if_match(&headers)?;
    let row = lookup::tenant(&state.pool, &tenant).await?;
    // Versions are immutable, so reading this one outside the change's transaction is safe.
    let target = db::routes::get(&state.pool, row.id, Some(body.version))
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "tenant '{tenant}' has no route version {}",
                body.version
            ))
        })?;
    let change = NewVersion {
        tenant: &tenant,
        expected,
        route: target.route.0,
        comment: body
            .comment
            .unwrap_or_else(|| format!("rollback to version {}", body.version)),
        action: "route.rollback",
        // The old table may no longer validate (a resource it named was deleted since): say where, in it.
        error_prefix: "",
    };
    change.apply(&state, &actor, body.force).await
}

/// The tables of a change as stored, their secrets included (what the guard measures and probes).
pub(crate) struct StoredTables {
    pub(crate) previous: Option<RouteTable>,
    pub(crate) route: RouteTable,
}

/// A change that appends a version to a tenant's route history.
pub(crate) struct NewVersion<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) expected: Option<i64>,
    pub(crate) route: RouteTable,
    pub(crate) comment: String,
    pub(crate) action: &'static str,
    pub(crate) error_prefix: &'static str,
}

impl NewVersion<'_> {
    /// Validates the table and appends it as the tenant's next version (the caller holds the tenant's row
    /// lock), with the databases it reaches, which must not mix tenants with and without a key namespace
    /// (`databases::check`); returns the previous version and the new one as answers show them (passwords
    /// masked), and both tables as stored.
    pub(crate) async fn append(
        &self,
        change: &mut Change,
        tenant_id: i64,
        author: &Actor,
    ) -> ApiResult<(Option<RouteVersion>, RouteVersion, StoredTables)> {
        let conn = change.conn();
        // Read after taking the lock (a new statement sees what the previous lock holder committed).
        let stored = db::routes::get(&mut *conn, tenant_id, None).await?;
        let current = stored.as_ref().map_or(0, |p| p.version);
        if let Some(expected) = self.expected
            && expected != current
        {
            return Err(ApiError::PreconditionFailed { current });
        }
        // A table read from an answer has its inline passwords masked: they stand for the stored ones.
        let route = redact::restore_route(self.route.clone(), stored.as_ref().map(|s| &s.route.0))
            .map_err(|message| ApiError::invalid(self.error_prefix, message))?;
        let stored_previous = stored.as_ref().map(|s| s.route.0.clone());
        let previous: Option<RouteVersion> = stored.map(Into::into);
        let names = references::names(&route);
        let urls = db::resources::urls(&mut *conn, &names, Lock::Share).await?;
        route
            .validate(&|name| urls.get(name).cloned())
            .map_err(|errors| ApiError::invalid_route(self.error_prefix, errors))?;
        let created: RouteVersion = db::routes::insert(
            &mut *conn,
            tenant_id,
            current + 1,
            &route,
            &self.comment,
            &author.0,
        )
        .await?
        .into();
        db::routes::replace_references(&mut *conn, tenant_id, &names).await?;
        databases::record(change, tenant_id, &databases::places(&route, &urls)).await?;
        let tables = StoredTables {
            previous: stored_previous,
            route,
        };
        Ok((previous, created, tables))
    }

    /// Appends the version once the guard passed it (or `force` overrode it), and answers what it moves.
    async fn apply(self, state: &AppState, actor: &Actor, force: bool) -> ApiResult<Response> {
        let mut change = Change::begin(&state.pool).await?;
        let tenant = lookup::tenant_for_update(change.conn(), self.tenant).await?;
        // A migration owns the route until it is finished or aborted.
        if let Some(id) = db::migrations::active(change.conn(), tenant.id).await? {
            return Err(ApiError::Conflict {
                code: "migration_active",
                message: format!(
                    "migration {id} of tenant '{}' is active; finish or abort it before changing the route",
                    self.tenant
                ),
            });
        }
        let (previous, created, tables) = self.append(&mut change, tenant.id, actor).await?;
        let guarded = Guarded {
            tenant: self.tenant,
            previous: tables.previous.as_ref(),
            route: &tables.route,
            force,
            prefix: self.error_prefix,
        };
        let keys = guarded.check(change.conn()).await?;
        let record = AuditRecord::new(
            self.action,
            Some(self.tenant),
            format!("tenants/{}/route", self.tenant),
            previous.as_ref(),
            Some(&created),
        );
        let revision = state.commit(change, actor, record).await?;
        let version = created.version;
        Ok(with_etag(
            version,
            Json(RouteChange {
                revision,
                version: created,
                keys,
            }),
        ))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    before: Option<i64>,
    limit: Option<i64>,
}

async fn history(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<RouteVersionPage>> {
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be 1 to {MAX_PAGE}"
        )));
    }
    let row = lookup::tenant(&state.pool, &tenant).await?;
    let versions: Vec<RouteVersionSummary> =
        db::routes::page(&state.pool, row.id, query.before, limit)
            .await?
            .into_iter()
            .map(Into::into)
            .collect();
    let next_before = match versions.last() {
        Some(last) if versions.len() as i64 == limit && last.version > 1 => Some(last.version),
        _ => None,
    };
    Ok(Json(RouteVersionPage {
        versions,
        next_before,
    }))
}

async fn version(
    State(state): State<AppState>,
    ApiPath((tenant, version)): ApiPath<(String, i64)>,
) -> ApiResult<Response> {
    let row = lookup::tenant(&state.pool, &tenant).await?;
    let found: RouteVersion = db::routes::get(&state.pool, row.id, Some(version))
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("tenant '{tenant}' has no route version {version}"))
        })?
        .into();
    Ok(with_etag(found.version, Json(found)))
}
