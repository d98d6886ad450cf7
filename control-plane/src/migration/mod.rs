//! The background side of tenant migrations: the worker that runs their backfill, verify and rollback tasks.
//!
//! A task is run by whichever control-plane replica takes the migration's Postgres advisory lock first, so each
//! migration has at most one task running across replicas. A task persists its counters and SCAN cursor as it goes;
//! after a crash or restart the next holder of the lock resumes from the last saved cursor.

mod backfill;
mod checkpoint;
pub(crate) mod commands;
pub(crate) mod deployment;
mod error;
mod keys;
mod pace;
mod scope;
mod task;

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_schemas::api::MigrationProgress;
use tokio::sync::watch;

use crate::db::{self, WithOperation};
use crate::migration::error::{TaskError, TaskResult};
use crate::state::AppState;

/// How often the worker looks for work it was not told about (tasks of other replicas that died).
const POLL: Duration = Duration::from_secs(2);

/// What ends a rollback whose task repaired old: the route returns to old and the migration is `aborted`. Route
/// versions are the API's (`api::migrations::conclude_rollback`, in `api/migrations/transition.rs`, handed in by `lib.rs`).
pub(crate) type Conclude =
    for<'a> fn(
        &'a AppState,
        i64,
        &'a MigrationProgress,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// Runs the tasks of migrations in `backfilling`, `verifying` or `rolling_back` until the process stops.
pub(crate) async fn worker(state: AppState, conclude: Conclude) {
    let running: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let mut stopping = state.stopping();
    loop {
        match db::migrations::with_task(&state.pool).await {
            Ok(ids) => {
                for id in ids {
                    let fresh = running.lock().is_ok_and(|mut r| r.insert(id));
                    if !fresh {
                        continue;
                    }
                    let (state, running, stopping) =
                        (state.clone(), Arc::clone(&running), state.stopping());
                    tokio::spawn(async move {
                        let result = locked(&state, id, stopping, conclude).await;
                        if let Ok(mut r) = running.lock() {
                            r.remove(&id);
                        }
                        match result {
                            // Done (or stopped by a step): look again at once, the next task may wait.
                            Ok(true) => state.migrations.wake(),
                            // Another replica holds the lock; its task is not ours to watch.
                            Ok(false) => {}
                            // Retried at the next poll, not at once: the cause may take a while to go away.
                            Err(e) => tracing::warn!(
                                migration = id,
                                error = %e,
                                "migration task stopped"
                            ),
                        }
                    });
                }
            }
            Err(e) => tracing::warn!(error = %e, "looking for migration tasks"),
        }
        tokio::select! {
            _ = state.migrations.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
            _ = stopping.changed() => return,
        }
        if *stopping.borrow() {
            return;
        }
    }
}

/// Runs migration `id`'s task if this process gets its advisory lock (held on one connection for the task's
/// life; Postgres releases it if the process dies). Answers whether it ran.
async fn locked(
    state: &AppState,
    id: i64,
    stopping: watch::Receiver<bool>,
    conclude: Conclude,
) -> TaskResult<bool> {
    let pool = &state.pool;
    let key = i32::try_from(id).map_err(|_| TaskError::LockKey(id))?;
    let mut conn = pool
        .acquire()
        .await
        .during("taking a connection for a migration task's lock")?;
    if !db::migrations::try_lock_task(&mut conn, key).await? {
        return Ok(false);
    }
    let result = task::run(state, id, stopping, conclude).await;
    if let Err(e) = &result {
        // Shown in GET .../migrations/{id}; the task is retried at the next poll.
        let message = e.to_string();
        if let Ok(Some(row)) = db::migrations::by_id(pool, id).await {
            let _ = db::migrations::save_progress(
                pool,
                id,
                row.state(),
                &row.progress.0,
                row.task_cursor.as_ref(),
                Some(&message),
            )
            .await;
        }
    }
    db::migrations::unlock_task(&mut conn, key).await?;
    result.map(|()| true)
}
