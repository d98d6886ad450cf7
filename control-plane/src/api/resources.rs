//! `/v1/resources`: named backend definitions that routes refer to by name, and whether the gateways reach them
//! (what their tracking reports say: `db::reachability`).
//!
//! Answers show URLs with their passwords masked (`***`), as the audit log does; an update that sends a URL back
//! with a masked password keeps the stored one.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, post, put};
use axum::{Extension, Json};
use switchyard_schemas::api::{
    ErrorDetail, GatewayReach, Resource, ResourceCreate, ResourceList, ResourceReachability,
    ResourceUpdate,
};
use switchyard_schemas::{ResourceUrl, resource_location};

use crate::auth::Access;
use crate::db;
use crate::db::audit::{Actor, AuditRecord};
use crate::db::change::Change;
use crate::db::resources::{Lock, ResourceRow};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, JsonBody};
use crate::guard::UrlChange;
use crate::openapi::Operation;
use crate::state::AppState;
use crate::{databases, redact, references};

pub(crate) fn operations() -> Vec<Operation> {
    let path = "/v1/resources/{name}";
    vec![
        Operation::new(
            "createResource",
            Method::POST,
            "/v1/resources",
            "Register a resource",
            Access::Change,
            post(create),
        )
        .request::<ResourceCreate>()
        .example(serde_json::json!({"name": "main", "url": "redis://127.0.0.1:6379", "description": "the shared Redis"}))
        .reply::<Resource>(201)
        .errors(&[409]),
        Operation::new(
            "listResources",
            Method::GET,
            "/v1/resources",
            "List resources, with whether the gateways reach them",
            Access::Read,
            get(list),
        )
        .reply::<ResourceList>(200),
        Operation::new(
            "getResource",
            Method::GET,
            path,
            "Show a resource, with whether the gateways reach it",
            Access::Read,
            get(show),
        )
        .reply::<Resource>(200)
        .errors(&[404]),
        Operation::new(
            "putResource",
            Method::PUT,
            path,
            "Change a resource's URL or description (a masked password, `***`, keeps the stored one)",
            Access::Change,
            put(update),
        )
        .request::<ResourceUpdate>()
        .example(serde_json::json!({"url": "redis-sentinel://127.0.0.1:26379/mymaster", "description": "moved behind sentinels"}))
        .reply::<Resource>(200)
        // 409: the new URL points at other data than the routes that use the resource stored keys in
        // (`keys_would_move`, unless `force`), or would put a tenant without a key namespace in a database
        // namespaced tenants use. 422 also: the new URL does not answer its probe (unless `force`).
        .errors(&[404, 409]),
        Operation::new(
            "deleteResource",
            Method::DELETE,
            path,
            "Delete a resource no current route uses",
            Access::Change,
            delete(remove),
        )
        .reply_empty(204)
        .errors(&[404, 409]),
    ]
}

fn object(name: &str) -> String {
    format!("resources/{name}")
}

fn no_resource(name: &str) -> ApiError {
    ApiError::not_found(format!("no resource named '{name}'"))
}

/// Errors never echo the URL: it may hold a password.
fn check_url(url: &str) -> ApiResult<()> {
    ResourceUrl::parse(url)
        .map(drop)
        .map_err(|e| ApiError::invalid("/url", e.to_string()))
}

async fn create(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    JsonBody(new): JsonBody<ResourceCreate>,
) -> ApiResult<(StatusCode, Json<Resource>)> {
    check_url(&new.url)?;
    let mut change = Change::begin(&state.pool).await?;
    let resource = db::resources::insert(change.conn(), &new.name, &new.url, &new.description)
        .await?
        .to_api();
    let record = AuditRecord::new(
        "resource.create",
        None,
        object(&resource.name),
        None::<&Resource>,
        Some(&resource),
    );
    state.commit(change, &actor, record).await?;
    Ok((StatusCode::CREATED, Json(resource)))
}

async fn list(State(state): State<AppState>) -> ApiResult<Json<ResourceList>> {
    let resources = db::resources::list(&state.pool).await?;
    let reach = reachability(&state).await?;
    Ok(Json(ResourceList {
        resources: resources.iter().map(|r| with_reach(r, &reach)).collect(),
    }))
}

async fn show(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<Resource>> {
    let row = db::resources::get(&state.pool, &name)
        .await?
        .ok_or_else(|| no_resource(&name))?;
    let reach = reachability(&state).await?;
    Ok(Json(with_reach(&row, &reach)))
}

/// Every gateway's fresh view of every location it reports (docs/usage.md#resources).
async fn reachability(state: &AppState) -> ApiResult<HashMap<String, Vec<GatewayReach>>> {
    let mut by_location: HashMap<String, Vec<GatewayReach>> = HashMap::new();
    for row in db::reachability::fresh(&state.pool, super::usage::FRESH).await? {
        by_location
            .entry(row.location.clone())
            .or_default()
            .push(row.to_api());
    }
    Ok(by_location)
}

/// The resource as listings show it: with the gateways' views of its URL's location.
fn with_reach(row: &ResourceRow, reach: &HashMap<String, Vec<GatewayReach>>) -> Resource {
    let mut resource = row.to_api();
    resource.reachability =
        reach
            .get(&resource_location(&row.url))
            .map(|gateways| ResourceReachability {
                up: gateways.iter().filter(|g| g.up).count() as u32,
                down: gateways.iter().filter(|g| !g.up).count() as u32,
                gateways: gateways.clone(),
            });
    resource
}

/// A new URL must keep every current route that uses the resource valid (e.g. a `-slaves` URL cannot replace
/// a resource that a route writes to), and, unless forced, the data those routes stored and answer its probe
/// (`guard::UrlChange`).
async fn update(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(name): ApiPath<String>,
    JsonBody(update): JsonBody<ResourceUpdate>,
) -> ApiResult<Json<Resource>> {
    let mut change = Change::begin(&state.pool).await?;
    let row = db::resources::get_for_update(change.conn(), &name)
        .await?
        .ok_or_else(|| no_resource(&name))?;
    let url = redact::restore(&update.url, &row.url).map_err(|m| ApiError::invalid("/url", m))?;
    check_url(&url)?;
    if row.url == url && row.description == update.description {
        return Ok(Json(row.to_api()));
    }
    let mut details = Vec::new();
    let using = db::routes::current_using(change.conn(), row.id).await?;
    let mut reached = Vec::with_capacity(using.len());
    let mut routes = Vec::with_capacity(using.len());
    for db::routes::CurrentRoute {
        tenant_id,
        tenant,
        route,
    } in using
    {
        // Each reference is checked on its own, so the other resources need no lock (locking them could
        // deadlock two updates of resources that share a route).
        let names = references::names(&route.0);
        let mut urls = db::resources::urls(change.conn(), &names, Lock::None).await?;
        urls.insert(name.clone(), url.clone());
        reached.push((tenant_id, databases::places(&route.0, &urls)));
        if let Err(errors) = route.0.validate(&|n| urls.get(n).cloned()) {
            details.extend(errors.0.into_iter().map(|e| ErrorDetail {
                path: "/url".to_string(),
                message: format!(
                    "breaks tenant '{tenant}' route at {}: {}",
                    e.path, e.message
                ),
            }));
        }
        routes.push((tenant, route.0));
    }
    if !details.is_empty() {
        return Err(ApiError::Unprocessable {
            message: "the new URL would make routes that use this resource invalid".to_string(),
            details,
        });
    }
    let guarded = UrlChange {
        name: &name,
        from: &row.url,
        to: &url,
        using: &routes,
        force: update.force,
    };
    guarded.check().await?;
    let before = row.to_api();
    // Stored before the checks: a migration whose destination names this resource is checked where the new URL
    // takes it.
    let after = db::resources::update(change.conn(), row.id, &url, &update.description)
        .await?
        .to_api();
    // The routes now reach the new URL's databases: every one recorded before any is checked, so that two
    // tenants of this resource that now share a database see each other.
    for (tenant_id, places) in &reached {
        db::databases::replace(change.conn(), *tenant_id, places).await?;
    }
    for (tenant_id, _) in &reached {
        databases::check(&mut change, *tenant_id).await?;
    }
    let record = AuditRecord::new(
        "resource.update",
        None,
        object(&name),
        Some(&before),
        Some(&after),
    );
    state.commit(change, &actor, record).await?;
    Ok(Json(after))
}

async fn remove(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let mut change = Change::begin(&state.pool).await?;
    let row = db::resources::get_for_update(change.conn(), &name)
        .await?
        .ok_or_else(|| no_resource(&name))?;
    // The database refuses too (a restricting foreign key); checking first lets the answer name the tenants.
    if !row.used_by.is_empty() {
        return Err(ApiError::Conflict {
            code: "resource_in_use",
            message: format!(
                "the current route of tenant(s) {} uses this resource; change those routes first",
                row.used_by.join(", ")
            ),
        });
    }
    db::resources::delete(change.conn(), row.id).await?;
    let record = AuditRecord::new(
        "resource.delete",
        None,
        object(&name),
        Some(&row.to_api()),
        None::<&Resource>,
    );
    state.commit(change, &actor, record).await?;
    Ok(StatusCode::NO_CONTENT)
}
