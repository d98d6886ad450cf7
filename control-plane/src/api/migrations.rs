//! `/v1/tenants/{tenant}/migrations`: moving a tenant to another deployment while it serves traffic.
//!
//! Each step is one explicit transition, in one transaction with its route change (a new route version and
//! revision) and its audit entry. A step that needs the previous one to have completed answers 409 until it has;
//! so does a step that follows a route change which some live gateway does not serve yet. The background tasks
//! (backfill, verify) are in [`crate::migration`].
//!
//! A migration moves the tenant's keys as stored, its key namespace included: the destination must be a place
//! where those keys cannot be another tenant's (`databases::check_destination`), and the namespace cannot change on
//! the way (the gateway applies one namespace to every deployment a double-written command reaches).

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{get, post};
use axum::{Extension, Json};
use switchyard_schemas::api::{
    Migration, MigrationCreate, MigrationDestination, MigrationList, MigrationState,
};
use switchyard_schemas::{AckMode, RouteTable};

use crate::api::{lookup, readiness};
use crate::auth::Access;
use crate::db;
use crate::db::audit::Actor;
use crate::db::change::Change;
use crate::db::migrations::{MigrationRow, NewMigration};
use crate::db::tenants::TenantRow;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, JsonBody, from_value};
use crate::openapi::Operation;
use crate::state::AppState;
use crate::{databases, references, route_schema};

/// Most keys per SCAN page and pipelined batch of a migration task.
const MAX_BATCH: u64 = 10_000;

mod transition;

pub(crate) use transition::conclude_rollback;
use transition::{Transition, transition};

pub(crate) fn operations() -> Vec<Operation> {
    let path = "/v1/tenants/{tenant}/migrations";
    vec![
        Operation::new(
            "createMigration",
            Method::POST,
            path,
            "Start migrating a tenant: writes go to old (primary) and new (secondary), reads stay on old",
            Access::Change,
            post(create),
        )
        .request::<MigrationCreate>()
        .example(serde_json::json!({"to": "redis://127.0.0.1:6390", "ack": "primary", "limits": {"keys_per_sec": 5000}}))
        .reply::<Migration>(201)
        .errors(&[404, 409]),
        Operation::new(
            "listMigrations",
            Method::GET,
            path,
            "The tenant's migrations, newest first",
            Access::Read,
            get(list),
        )
        .reply::<MigrationList>(200)
        .errors(&[404]),
        Operation::new(
            "getMigration",
            Method::GET,
            "/v1/tenants/{tenant}/migrations/{id}",
            "A migration: its state and the progress of its background tasks",
            Access::Read,
            get(show),
        )
        .reply::<Migration>(200)
        .errors(&[400, 404]),
        Operation::new(
            "migrationStep",
            Method::POST,
            "/v1/tenants/{tenant}/migrations/{id}/{action}",
            "Take a step: backfill, verify, cutover, finish or abort",
            Access::Change,
            post(step),
        )
        .reply::<Migration>(200)
        .path_enum(
            "action",
            "The step: backfill, verify, cutover, finish or abort (docs/migration.md)",
            &["backfill", "verify", "cutover", "finish", "abort"],
        )
        .query_boolean(
            "force",
            "cutover: cut over although the readiness counts commands that would fail on the destination \
             (409 not_ready without it); abort from cut_over or rolling_back: return to old at once, without \
             repairing from new what old missed",
        )
        .errors(&[404, 409]),
    ]
}

fn object(tenant: &str, id: i64) -> String {
    format!("tenants/{tenant}/migrations/{id}")
}

fn conflict(code: &'static str, message: String) -> ApiError {
    ApiError::Conflict { code, message }
}

/// Refuses a destination where the tenant's keys could meet another tenant's (see `databases::check_destination`);
/// `migration` is the id of the migration that moves it there, once there is one.
async fn check_destination(
    change: &mut Change,
    migration: Option<i64>,
    tenant: &TenantRow,
    destination: &RouteTable,
) -> ApiResult<()> {
    let names = references::names(destination);
    let urls = db::resources::urls(change.conn(), &names, db::resources::Lock::Share).await?;
    let places = databases::places(destination, &urls);
    let namespace = tenant.policy.namespace.as_deref();
    let tenant = (tenant.id, tenant.name.as_str());
    databases::check_destination(change, migration, tenant, namespace, &places).await
}

/// The table a migration (or a readiness probe) moves to: a single or sharded one.
pub(crate) fn destination_table(to: MigrationDestination) -> ApiResult<RouteTable> {
    let destination = to.into_table();
    if matches!(destination, RouteTable::DoubleWrite { .. }) {
        return Err(ApiError::invalid(
            "/to/type",
            "a migration moves to a single or sharded table, not a double_write one",
        ));
    }
    Ok(destination)
}

/// Refuses (422) a destination that breaks the route-table rules, its resource names as registered (share-locked:
/// they cannot change or vanish until `change` commits).
pub(crate) async fn validate_destination(
    change: &mut Change,
    destination: &RouteTable,
) -> ApiResult<()> {
    let names = references::names(destination);
    let urls = db::resources::urls(change.conn(), &names, db::resources::Lock::Share).await?;
    destination
        .validate(&|name| urls.get(name).cloned())
        .map_err(|errors| ApiError::invalid_route("/to", errors))
}

/// Refuses (409 `namespace_change`) a `namespace` asked of a migration other than the tenant's own.
fn check_namespace(tenant: &TenantRow, asked: Option<&serde_json::Value>) -> ApiResult<()> {
    let current = serde_json::json!(tenant.policy.namespace);
    match asked {
        Some(asked) if *asked != current => Err(conflict(
            "namespace_change",
            format!(
                "a migration keeps tenant '{}''s key namespace ({current}): while it runs, the gateways write every \
                 command to both deployments with the one namespace the tenant has, so keys cannot be renamed on \
                 the way. Migrate first, then change the namespace (keys stay under the old one until renamed on \
                 the backend)",
                tenant.name
            ),
        )),
        _ => Ok(()),
    }
}

/// Whether every live gateway serves `revision`. True when no gateway is live, unlike the fleet's `converged`: a
/// step waits for gateways that could still serve the old route, and with none live there is none.
async fn converged(state: &AppState, revision: i64) -> ApiResult<bool> {
    let gateways = db::gateways::list(&state.pool, state.settings.gateway_ttl).await?;
    Ok(gateways
        .iter()
        .map(|g| g.to_api(revision))
        .filter(|g| g.live)
        .all(|g| g.up_to_date))
}

async fn answer(state: &AppState, row: &MigrationRow) -> ApiResult<Migration> {
    Ok(row.to_api(converged(state, row.route_revision).await?))
}

async fn create(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(tenant): ApiPath<String>,
    JsonBody(mut body): JsonBody<serde_json::Value>,
) -> ApiResult<(StatusCode, Json<Migration>)> {
    // Not a field of `MigrationCreate`: a namespace other than the tenant's is refused with the reason (409), and
    // the tenant's own changes nothing.
    let namespace = body.as_object_mut().and_then(|b| b.remove("namespace"));
    // A table is checked against the route-table schema for precise paths; a target is left to serde.
    if let Some(to) = body.get("to").filter(|to| to.get("type").is_some()) {
        route_schema::check(to, "/to")?;
    }
    let body: MigrationCreate = from_value(body)?;
    let destination = destination_table(body.to)?;
    if body.ack == AckMode::AllCheckError {
        return Err(ApiError::invalid(
            "/ack",
            "a migration acknowledges writes after the primary or after all copies (primary or all)",
        ));
    }
    // A SCAN page and its pipelined DUMPs are held in memory at once.
    if !(1..=MAX_BATCH).contains(&body.limits.batch) {
        return Err(ApiError::invalid(
            "/limits/batch",
            format!("must be 1 to {MAX_BATCH}"),
        ));
    }
    let mut change = Change::begin(&state.pool).await?;
    let row = lookup::tenant_for_update(change.conn(), &tenant).await?;
    check_namespace(&row, namespace.as_ref())?;
    if let Some(id) = db::migrations::active(change.conn(), row.id).await? {
        return Err(conflict(
            "migration_active",
            format!(
                "migration {id} of tenant '{tenant}' is still active; finish or abort it first"
            ),
        ));
    }
    let source = db::routes::get(change.conn(), row.id, None)
        .await?
        .ok_or_else(|| {
            conflict(
                "no_route",
                format!("tenant '{tenant}' has no route to migrate from"),
            )
        })?
        .route
        .0;
    if matches!(source, RouteTable::DoubleWrite { .. }) {
        return Err(conflict(
            "route_double_write",
            "the current route is a double_write table; set a single or sharded one first".into(),
        ));
    }
    // Backfill and verify copy and compare each resource's own database only: the tenant's other databases
    // would be left behind, and lost at `finish`.
    let databases = source.databases();
    if databases > 1 {
        return Err(conflict(
            "databases_unsupported",
            format!(
                "tenant '{tenant}' owns {databases} databases (its route's `databases`), and a migration copies \
                 one: the keys of the others would be left behind on the old deployment. Move its keys to one \
                 database first, or copy the others yourself before `finish`"
            ),
        ));
    }
    // The destination is validated as the route it becomes at `finish`.
    validate_destination(&mut change, &destination).await?;
    check_destination(&mut change, None, &row, &destination).await?;
    let id = db::migrations::insert(
        change.conn(),
        NewMigration {
            tenant_id: row.id,
            source: &source,
            destination: &destination,
            ack: body.ack,
            limits: &body.limits,
            author: &actor.0,
        },
    )
    .await?;
    let route = RouteTable::DoubleWrite {
        primary: Box::new(source),
        secondary: Box::new(destination),
        ack: body.ack,
    };
    let created = transition(
        &state,
        change,
        &actor,
        Transition {
            tenant: &tenant,
            tenant_id: row.id,
            id,
            from: None,
            to: MigrationState::DoubleWrite,
            route: Some(route),
            action: "migration.create",
            forced: None,
        },
    )
    .await?;
    Ok((StatusCode::CREATED, Json(created)))
}

async fn list(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
) -> ApiResult<Json<MigrationList>> {
    let row = lookup::tenant(&state.pool, &tenant).await?;
    let mut migrations = Vec::new();
    for migration in db::migrations::list(&state.pool, row.id).await? {
        migrations.push(answer(&state, &migration).await?);
    }
    Ok(Json(MigrationList { migrations }))
}

async fn show(
    State(state): State<AppState>,
    ApiPath((tenant, id)): ApiPath<(String, i64)>,
) -> ApiResult<Json<Migration>> {
    let row = lookup::migration(&state.pool, &tenant, id).await?;
    Ok(Json(answer(&state, &row).await?))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StepQuery {
    #[serde(default)]
    force: bool,
}

async fn step(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath((tenant, id, action)): ApiPath<(String, i64, String)>,
    ApiQuery(query): ApiQuery<StepQuery>,
) -> ApiResult<Json<Migration>> {
    let mut change = Change::begin(&state.pool).await?;
    let tenant_row = lookup::tenant_for_update(change.conn(), &tenant).await?;
    let row = db::migrations::get(change.conn(), tenant_row.id, id, true)
        .await?
        .ok_or_else(|| lookup::no_migration(&tenant, id))?;
    let current = row.state();
    use MigrationState as S;
    // (states the step starts from, the state it reaches, the route it installs, whether gateways must serve
    // the migration's latest route first)
    let (from, to, route, needs_convergence): (&[S], S, Option<RouteTable>, bool) = match action
        .as_str()
    {
        "backfill" => (&[S::DoubleWrite], S::Backfilling, None, true),
        "verify" => (&[S::Backfilled, S::Verified], S::Verifying, None, false),
        "cutover" => (
            &[S::Verified],
            S::CutOver,
            Some(RouteTable::DoubleWrite {
                primary: Box::new(row.destination.0.clone()),
                secondary: Box::new(row.source.0.clone()),
                ack: row.ack.0,
            }),
            false,
        ),
        "finish" => (
            &[S::CutOver],
            S::Finished,
            Some(row.destination.0.clone()),
            true,
        ),
        // From cut_over old missed what failed on it as the secondary: it is repaired from new first
        // (`rolling_back`, the task then returns the route to old), unless `force` says new cannot be read.
        "abort" | "rollback" if matches!(current, S::CutOver | S::RollingBack) && !query.force => {
            (&[S::CutOver], S::RollingBack, None, false)
        }
        "abort" | "rollback" => (
            &[
                S::DoubleWrite,
                S::Backfilling,
                S::Backfilled,
                S::Verifying,
                S::Verified,
                S::CutOver,
                S::RollingBack,
            ],
            S::Aborted,
            Some(row.source.0.clone()),
            false,
        ),
        other => {
            return Err(ApiError::not_found(format!(
                "no migration action '{other}' (backfill, verify, cutover, finish, abort)"
            )));
        }
    };
    if !from.contains(&current) {
        let needed: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
        return Err(conflict(
            "migration_state",
            format!(
                "migration {id} is {}; '{action}' needs it to be {}",
                current.as_str(),
                needed.join(" or ")
            ),
        ));
    }
    if needs_convergence && !converged(&state, row.route_revision).await? {
        return Err(conflict(
            "gateways_not_converged",
            format!(
                "not every live gateway serves revision {} yet (see GET /v1/gateways); retry when they do",
                row.route_revision
            ),
        ));
    }
    // The tasks write to the destination (verify deletes from it) and cutover and finish move the tenant there:
    // `databases::check` keeps other tenants out while the migration is active, and this catches one that came by
    // a way it does not see (a control plane without it, rows written by hand). Abort, leaving it, is not checked.
    if matches!(to, S::Backfilling | S::Verifying | S::CutOver | S::Finished) {
        check_destination(&mut change, Some(id), &tenant_row, &row.destination.0).await?;
    }
    // Readiness is what gateways counted before cutover: a cutover the counts say breaks clients needs `force`,
    // and a forced one is audited with the counts it overrode.
    let mut forced = None;
    if to == S::CutOver {
        let readiness = readiness::of_migration(&state, id, &row.destination.0).await?;
        if !readiness.ready && !query.force {
            return Err(readiness::not_ready(id, &readiness));
        }
        forced = (!readiness.ready).then(|| serde_json::json!({"readiness": readiness.counts}));
    } else if query.force && matches!(current, S::CutOver | S::RollingBack) && to == S::Aborted {
        forced = Some(serde_json::json!({"rollback_repair": "skipped"}));
    } else if query.force {
        return Err(ApiError::BadRequest(
            "force applies to cutover, and to an abort from cut_over or rolling_back, only"
                .to_string(),
        ));
    }
    let action = match to {
        S::Backfilling => "migration.backfill",
        S::Verifying => "migration.verify",
        S::CutOver => "migration.cutover",
        S::Finished => "migration.finish",
        S::RollingBack => "migration.rollback",
        _ => "migration.abort",
    };
    let answer = transition(
        &state,
        change,
        &actor,
        Transition {
            tenant: &tenant,
            tenant_id: tenant_row.id,
            id,
            from: Some(current),
            to,
            route,
            action,
            forced,
        },
    )
    .await?;
    if matches!(to, S::Backfilling | S::Verifying | S::RollingBack) {
        state.migrations.wake();
    }
    Ok(Json(answer))
}
