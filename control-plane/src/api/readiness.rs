//! `/v1/tenants/{tenant}/migrations/{id}/readiness`: whether the tenant's live commands would work on the
//! migration's destination, from what every gateway counted (see the gateway's `readiness`, and
//! docs/migration.md#readiness). `cutover` consults the same sums and refuses a migration that is not ready
//! unless forced.

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use std::collections::BTreeMap;

use switchyard_schemas::RouteTable;
use switchyard_schemas::api::{
    ErrorDetail, MigrationReadiness, ReadinessCounts, ReadinessExample, ReadinessKind,
    merge_commands, merge_examples,
};

use crate::api::lookup;
use crate::auth::Access;
use crate::db::readiness::ReadinessRow;
use crate::db::{WithOperation, timestamp};
use crate::error::{ApiError, ApiResult};
use crate::extract::ApiPath;
use crate::openapi::Operation;
use crate::state::AppState;
use crate::{db, references};

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
    let migration = lookup::migration(&state.pool, &tenant, id).await?;
    Ok(Json(
        of_migration(&state, id, &migration.destination.0).await?,
    ))
}

/// Every gateway's sums for migration `id`, added up, with the commands `destination` does not know.
pub(crate) async fn of_migration(
    state: &AppState,
    id: i64,
    destination: &RouteTable,
) -> ApiResult<MigrationReadiness> {
    let rows = db::readiness::Subject::Migration(id)
        .rows(&state.pool)
        .await?;
    summed(state, &rows, destination).await
}

/// Every gateway's sums added up (a gateway gone since still counts: what it saw happened), and the commands
/// they saw run asked of `destination` (its resources by name): each one it does not know counts as
/// `unsupported`, as many times as it ran.
pub(crate) async fn summed(
    state: &AppState,
    rows: &[ReadinessRow],
    destination: &RouteTable,
) -> ApiResult<MigrationReadiness> {
    let mut counts = ReadinessCounts::default();
    let mut examples: Vec<ReadinessExample> = Vec::new();
    let mut commands = BTreeMap::new();
    let mut checked = 0u64;
    for row in rows {
        checked = checked.saturating_add(u64::try_from(row.checked).unwrap_or(0));
        counts.add(&row.counts.0);
        merge_examples(&mut examples, &row.examples.0);
        merge_commands(&mut commands, &row.commands.0);
    }
    let (commands_checked, commands_unchecked) =
        match unknown(state, destination, &commands).await? {
            Ok(unknown) => {
                let unsupported: Vec<ReadinessExample> = unknown
                    .into_iter()
                    .map(|command| ReadinessExample {
                        kind: ReadinessKind::Unsupported,
                        count: commands.get(&command).copied().unwrap_or(0),
                        command,
                        keys: Vec::new(),
                    })
                    .collect();
                counts.unsupported = unsupported.iter().map(|e| e.count).sum();
                merge_examples(&mut examples, &unsupported);
                (true, None)
            }
            Err(reason) => (false, Some(reason)),
        };
    Ok(MigrationReadiness {
        ready: counts.failing() == 0,
        checked,
        counts,
        examples,
        commands_checked,
        commands_unchecked,
        gateways: rows.iter().map(|row| row.gateway.clone()).collect(),
        updated_at: rows.iter().map(|row| row.updated_at).max().map(timestamp),
    })
}

/// The commands of `commands` that `destination` does not know, or why it could not be asked.
async fn unknown(
    state: &AppState,
    destination: &RouteTable,
    commands: &BTreeMap<String, u64>,
) -> ApiResult<Result<std::collections::BTreeSet<String>, String>> {
    if commands.is_empty() {
        return Ok(Ok(Default::default()));
    }
    let mut destination = destination.clone();
    let names = references::names(&destination);
    let mut conn = state
        .pool
        .acquire()
        .await
        .during("reading the resources of a readiness destination")?;
    let urls = db::resources::urls(&mut conn, &names, db::resources::Lock::None).await?;
    drop(conn);
    if let Err(resource) = references::inline(&mut destination, &urls) {
        return Ok(Err(format!(
            "the destination names resource '{resource}', which no longer exists"
        )));
    }
    let names: Vec<&str> = commands.keys().map(String::as_str).collect();
    Ok(crate::migration::commands::unknown(&destination, &names).await)
}

/// The 409 of a cutover refused because commands counted would fail on the destination: the counts in its
/// message, each kind and each example in its details.
pub(crate) fn not_ready(id: i64, readiness: &MigrationReadiness) -> ApiError {
    let c = &readiness.counts;
    let message = format!(
        "migration {id} is not ready: on the destination, {} multi-key commands, {} transactions and {} scripts \
         seen through the gateways would fail with CROSSSLOT, and {} calls of commands it does not know with \
         ERR unknown command (GET .../migrations/{id}/readiness); fix the clients (hash tags, other commands) or \
         the destination, or cut over anyway with ?force=true",
        c.cross_slot, c.transactions, c.scripts, c.unsupported
    );
    let mut details: Vec<ErrorDetail> = [
        ("cross_slot", c.cross_slot),
        ("transactions", c.transactions),
        ("scripts", c.scripts),
        ("unsupported", c.unsupported),
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
