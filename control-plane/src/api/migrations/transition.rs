//! A migration's state changes: one transition, in one transaction with its route version and its audit entry
//! (a step's, or the control plane's own when a rollback's task is done).

use switchyard_schemas::RouteTable;
use switchyard_schemas::api::{Migration, MigrationProgress, MigrationState};

use super::{answer, object};
use crate::api::{lookup, routes::NewVersion};
use crate::db;
use crate::db::audit::{Actor, AuditRecord};
use crate::db::change::Change;
use crate::db::migrations::MigrationRow;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// [`rolled_back`] as the migration worker calls it (`migration::Conclude`).
pub(crate) fn conclude_rollback<'a>(
    state: &'a AppState,
    id: i64,
    progress: &'a MigrationProgress,
) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
    Box::pin(async move {
        rolled_back(state, id, progress)
            .await
            .map_err(|e| e.to_string())
    })
}

/// Ends a rollback whose task repaired old from new: the route returns to old (`aborted`), as the control plane's
/// own step. Nothing happens when the migration left `rolling_back` meanwhile (a forced abort).
async fn rolled_back(state: &AppState, id: i64, progress: &MigrationProgress) -> ApiResult<()> {
    let mut change = Change::begin(&state.pool).await?;
    let Some(row) = db::migrations::by_id(change.conn(), id).await? else {
        return Ok(());
    };
    let tenant_row = lookup::tenant_for_update(change.conn(), &row.tenant).await?;
    let locked = db::migrations::get(change.conn(), tenant_row.id, id, true).await?;
    if locked.as_ref().map(MigrationRow::state) != Some(MigrationState::RollingBack)
        || !db::migrations::save_progress(
            change.conn(),
            id,
            MigrationState::RollingBack,
            progress,
            None,
            None,
        )
        .await?
    {
        return Ok(());
    }
    let actor = Actor("control-plane".to_string());
    let t = Transition {
        tenant: &row.tenant,
        tenant_id: tenant_row.id,
        id,
        from: Some(MigrationState::RollingBack),
        to: MigrationState::Aborted,
        route: Some(row.source.0.clone()),
        action: "migration.abort",
        forced: None,
    };
    transition(state, change, &actor, t).await?;
    tracing::info!(
        migration = id,
        "rollback done: old holds what it missed, the route is old's again"
    );
    Ok(())
}

/// One state change of a migration, with the route version it installs.
pub(super) struct Transition<'a> {
    pub(super) tenant: &'a str,
    pub(super) tenant_id: i64,
    pub(super) id: i64,
    pub(super) from: Option<MigrationState>,
    pub(super) to: MigrationState,
    pub(super) route: Option<RouteTable>,
    pub(super) action: &'static str,
    /// What a forced step overrode: a cutover's readiness counts, an abort's rollback repair.
    pub(super) forced: Option<serde_json::Value>,
}

/// Applies `t` inside `change` (the tenant and migration rows are locked) and commits it with its audit entry.
pub(super) async fn transition(
    state: &AppState,
    mut change: Change,
    actor: &Actor,
    t: Transition<'_>,
) -> ApiResult<Migration> {
    let mut route_version = None;
    let route_revision = match t.route {
        Some(_) => Some(change.revision().await?),
        None => None,
    };
    // The state first: `databases::check`, run by the route's append, holds the destination to the migration's
    // rule only while the migration is active, so an abort is not refused for a destination it leaves (finish,
    // which ends the migration too, was checked in `step`).
    db::migrations::set_state(change.conn(), t.id, t.to, route_revision).await?;
    if let Some(route) = t.route {
        let version = NewVersion {
            tenant: t.tenant,
            expected: None,
            route,
            comment: format!("migration {}: {}", t.id, t.to.as_str()),
            action: t.action,
            error_prefix: "",
        };
        let (_, created, _) = version.append(&mut change, t.tenant_id, actor).await?;
        route_version = Some(created.version);
    }
    let row = db::migrations::get(change.conn(), t.tenant_id, t.id, false)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no migration {}", t.id)))?;
    let record = AuditRecord::new(
        t.action,
        Some(t.tenant),
        object(t.tenant, t.id),
        t.from
            .map(|from| serde_json::json!({"state": from.as_str()}))
            .as_ref(),
        Some(&after(t.to, route_version, t.forced)),
    );
    state.commit(change, actor, record).await?;
    answer(state, &row).await
}

/// The audit entry's `after` of a step: the state and route version, and what a forced step overrode.
fn after(
    to: MigrationState,
    route_version: Option<i64>,
    forced: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut after = serde_json::json!({"state": to.as_str(), "route_version": route_version});
    if let (Some(serde_json::Value::Object(overrode)), Some(fields)) =
        (forced, after.as_object_mut())
    {
        fields.insert("forced".to_string(), serde_json::Value::Bool(true));
        fields.extend(overrode);
    }
    after
}
