//! `/v1/tenants`: create, list, show, patch and delete tenants.

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, patch, post};
use axum::{Extension, Json};
use serde::Deserialize;
use switchyard_schemas::api::{ErrorDetail, Tenant, TenantCreate, TenantList, TenantPatch};
use switchyard_schemas::{TenantLimits, TenantPolicy};

use crate::api::lookup;
use crate::auth::{Access, Caller};
use crate::databases;
use crate::db;
use crate::db::audit::{Actor, AuditRecord};
use crate::db::change::Change;
use crate::db::tenants::{Owned, TenantRow};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, JsonBody};
use crate::guard::NamespaceChange;
use crate::openapi::Operation;
use crate::state::AppState;

pub(crate) fn operations() -> Vec<Operation> {
    let path = "/v1/tenants/{tenant}";
    vec![
        Operation::new(
            "createTenant",
            Method::POST,
            "/v1/tenants",
            "Create a tenant",
            Access::Change,
            post(create),
        )
        .request::<TenantCreate>()
        .example(serde_json::json!({"name": "acme", "description": "Acme Corp", "limits": {"max_connections": 1000}}))
        .reply::<Tenant>(201)
        .errors(&[409]),
        Operation::new(
            "listTenants",
            Method::GET,
            "/v1/tenants",
            "List tenants",
            Access::OwnRead,
            get(list),
        )
        .query(
            "prefix",
            "Only tenants whose names start with this (case-sensitive).",
        )
        .query(
            "after",
            "Only tenants whose names come after this one (paging: the last page's `next_after`).",
        )
        .query_integer("limit", "At most this many, 1 to 1000 (default: all).")
        .reply::<TenantList>(200)
        .errors(&[400]),
        Operation::new(
            "getTenant",
            Method::GET,
            path,
            "Show a tenant",
            Access::TenantRead,
            get(show),
        )
        .reply::<Tenant>(200)
        .errors(&[404]),
        Operation::new(
            "patchTenant",
            Method::PATCH,
            path,
            "Change a tenant's description, disabled, allow_admin, limits or policies",
            Access::TenantChange,
            patch(update),
        )
        .request::<TenantPatch>()
        .example(serde_json::json!({"limits": {"max_ops_per_sec": 50000}, "allow_admin": false}))
        .reply::<Tenant>(200)
        // 409 also: a routed tenant's namespace change (`keys_would_move`, unless `force`).
        .errors(&[404, 409]),
        Operation::new(
            "deleteTenant",
            Method::DELETE,
            path,
            "Delete a tenant with its credentials and route history",
            Access::Change,
            delete(remove),
        )
        .reply_empty(204)
        .errors(&[404]),
    ]
}

fn object(name: &str) -> String {
    format!("tenants/{name}")
}

/// The rules of a tenant's `limits` and policies that their types do not express (`TenantLimits::problems` and
/// `TenantPolicy::problems`, which the gateway holds a routes file to as well), and the database's own: a byte
/// count must fit Postgres' bigint. A 422 naming every broken one.
pub(crate) fn check_tenant(limits: &TenantLimits, policy: &TenantPolicy) -> ApiResult<()> {
    let mut problems: Vec<ErrorDetail> = Vec::new();
    let buffers = [
        ("output_buffer_limit", limits.output_buffer_limit),
        (
            "pubsub_output_buffer_limit",
            limits.pubsub_output_buffer_limit,
        ),
    ];
    for (field, limit) in buffers {
        let Some(limit) = limit else { continue };
        for (bytes_field, bytes) in [
            ("hard_bytes", limit.hard_bytes),
            ("soft_bytes", limit.soft_bytes),
        ] {
            if i64::try_from(bytes).is_err() {
                problems.push(ErrorDetail {
                    path: format!("/limits/{field}/{bytes_field}"),
                    message: format!("must be at most {}", i64::MAX),
                });
            }
        }
    }
    let rules = limits
        .problems("/limits")
        .into_iter()
        .chain(policy.problems(""));
    problems.extend(rules.map(|e| ErrorDetail {
        path: e.path,
        message: e.message,
    }));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_all("the tenant is invalid", problems))
    }
}

/// Refuses a namespace that starts another tenant's, or that another tenant's starts: one of the two would see
/// the other's keys. Takes the revision lock first (`Change::revision`), so that two changes cannot each pass
/// this check with namespaces that overlap each other.
pub(crate) async fn check_namespace(
    change: &mut Change,
    namespace: &str,
    tenant: Option<i64>,
) -> ApiResult<()> {
    change.revision().await?;
    match db::tenants::overlapping_namespace(change.conn(), namespace, tenant).await? {
        None => Ok(()),
        Some((other, theirs)) => Err(ApiError::Conflict {
            code: "namespace_overlaps",
            message: format!(
                "namespace '{namespace}' overlaps tenant '{other}''s namespace '{theirs}': one starts the other, \
                 so one tenant would see the other's keys"
            ),
        }),
    }
}

async fn create(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    JsonBody(new): JsonBody<TenantCreate>,
) -> ApiResult<(StatusCode, Json<Tenant>)> {
    let policy = new.policy();
    check_tenant(&new.limits, &policy)?;
    let mut change = Change::begin(&state.pool).await?;
    if let Some(namespace) = &policy.namespace {
        check_namespace(&mut change, namespace, None).await?;
    }
    let tenant = db::tenants::insert(change.conn(), &new).await?.to_api();
    let record = AuditRecord::new(
        "tenant.create",
        Some(&tenant.name),
        object(&tenant.name),
        None::<&Tenant>,
        Some(&tenant),
    );
    state.commit(change, &actor, record).await?;
    Ok((StatusCode::CREATED, Json(tenant)))
}

/// The most tenants one page may hold.
const MAX_PAGE: i64 = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    after: String,
    limit: Option<i64>,
}

/// A tenant-owner sees its own tenants only.
async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<TenantList>> {
    if let Some(limit) = query.limit
        && !(1..=MAX_PAGE).contains(&limit)
    {
        return Err(ApiError::BadRequest(format!(
            "limit must be 1 to {MAX_PAGE}"
        )));
    }
    // Postgres refuses text with a NUL; such a name matches no tenant anyway, but the answer says why.
    if query.prefix.contains('\0') || query.after.contains('\0') {
        return Err(ApiError::BadRequest(
            "prefix and after must not contain a NUL character".into(),
        ));
    }
    let owned = caller.owner().then(|| Owned {
        tenants: &caller.tenants,
        prefix: caller.tenant_prefix.as_deref(),
    });
    let rows = db::tenants::page(
        &state.pool,
        &query.prefix,
        &query.after,
        query.limit,
        owned.as_ref(),
    )
    .await?;
    let full = query
        .limit
        .is_some_and(|limit| usize::try_from(limit).is_ok_and(|limit| rows.len() == limit));
    Ok(Json(TenantList {
        next_after: rows.last().filter(|_| full).map(|t| t.name.clone()),
        tenants: rows.iter().map(|t| t.to_api()).collect(),
    }))
}

async fn show(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<Tenant>> {
    Ok(Json(lookup::tenant(&state.pool, &name).await?.to_api()))
}

/// A tenant-owner may change only the policy fields its token lists.
async fn update(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(name): ApiPath<String>,
    JsonBody(patch): JsonBody<TenantPatch>,
) -> ApiResult<Json<Tenant>> {
    caller.may_patch(&patch)?;
    let actor = &caller.actor;
    let mut change = Change::begin(&state.pool).await?;
    let mut row = lookup::tenant_for_update(change.conn(), &name).await?;
    let before = row.to_api();
    let editable = |t: &TenantRow| {
        (
            t.description.clone(),
            t.disabled,
            t.allow_admin,
            t.max_connections,
            t.max_ops_per_sec,
            t.output_buffer_limit,
            t.pubsub_output_buffer_limit,
            t.script_timeout_ms,
            t.policy.clone(),
        )
    };
    let unchanged = editable(&row);
    patch_policy(&mut row.policy, &patch);
    if let Some(description) = patch.description {
        row.description = description;
    }
    if let Some(disabled) = patch.disabled {
        row.disabled = disabled;
    }
    if let Some(allow_admin) = patch.allow_admin {
        row.allow_admin = allow_admin;
    }
    if let Some(limits) = &patch.limits {
        row.set_limits(limits);
    }
    // A patch that changes nothing is not a change: no revision, no audit entry.
    if editable(&row) == unchanged {
        return Ok(Json(before));
    }
    check_tenant(&row.limits(), &row.policy)?;
    // A running migration copies and verifies the keys of the namespace it started with, and its double-write
    // route writes the tenant's namespace to both deployments: a new one would leave keys behind on either side.
    if row.policy.namespace != before.policy.namespace
        && let Some(id) = db::migrations::active(change.conn(), row.id).await?
    {
        return Err(ApiError::Conflict {
            code: "migration_active",
            message: format!(
                "migration {id} of tenant '{name}' is active: its namespace cannot change until the migration is \
                 finished or aborted"
            ),
        });
    }
    // A namespace change moves no key: a routed tenant's stored keys stay under the old one (`guard`).
    if row.policy.namespace != before.policy.namespace
        && !patch.force
        && db::routes::get(change.conn(), row.id, None)
            .await?
            .is_some()
    {
        let moved = NamespaceChange {
            tenant: &name,
            from: before.policy.namespace.as_deref(),
            to: row.policy.namespace.as_deref(),
        };
        return Err(moved.refusal());
    }
    if let Some(namespace) = &row.policy.namespace
        && before.policy.namespace.as_ref() != Some(namespace)
    {
        check_namespace(&mut change, namespace, Some(row.id)).await?;
    }
    let after = db::tenants::update(change.conn(), &row).await?.to_api();
    // A new namespace, or admin, may mix the databases of its route, or make its keys collide with a migrating
    // tenant's in the migration's destination (an incident's change to anything else must not wait on that).
    if (&before.policy.namespace, before.allow_admin)
        != (&after.policy.namespace, after.allow_admin)
    {
        databases::check(&mut change, row.id).await?;
    }
    let record = AuditRecord::new(
        "tenant.update",
        Some(&name),
        object(&name),
        Some(&before),
        Some(&after),
    );
    state.commit(change, actor, record).await?;
    Ok(Json(after))
}

/// Applies the policy fields of `patch`: each given field replaces the tenant's (a `null` namespace removes it).
fn patch_policy(policy: &mut TenantPolicy, patch: &TenantPatch) {
    if let Some(namespace) = &patch.namespace {
        policy.namespace = namespace.clone();
    }
    if let Some(read_only) = patch.read_only {
        policy.read_only = read_only;
    }
    if let Some(commands) = &patch.commands {
        policy.commands = commands.clone();
    }
    if let Some(ip_allow) = &patch.ip_allow {
        policy.ip_allow = ip_allow.clone();
    }
    if let Some(ip_deny) = &patch.ip_deny {
        policy.ip_deny = ip_deny.clone();
    }
    if let Some(blocked_keys) = &patch.blocked_keys {
        policy.blocked_keys = blocked_keys.clone();
    }
    if let Some(tracking) = patch.tracking {
        policy.tracking = tracking;
    }
    if let Some(scripts) = patch.scripts {
        policy.scripts = scripts;
    }
    if let Some(scope) = patch.limits_scope {
        policy.limits_scope = scope;
    }
    if let Some(near_cache) = patch.near_cache {
        policy.near_cache = near_cache;
    }
}

async fn remove(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let mut change = Change::begin(&state.pool).await?;
    let row = lookup::tenant_for_update(change.conn(), &name).await?;
    db::tenants::delete(change.conn(), row.id).await?;
    let record = AuditRecord::new(
        "tenant.delete",
        Some(&name),
        object(&name),
        Some(&row.to_api()),
        None::<&Tenant>,
    );
    state.commit(change, &actor, record).await?;
    Ok(StatusCode::NO_CONTENT)
}
