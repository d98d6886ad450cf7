//! Backfill: copies every key of the tenant that old holds to its place in new, every server of old at once.
//!
//! Each server of old is a *lane*: its SCAN pages are read one after another (a SCAN cursor cannot be split), but
//! the next page is fetched while earlier ones are still being copied, up to `DEPTH` pages in flight per lane, and
//! all lanes run at the same time. A page is copied with DUMP + PTTL pipelined on its server, then RESTORE
//! (without REPLACE) pipelined on every destination server at once: a key already written through double-write
//! answers BUSYKEY and keeps its newer value. Only the tenant's keys are read (`KeyScope`: SCAN MATCH, then the
//! prefix check on every key returned).
//!
//! Pages finish out of order, so a lane's saved cursor is the SCAN cursor after its last page whose copy *and the
//! copy of every page before it* have finished; the counters saved with it count exactly those pages. A restart
//! resumes each lane there: a key may be copied twice (the second RESTORE answers BUSYKEY, counted as skipped),
//! never skipped. The rate limits are applied to the keys of each page as it is scanned, over all lanes together.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::Pipeline;
use switchyard_schemas::api::{MigrationLimits, TaskProgress};
use tokio::sync::watch;

use crate::migration::checkpoint::{Cursor, SAVE_EVERY, Saver};
use crate::migration::deployment::{Server, Side};
use crate::migration::error::{TaskError, TaskResult};
use crate::migration::keys::{error_code, read, restore_ttl, send};
use crate::migration::pace::Pace;
use crate::migration::scope::KeyScope;

/// Pages in flight per lane (being scanned, copied, or copied and waiting for an earlier page). Enough to keep
/// the source busy with the next DUMPs while the destinations RESTORE the previous page; more buys nothing on
/// servers that each run commands one at a time, and each page is held in memory.
const DEPTH: u64 = 4;

/// What copying one page did.
#[derive(Debug, Default, Clone, Copy)]
struct Copied {
    /// The tenant's keys on the page.
    scanned: u64,
    copied: u64,
    skipped: u64,
    failed: u64,
}

impl Copied {
    fn add_to(self, counters: &mut TaskProgress) {
        counters.scanned += self.scanned;
        counters.copied += self.copied;
        counters.skipped += self.skipped;
        counters.failed += self.failed;
    }
}

/// One server of old, scanned page after page.
struct Lane {
    server: Server,
    /// Where the next SCAN starts; `None` once the last page has been fetched.
    next: Option<u64>,
    scanning: bool,
    pages: Pages,
}

/// A lane's pages being copied, in the order SCAN returned them.
struct Pages {
    /// Pages fetched so far (numbered from 0 in this run), and the oldest one whose copy may still run.
    fetched: u64,
    oldest: u64,
    /// Pages copied while an earlier one still copies: the cursor after each, and what it did.
    finished: BTreeMap<u64, (Option<u64>, Copied)>,
    /// The cursor after the last page whose copy, and every earlier one's, has finished: where a restart
    /// resumes (`None`: the lane is done).
    safe: Option<u64>,
}

impl Pages {
    fn new(start: Option<u64>) -> Pages {
        Pages {
            fetched: 0,
            oldest: 0,
            finished: BTreeMap::new(),
            safe: start,
        }
    }

    /// Numbers a page just fetched.
    fn fetch(&mut self) -> u64 {
        self.fetched += 1;
        self.fetched - 1
    }

    /// Pages fetched whose copy may still run (or waits for an earlier page).
    fn in_flight(&self) -> u64 {
        self.fetched - self.oldest
    }

    /// Records page `page` as copied, and moves the safe cursor past every page now finished in order, adding
    /// what they did to `counters`. Answers whether any of those pages held keys.
    fn finish(
        &mut self,
        page: u64,
        after: Option<u64>,
        copied: Copied,
        counters: &mut TaskProgress,
    ) -> bool {
        self.finished.insert(page, (after, copied));
        let mut keys = false;
        while let Some((after, copied)) = self.finished.remove(&self.oldest) {
            self.safe = after;
            self.oldest += 1;
            keys |= copied.scanned > 0;
            copied.add_to(counters);
        }
        keys
    }
}

/// What a finished piece of work reports to the loop.
enum Step {
    /// A SCAN page of lane `lane`: the cursor after it (`None`: the last page) and its keys in the scope.
    Scanned {
        lane: usize,
        after: Option<u64>,
        keys: Vec<Vec<u8>>,
    },
    /// Page `page` of lane `lane` is copied; `after` is the cursor after it; `bytes` the DUMP payloads moved.
    Copied {
        lane: usize,
        page: u64,
        after: Option<u64>,
        copied: Copied,
        bytes: u64,
    },
}

type Work<'a> = Pin<Box<dyn Future<Output = TaskResult<Step>> + Send + 'a>>;

/// Runs a backfill from `cursor` to the end (answers `true`), or until it is aborted or the process stops
/// (`false`; the last saved cursor is where the next run resumes).
pub(crate) async fn run(
    sides: (&Side, &Side),
    scope: &KeyScope,
    limits: &MigrationLimits,
    cursor: &Cursor,
    counters: &mut TaskProgress,
    saver: &mut Saver<'_>,
    mut stopping: watch::Receiver<bool>,
) -> TaskResult<bool> {
    let (old, new) = sides;
    let servers = old.servers();
    let starts = cursor.lanes(servers.len());
    let mut lanes: Vec<Lane> = servers
        .into_iter()
        .zip(starts)
        .map(|(server, start)| Lane {
            server,
            next: start,
            scanning: false,
            pages: Pages::new(start),
        })
        .collect();
    let pattern = scope.pattern();
    let batch = limits.batch.max(1);
    let mut pace = Pace::new(limits);
    let mut work: FuturesUnordered<Work<'_>> = FuturesUnordered::new();
    // Whether a page with keys has been saved: the first one is saved at once, so progress shows.
    let mut saved_keys = counters.scanned > 0;
    let mut saved = std::time::Instant::now();
    loop {
        if *stopping.borrow() {
            return Ok(false);
        }
        let due = pace.due();
        if due.is_zero() {
            for (i, lane) in lanes.iter_mut().enumerate() {
                if let Some(start) = lane.next
                    && !lane.scanning
                    && lane.pages.in_flight() < DEPTH
                {
                    lane.scanning = true;
                    work.push(Box::pin(scan(
                        i,
                        lane.server.clone(),
                        start,
                        pattern.clone(),
                        batch,
                        scope,
                    )));
                }
            }
        }
        if work.is_empty() && lanes.iter().all(|lane| lane.next.is_none()) {
            break;
        }
        let step = tokio::select! {
            step = work.next(), if !work.is_empty() => step,
            _ = tokio::time::sleep(due), if !due.is_zero() => continue,
            changed = stopping.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return Ok(false), // the process is going away
            },
        };
        let Some(step) = step else { continue };
        let mut first_keys = false;
        match step? {
            Step::Scanned {
                lane: i,
                after,
                keys,
            } => {
                let lane = &mut lanes[i];
                lane.scanning = false;
                lane.next = after;
                let page = lane.pages.fetch();
                pace.add(keys.len(), 0);
                if keys.is_empty() {
                    // Nothing to copy, but the page still waits for the ones before it.
                    first_keys |= lane.pages.finish(page, after, Copied::default(), counters);
                } else {
                    work.push(Box::pin(copy(
                        i,
                        page,
                        after,
                        lane.server.clone(),
                        new,
                        keys,
                    )));
                }
            }
            Step::Copied {
                lane: i,
                page,
                after,
                copied,
                bytes,
            } => {
                pace.add(0, bytes);
                first_keys |= lanes[i].pages.finish(page, after, copied, counters);
            }
        }
        pace.report(counters);
        let first_keys = first_keys && !saved_keys;
        if first_keys || saved.elapsed() >= SAVE_EVERY {
            let safe = Cursor::at_lanes(lanes.iter().map(|lane| lane.pages.safe).collect());
            if !saver.save(counters, Some(&safe)).await? {
                return Ok(false); // aborted meanwhile
            }
            saved = std::time::Instant::now();
            saved_keys |= first_keys;
        }
    }
    Ok(true)
}

/// One SCAN page of `server` from `start`, with the keys outside `scope` dropped.
async fn scan(
    lane: usize,
    server: Server,
    start: u64,
    pattern: Option<Vec<u8>>,
    batch: u64,
    scope: &KeyScope,
) -> TaskResult<Step> {
    let mut conn = server.conn.clone();
    let mut scan = redis::cmd("SCAN");
    scan.arg(start);
    if let Some(pattern) = &pattern {
        scan.arg("MATCH").arg(pattern.as_slice());
    }
    let (after, keys): (u64, Vec<Vec<u8>>) = scan
        .arg("COUNT")
        .arg(batch)
        .query_async(&mut conn)
        .await
        .map_err(|e| TaskError::redis("SCAN", &server.addr, e))?;
    Ok(Step::Scanned {
        lane,
        after: (after != 0).then_some(after),
        keys: scope.retain(keys),
    })
}

/// RESTOREs bound for one server: its pipeline, and for each command its key's index and whether this is the
/// key's first destination (which is what the counters count).
type Restores<'s> = (&'s Server, Pipeline, Vec<(usize, bool)>);

/// Copies `keys` (found on `server` of old) to their places in new, never over a key already there: DUMP + PTTL
/// on `server`, then the RESTOREs on every destination server at once.
async fn copy(
    lane: usize,
    page: u64,
    after: Option<u64>,
    server: Server,
    new: &Side,
    keys: Vec<Vec<u8>>,
) -> TaskResult<Step> {
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let copies = read(&server, &refs).await?;
    let mut copied = Copied {
        scanned: keys.len() as u64,
        ..Copied::default()
    };
    let mut bytes = 0;
    let placement = new.placement();
    // By server address, borrowed from `new`: nothing is allocated per key but the RESTORE itself.
    let mut restores: HashMap<&str, Restores<'_>> = HashMap::new();
    for (i, (key, copy)) in keys.iter().zip(&copies).enumerate() {
        let Some(dump) = &copy.dump else {
            copied.skipped += 1; // deleted since SCAN saw it
            continue;
        };
        bytes += dump.len() as u64;
        for (n, dest) in new.servers_for(&placement, key).enumerate() {
            let entry = restores
                .entry(dest.addr.as_str())
                .or_insert_with(|| (dest, redis::pipe(), Vec::new()));
            entry
                .1
                .cmd("RESTORE")
                .arg(key)
                .arg(restore_ttl(copy.pttl))
                .arg(dump.as_slice());
            entry.2.push((i, n == 0));
        }
    }
    let sent = restores
        .values()
        .map(|(dest, pipe, items)| send(dest, pipe, items.len()));
    let replies = futures_util::future::try_join_all(sent).await?;
    for ((dest, _, items), replies) in restores.values().zip(replies) {
        for ((i, first), reply) in items.iter().zip(replies) {
            match error_code(&reply) {
                None if *first => copied.copied += 1,
                None => {}
                Some(code) if code == "BUSYKEY" && *first => copied.skipped += 1,
                Some(code) if code == "BUSYKEY" => {}
                Some(code) => {
                    tracing::warn!(server = dest.addr, code, key = %String::from_utf8_lossy(&keys[*i]), "RESTORE failed");
                    if *first {
                        copied.failed += 1;
                    }
                }
            }
        }
    }
    Ok(Step::Copied {
        lane,
        page,
        after,
        copied,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(scanned: u64) -> Copied {
        Copied {
            scanned,
            copied: scanned,
            ..Copied::default()
        }
    }

    /// Pages finishing out of order move the safe cursor only past pages finished in order, and count only those.
    #[test]
    fn the_safe_cursor_never_passes_a_page_still_copying() {
        let mut counters = TaskProgress::default();
        let mut lane = Pages::new(Some(0));
        for page in 0..3 {
            assert_eq!(lane.fetch(), page);
        }
        assert!(!lane.finish(1, Some(20), page(5), &mut counters));
        assert!(!lane.finish(2, None, page(7), &mut counters));
        assert_eq!(
            (lane.safe, counters.scanned),
            (Some(0), 0),
            "page 0 still copies"
        );
        assert!(lane.finish(0, Some(10), page(3), &mut counters));
        assert_eq!(
            (lane.safe, counters.scanned, counters.copied),
            (None, 15, 15)
        );
        assert_eq!(lane.in_flight(), 0);
    }
}
