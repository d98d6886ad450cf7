//! What a migration task saves as it goes, so that a restart resumes where it stood: its cursor and its counters.
//!
//! Counters and cursor are saved together, at most every `SAVE_EVERY`, in the migration's row; a save also tells
//! the task whether the migration is still in its state (it stops when it was aborted meanwhile).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use switchyard_schemas::api::{MigrationProgress, MigrationState, TaskProgress};

use crate::db;
use crate::migration::error::{TaskError, TaskResult};

pub(crate) const SAVE_EVERY: Duration = Duration::from_millis(500);

/// Where a task resumes: the phase (verify has two), the server within it, and its SCAN cursor; for backfill,
/// which scans every server at once, each server's cursor in `lanes`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Cursor {
    pub(crate) phase: usize,
    pub(crate) server: usize,
    pub(crate) scan: u64,
    /// Backfill: per server of old, where its SCAN resumes (`None`: done). Absent in cursors saved by a version
    /// that scanned servers one after another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lanes: Option<Vec<Option<u64>>>,
}

impl Cursor {
    /// A backfill's cursor. `server` and `scan` are set too, to the first server not done: a version without
    /// `lanes` resumes there and scans the servers after it from their start, which copies some keys again but
    /// skips none.
    pub(crate) fn at_lanes(lanes: Vec<Option<u64>>) -> Cursor {
        let (server, scan) = lanes
            .iter()
            .enumerate()
            .find_map(|(i, lane)| lane.map(|scan| (i, scan)))
            .unwrap_or((lanes.len(), 0));
        Cursor {
            phase: 0,
            server,
            scan,
            lanes: Some(lanes),
        }
    }

    /// Where each of `servers` servers resumes its backfill SCAN (`None`: done).
    pub(crate) fn lanes(&self, servers: usize) -> Vec<Option<u64>> {
        match &self.lanes {
            Some(lanes) if lanes.len() == servers => lanes.clone(),
            // Another server count than saved (cannot happen while the route is frozen): start over, safely.
            Some(_) => vec![Some(0); servers],
            // Saved scanning one server after another: those before `server` are done.
            None => (0..servers)
                .map(|i| match i.cmp(&self.server) {
                    std::cmp::Ordering::Less => None,
                    std::cmp::Ordering::Equal => Some(self.scan),
                    std::cmp::Ordering::Greater => Some(0),
                })
                .collect(),
        }
    }
}

/// Saves a task's counters and cursor in its migration's row, and answers whether the migration is still in the
/// task's state (`false`: it was aborted meanwhile).
pub(crate) struct Saver<'a> {
    pub(crate) pool: &'a PgPool,
    pub(crate) id: i64,
    pub(crate) state: MigrationState,
    pub(crate) progress: MigrationProgress,
}

impl Saver<'_> {
    /// Where the task's state shows its counters.
    fn slot(&mut self) -> &mut Option<TaskProgress> {
        match self.state {
            MigrationState::Backfilling => &mut self.progress.backfill,
            MigrationState::RollingBack => &mut self.progress.rollback,
            _ => &mut self.progress.verify,
        }
    }

    /// The counters saved by an earlier run of the task.
    pub(crate) fn counters(&mut self) -> Option<TaskProgress> {
        self.slot().clone()
    }

    /// Puts `counters` where the task's state shows them.
    pub(crate) fn store(&mut self, counters: &TaskProgress) {
        *self.slot() = Some(counters.clone());
    }

    pub(crate) async fn save(
        &mut self,
        counters: &TaskProgress,
        cursor: Option<&Cursor>,
    ) -> TaskResult<bool> {
        self.store(counters);
        let cursor = cursor
            .map(serde_json::to_value)
            .transpose()
            .map_err(TaskError::Cursor)?;
        Ok(db::migrations::save_progress(
            self.pool,
            self.id,
            self.state,
            &self.progress,
            cursor.as_ref(),
            None,
        )
        .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_saved_one_server_after_another_resumes_each_lane_safely() {
        let old: Cursor =
            serde_json::from_value(serde_json::json!({"phase": 0, "server": 1, "scan": 42}))
                .expect("a cursor of the sequential backfill");
        assert_eq!(old.lanes(3), [None, Some(42), Some(0)]);
    }

    #[test]
    fn a_lane_cursor_also_names_the_first_server_not_done_for_older_versions() {
        let cursor = Cursor::at_lanes(vec![None, Some(7), None, Some(0)]);
        assert_eq!((cursor.server, cursor.scan), (1, 7));
        let json = serde_json::to_value(&cursor).expect("a cursor encodes");
        let back: Cursor = serde_json::from_value(json).expect("and decodes");
        assert_eq!(back.lanes(4), [None, Some(7), None, Some(0)]);
        // A server count other than saved starts every lane over: copies again, skips nothing.
        assert_eq!(back.lanes(2), [Some(0), Some(0)]);
        let done = Cursor::at_lanes(vec![None, None]);
        assert_eq!((done.server, done.lanes(2)), (2, vec![None, None]));
    }
}
