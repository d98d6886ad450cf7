//! A migration's task: backfill (`backfill.rs`) or verify, a rate-limited, resumable SCAN over every server of a
//! side; verify goes one batch at a time.
//!
//! Only the migrating tenant's keys are read, on either side (`KeyScope`: its namespace, or its whole database
//! without one): a SCAN page's keys outside it are dropped before anything reads, copies, repairs or deletes them.
//!
//! The counters and the cursor are saved when the task starts, after its first batch holding keys, then at most
//! twice a second, so a restart resumes where the task stood and progress shows from the first key.
//!
//! Verify compares old and new key by key (DUMP payload, or a
//! type-specific digest when payload encodings differ; TTL within tolerance), then repairs from old, which is
//! authoritative until cutover, and re-checks each repaired key until it is stable: a write racing the repair,
//! or a delete racing the backfill's copy, is seen and settled instead of leaving the sides apart.
//!
//! The rollback of an abort from `cut_over` is the same verify the other way: new, authoritative since cutover,
//! is compared with old and old is repaired from it (the writes old missed as the secondary), then the route
//! returns to old.

use std::time::{Duration, Instant};

use sqlx::PgPool;
use switchyard_schemas::api::{MigrationLimits, MigrationState, TaskProgress};
use tokio::sync::watch;

use crate::db::audit::{Actor, AuditRecord};
use crate::db::change::Change;
use crate::db::{self, timestamp};
use crate::migration::Conclude;
use crate::migration::backfill;
use crate::migration::checkpoint::{Cursor, SAVE_EVERY, Saver};
use crate::migration::deployment::{Server, Side};
use crate::migration::error::{TaskError, TaskResult};
use crate::migration::keys::{self, Pair, error_code, read_pairs, restore_ttl, send};
use crate::migration::pace::Pace;
use crate::migration::scope::KeyScope;
use crate::references;
use crate::state::AppState;

/// Verify re-checks a differing key this many times (repairing in between) before calling it unresolved.
const SETTLE_ROUNDS: usize = 5;
/// Lets in-flight double-writes land before a difference is believed.
const SETTLE_DELAY: Duration = Duration::from_millis(200);
/// How often a rollback that waits for the gateways' repair looks at their reports again.
const DRAIN_POLL: Duration = Duration::from_secs(1);
/// Verify settles its differences before each save, or sooner when this many wait.
const PENDING_MAX: usize = 5_000;

/// Runs migration `id`'s task (its advisory lock is held by the caller) to the end, or until it is aborted or
/// the process stops.
pub(crate) async fn run(
    app: &AppState,
    id: i64,
    stopping: watch::Receiver<bool>,
    conclude: Conclude,
) -> TaskResult<()> {
    let pool = &app.pool;
    let Some(row) = db::migrations::by_id(pool, id).await? else {
        return Ok(());
    };
    let state = row.state();
    if !matches!(
        state,
        MigrationState::Backfilling | MigrationState::Verifying | MigrationState::RollingBack
    ) {
        return Ok(());
    }
    // The tenant's namespace cannot change while the migration is active (PATCH answers 409), so every run of the
    // task reads the same keys.
    let Some(tenant) = db::tenants::get(pool, &row.tenant).await? else {
        return Ok(()); // deleted, with its migrations
    };
    let scope = KeyScope::new(tenant.policy.namespace.as_deref());
    let urls = db::resources::all_urls(pool).await?;
    let (mut source, mut destination) = (row.source.0.clone(), row.destination.0.clone());
    for route in [&mut source, &mut destination] {
        references::inline(route, &urls).map_err(TaskError::UnknownResource)?;
    }
    let old = Side::connect("old", source).await?;
    let new = Side::connect("new", destination).await?;
    let cursor: Option<Cursor> = row
        .task_cursor
        .as_ref()
        .and_then(|c| serde_json::from_value(c.clone()).ok());
    // Verify repairs new from old; the rollback old from new.
    let (authority, copy) = match state {
        MigrationState::RollingBack => (new, old),
        _ => (old, new),
    };
    let phases: Vec<Vec<Server>> = match state {
        MigrationState::Backfilling => vec![authority.servers()],
        _ => vec![authority.servers(), copy.servers()],
    };
    let mut saver = Saver {
        pool,
        id,
        state,
        progress: row.progress.0.clone(),
    };
    let mut counters = match (&cursor, state) {
        (Some(_), _) => saver.counters().unwrap_or_default(),
        (None, _) => {
            let mut total = 0;
            for server in phases.iter().flatten() {
                total += scope.estimate(server).await?;
            }
            TaskProgress {
                estimated_total: total,
                remaining: total,
                started_at: Some(timestamp(chrono::Utc::now())),
                ..TaskProgress::default()
            }
        }
    };
    // The estimate and the start time show before the first key is read.
    if cursor.is_none() && !saver.save(&counters, None).await? {
        return Ok(()); // aborted meanwhile
    }
    let cursor = cursor.unwrap_or_default();
    let limits = row.limits.0.clone();
    let mut waiting = stopping.clone();
    let done = match state {
        MigrationState::Backfilling => {
            let sides = (&authority, &copy);
            backfill::run(
                sides,
                &scope,
                &limits,
                &cursor,
                &mut counters,
                &mut saver,
                stopping,
            )
            .await?
        }
        _ => {
            let mut task = Task {
                authority,
                copy,
                pace: Pace::new(&limits),
                limits,
                scope,
                pending: Vec::new(),
                pending_since: None,
            };
            task.verify(&phases, cursor, &mut counters, &mut saver, &stopping)
                .await?
        }
    };
    if !done {
        return Ok(()); // the last saved cursor is where the next run resumes
    }
    counters.remaining = 0;
    counters.eta_secs = Some(0);
    if state == MigrationState::RollingBack
        && !drained(pool, row.tenant_id, &mut counters, &mut saver, &mut waiting).await?
    {
        return Ok(());
    }
    if state != MigrationState::Backfilling {
        counters.gateway_repair = Some(db::divergence::summed(pool, row.tenant_id).await?);
    }
    counters.finished_at = Some(timestamp(chrono::Utc::now()));
    saver.store(&counters);
    match state {
        MigrationState::RollingBack => conclude(app, id, &saver.progress)
            .await
            .map_err(TaskError::Conclude),
        _ => finish(pool, id, state, &saver.progress).await,
    }
}

/// The rollback's last wait before the route returns to old: until the gateways' repair owes old nothing (every
/// recent gateway's latest report holds no key pending and no catch-up; docs/migration.md#rollback), their figures
/// shown in the progress meanwhile. `false` when the process stops or the migration left `rolling_back`.
async fn drained(
    pool: &PgPool,
    tenant_id: i64,
    counters: &mut TaskProgress,
    saver: &mut Saver<'_>,
    stopping: &mut watch::Receiver<bool>,
) -> TaskResult<bool> {
    let mut said = false;
    loop {
        let owed = db::divergence::summed(pool, tenant_id).await?;
        let (pending, catching_up) = (owed.pending, owed.catching_up);
        counters.gateway_repair = Some(owed);
        if pending == 0 && !catching_up {
            return Ok(true);
        }
        // Without a cursor: a restart compares again, which is safe, and the gateways' figures show meanwhile.
        if !saver.save(counters, None).await? {
            return Ok(false);
        }
        if !std::mem::replace(&mut said, true) {
            tracing::info!(
                migration = saver.id,
                pending,
                catching_up,
                "rollback waits for the gateways to repair what old missed"
            );
        }
        tokio::select! {
            () = tokio::time::sleep(DRAIN_POLL) => {}
            _ = stopping.changed() => return Ok(false),
        }
        if *stopping.borrow() {
            return Ok(false);
        }
    }
}

/// Saves the final counters and moves to the task's done state, with an audit entry.
async fn finish(
    pool: &PgPool,
    id: i64,
    state: MigrationState,
    progress: &switchyard_schemas::api::MigrationProgress,
) -> TaskResult<()> {
    let (done, action) = match state {
        MigrationState::Backfilling => (MigrationState::Backfilled, "migration.backfilled"),
        _ => (MigrationState::Verified, "migration.verified"),
    };
    let mut change = Change::begin(pool).await?;
    let Some(row) = db::migrations::by_id(change.conn(), id).await? else {
        return Ok(());
    };
    let locked = db::migrations::get(change.conn(), row.tenant_id, id, true).await?;
    if locked.as_ref().map(|r| r.state()) != Some(state) {
        return Ok(()); // aborted meanwhile
    }
    if !db::migrations::save_progress(change.conn(), id, state, progress, None, None).await? {
        return Ok(());
    }
    db::migrations::set_state(change.conn(), id, done, None).await?;
    let record = AuditRecord::new(
        action,
        Some(&row.tenant),
        format!("tenants/{}/migrations/{id}", row.tenant),
        Some(&serde_json::json!({"state": state.as_str()})),
        Some(&serde_json::json!({"state": done.as_str(), "progress": progress})),
    );
    let revision = change
        .commit(&Actor("control-plane".to_string()), record)
        .await?;
    tracing::info!(
        migration = id,
        state = done.as_str(),
        revision,
        "migration task done"
    );
    Ok(())
}

struct Task {
    /// The side whose keys are right: old for verify, new for the rollback.
    authority: Side,
    /// The side repaired from it.
    copy: Side,
    limits: MigrationLimits,
    /// The migrating tenant's keys: nothing outside them is read, written or deleted, on either side.
    scope: KeyScope,
    /// What this run moved, for the rate limits and the rate shown.
    pace: Pace,
    /// Verify: differences waiting for their re-check, and when the first of them was seen. Batches go on
    /// meanwhile, so in-flight double-writes get time to land without the scan waiting for them.
    pending: Vec<Pair>,
    pending_since: Option<Instant>,
}

impl Task {
    /// Verifies from `cursor` to the end (answers `true`), or until the migration is aborted or the process
    /// stops (`false`).
    async fn verify(
        &mut self,
        phases: &[Vec<Server>],
        mut cursor: Cursor,
        counters: &mut TaskProgress,
        saver: &mut Saver<'_>,
        stopping: &watch::Receiver<bool>,
    ) -> TaskResult<bool> {
        // Whether a batch with keys has been saved: the first one is saved at once.
        let mut saved_keys = counters.scanned > 0;
        let mut saved = Instant::now();
        let pattern = self.scope.pattern();
        while let Some(servers) = phases.get(cursor.phase) {
            let Some(server) = servers.get(cursor.server) else {
                cursor = Cursor {
                    phase: cursor.phase + 1,
                    ..Cursor::default()
                };
                continue;
            };
            let mut conn = server.conn.clone();
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor.scan);
            if let Some(pattern) = &pattern {
                scan.arg("MATCH").arg(pattern.as_slice());
            }
            let (next, keys): (u64, Vec<Vec<u8>>) = scan
                .arg("COUNT")
                .arg(self.limits.batch.max(1))
                .query_async(&mut conn)
                .await
                .map_err(|e| TaskError::redis("SCAN", &server.addr, e))?;
            let keys = self.scope.retain(keys);
            counters.scanned += keys.len() as u64;
            match cursor.phase {
                0 => self.compare(server, &keys, counters).await?,
                _ => self.find_leftovers(server, &keys).await?,
            }
            cursor = match next {
                0 => Cursor {
                    server: cursor.server + 1,
                    scan: 0,
                    ..cursor
                },
                scan => Cursor { scan, ..cursor },
            };
            self.pace.add(keys.len(), 0);
            self.pace.report(counters);
            let first_keys = !saved_keys && !keys.is_empty();
            if first_keys || saved.elapsed() >= SAVE_EVERY || self.pending.len() >= PENDING_MAX {
                // Differences are settled before the cursor moves past them, so a resumed run never skips one.
                self.settle_pending(counters).await?;
                if !saver.save(counters, Some(&cursor)).await? {
                    return Ok(false); // aborted meanwhile
                }
                saved = Instant::now();
                saved_keys |= first_keys;
            }
            if *stopping.borrow() {
                return Ok(false);
            }
            self.pace.throttle().await;
        }
        self.settle_pending(counters).await?;
        Ok(true)
    }

    /// Compares `keys` (found on `server` of the authority) with every copy the other side should have, then
    /// settles differences.
    async fn compare(
        &mut self,
        server: &Server,
        keys: &[Vec<u8>],
        counters: &mut TaskProgress,
    ) -> TaskResult<()> {
        let placement = self.copy.placement();
        let pairs: Vec<Pair> = keys
            .iter()
            .flat_map(|key| {
                self.copy.servers_for(&placement, key).map(|new| Pair {
                    key: key.clone(),
                    old: server.clone(),
                    new: new.clone(),
                })
            })
            .collect();
        let mut differing = Vec::new();
        for (pair, (old, new)) in pairs.iter().zip(read_pairs(&pairs).await?) {
            self.pace
                .add(0, old.dump.as_ref().map_or(0, Vec::len) as u64);
            if keys::same(pair, &old, &new, self.limits.ttl_tolerance_ms).await {
                counters.matched += 1;
            } else {
                differing.push(pair.clone());
            }
        }
        self.defer(differing);
        Ok(())
    }

    /// Looks for keys of the repaired side (on `server`) that the authority does not have: leftovers of a key
    /// deleted while backfill copied it, or (rollback) a delete old missed. They are removed once a re-check
    /// confirms the authority still lacks them.
    async fn find_leftovers(&mut self, server: &Server, keys: &[Vec<u8>]) -> TaskResult<()> {
        let placement = self.authority.placement();
        let pairs: Vec<Pair> = keys
            .iter()
            .filter_map(|key| {
                let old = self.authority.servers_for(&placement, key).next()?.clone();
                Some(Pair {
                    key: key.clone(),
                    old,
                    new: server.clone(),
                })
            })
            .collect();
        let orphans = pairs
            .iter()
            .zip(read_pairs(&pairs).await?)
            .filter(|(_, (old, new))| old.dump.is_none() && new.dump.is_some())
            .map(|(pair, _)| pair.clone())
            .collect();
        self.defer(orphans);
        Ok(())
    }

    fn defer(&mut self, pairs: Vec<Pair>) {
        if !pairs.is_empty() {
            self.pending_since.get_or_insert_with(Instant::now);
            self.pending.extend(pairs);
        }
    }

    /// Settles the deferred differences, once the first of them is at least `SETTLE_DELAY` old.
    async fn settle_pending(&mut self, counters: &mut TaskProgress) -> TaskResult<()> {
        let pending = std::mem::take(&mut self.pending);
        if let Some(wait) = self
            .pending_since
            .take()
            .and_then(|since| SETTLE_DELAY.checked_sub(since.elapsed()))
        {
            tokio::time::sleep(wait).await;
        }
        self.settle(pending, counters).await
    }

    /// Re-checks differing pairs (seen at least `SETTLE_DELAY` ago), repairing from old, until they agree or the
    /// rounds run out; rounds are `SETTLE_DELAY` apart.
    async fn settle(
        &mut self,
        mut pending: Vec<Pair>,
        counters: &mut TaskProgress,
    ) -> TaskResult<()> {
        let mut repaired = std::collections::HashSet::new();
        for round in 0..SETTLE_ROUNDS {
            if pending.is_empty() {
                return Ok(());
            }
            if round > 0 {
                tokio::time::sleep(SETTLE_DELAY).await;
            }
            let mut still = Vec::new();
            for (pair, (old, new)) in pending.iter().zip(read_pairs(&pending).await?) {
                if keys::same(pair, &old, &new, self.limits.ttl_tolerance_ms).await {
                    if !repaired.contains(&(pair.key.clone(), pair.new.addr.clone())) {
                        counters.matched += 1; // a double-write that was still in flight
                    }
                    continue;
                }
                if round + 1 < SETTLE_ROUNDS
                    && let Some(removed) = self.repair(pair).await?
                    && repaired.insert((pair.key.clone(), pair.new.addr.clone()))
                {
                    match removed {
                        true => counters.removed += 1,
                        false => counters.repaired += 1,
                    }
                }
                still.push(pair.clone());
            }
            pending = still;
        }
        counters.unresolved += pending.len() as u64;
        for pair in &pending {
            tracing::warn!(key = %String::from_utf8_lossy(&pair.key), new = pair.new.addr, "key still differs after every re-check");
        }
        Ok(())
    }

    /// Makes new's copy equal old's: RESTORE REPLACE, or DEL when old has no such key. Both sides are read again
    /// first, so what is restored is old's value of this moment, not of the round's start (a round over many keys
    /// takes a while, and restoring an older value would undo a write made since). Returns whether it deleted,
    /// or `None` when the sides agree by now.
    async fn repair(&self, pair: &Pair) -> TaskResult<Option<bool>> {
        // Pairs are made of scanned keys the scope holds; checked again where a key is written or deleted.
        if !self.scope.holds(&pair.key) {
            return Ok(None);
        }
        let Some((old, new)) = read_pairs(std::slice::from_ref(pair)).await?.pop() else {
            return Ok(None);
        };
        if keys::same(pair, &old, &new, self.limits.ttl_tolerance_ms).await {
            return Ok(None);
        }
        let mut pipe = redis::pipe();
        let removed = match &old.dump {
            Some(dump) => {
                pipe.cmd("RESTORE")
                    .arg(&pair.key)
                    .arg(restore_ttl(old.pttl))
                    .arg(dump.as_slice())
                    .arg("REPLACE");
                false
            }
            None => {
                pipe.cmd("DEL").arg(&pair.key);
                true
            }
        };
        let reply = send(&pair.new, &pipe, 1).await?;
        if let Some(code) = reply.first().and_then(error_code) {
            return Err(TaskError::unexpected(
                &pair.new.addr,
                format!("repairing a key: {code}"),
            ));
        }
        Ok(Some(removed))
    }
}
