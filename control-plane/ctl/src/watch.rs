//! `switchyard-ctl migrations watch`: draws a migration's task progress until the task is done.
//!
//! It polls `GET /v1/tenants/{tenant}/migrations/{id}` until no task runs (or the migration reaches a given state).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use switchyard_schemas::api::{Migration, MigrationState, TaskProgress};

use crate::client::Outcome;
use crate::session::Session;

const BAR: usize = 30;

/// One line for people: the state, a bar, the counters, the rate and the time left.
pub(crate) fn line(migration: &Migration) -> String {
    let (task, progress) = match migration.state {
        MigrationState::Backfilling | MigrationState::Backfilled => {
            ("backfill", migration.progress.backfill.as_ref())
        }
        MigrationState::RollingBack | MigrationState::Aborted
            if migration.progress.rollback.is_some() =>
        {
            ("rollback", migration.progress.rollback.as_ref())
        }
        _ => ("verify", migration.progress.verify.as_ref()),
    };
    let state = migration.state.as_str();
    let Some(p) = progress else {
        return format!("migration {} {state}", migration.id);
    };
    let total = p.estimated_total.max(p.scanned).max(1);
    let done = if p.finished_at.is_some() {
        total
    } else {
        p.scanned.min(total)
    };
    let filled = (done as usize * BAR) / total as usize;
    let bar: String = "#".repeat(filled) + &".".repeat(BAR - filled);
    let percent = done * 100 / total;
    let counters = match task {
        "backfill" => format!(
            "copied {} skipped {} failed {}",
            p.copied, p.skipped, p.failed
        ),
        _ => format!(
            "matched {} repaired {} removed {} unresolved {} failed {}{}",
            p.matched,
            p.repaired,
            p.removed,
            p.unresolved,
            p.failed,
            p.gateway_repair.as_ref().map_or(String::new(), |g| format!(
                " | gateways' repair: repaired {} owed {}",
                g.repaired, g.pending
            ))
        ),
    };
    format!(
        "migration {} {state:<12} [{bar}] {percent:>3}% {task}: scanned {}/~{} {counters} | {} keys/s{}",
        migration.id,
        p.scanned,
        p.estimated_total,
        p.keys_per_sec,
        eta(p)
    )
}

fn eta(p: &TaskProgress) -> String {
    match (p.finished_at.is_some(), p.eta_secs) {
        (true, _) => " | done".to_string(),
        (false, Some(secs)) => format!(" | ETA {}m{:02}s", secs / 60, secs % 60),
        (false, None) => String::new(),
    }
}

/// Polls until done (by default, when no task is running any more; else at `until`); the last line stays on
/// screen. Fails when the migration cannot be read.
pub(crate) async fn watch(
    session: &Session,
    tenant: &str,
    id: i64,
    interval: Duration,
    until: Option<MigrationState>,
) -> Outcome<Migration> {
    let path = format!("/v1/tenants/{tenant}/migrations/{id}");
    let tty = std::io::stdout().is_terminal();
    loop {
        let migration: Migration = session.read(&path).await?;
        let done = match until {
            Some(state) => migration.state == state || !migration.state.is_active(),
            None => !matches!(
                migration.state,
                MigrationState::Backfilling
                    | MigrationState::Verifying
                    | MigrationState::RollingBack
            ),
        };
        let mut out = std::io::stdout().lock();
        match tty {
            true => write!(out, "\r\x1b[2K{}", line(&migration))?,
            false => writeln!(out, "{}", line(&migration))?,
        }
        if done {
            if tty {
                writeln!(out)?;
            }
            if let Some(error) = &migration.error {
                writeln!(out, "last task error: {error}")?;
            }
            return Ok(migration);
        }
        out.flush()?;
        drop(out);
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use switchyard_schemas::RouteTable;
    use switchyard_schemas::api::{MigrationLimits, MigrationProgress};

    use super::*;

    #[test]
    fn line_shows_bar_counters_and_eta() {
        let table = || {
            RouteTable::single(switchyard_schemas::Target::Resource(
                "redis://127.0.0.1:1".into(),
            ))
        };
        let mut migration = Migration {
            id: 3,
            tenant: "acme".into(),
            state: MigrationState::Backfilling,
            from: table(),
            to: table(),
            ack: switchyard_schemas::AckMode::Primary,
            limits: MigrationLimits::default(),
            route_revision: 1,
            converged: true,
            progress: MigrationProgress {
                backfill: Some(TaskProgress {
                    scanned: 500,
                    copied: 450,
                    skipped: 50,
                    estimated_total: 1000,
                    keys_per_sec: 250.0,
                    eta_secs: Some(75),
                    ..TaskProgress::default()
                }),
                verify: None,
                rollback: None,
            },
            error: None,
            author: "admin".into(),
            created_at: String::new(),
            updated_at: String::new(),
        };
        let shown = line(&migration);
        assert!(
            shown.contains(&format!("[{}{}]", "#".repeat(15), ".".repeat(15))),
            "{shown}"
        );
        assert!(
            shown.contains(" 50% backfill: scanned 500/~1000 copied 450 skipped 50 failed 0"),
            "{shown}"
        );
        assert!(shown.ends_with("250 keys/s | ETA 1m15s"), "{shown}");
        migration.state = MigrationState::DoubleWrite;
        migration.progress = MigrationProgress::default();
        assert_eq!(line(&migration), "migration 3 double_write");
    }
}
