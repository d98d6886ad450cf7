//! The keys double-write secondaries missed: each failed background write (failed, timed out, refused, or
//! dropped by a full queue) names its keys here, per tenant and secondary resource, in a record bounded in keys
//! and bytes and deduplicated; the repair (`repair`) takes them off once the secondary holds what the primary
//! holds. A write whose keys cannot be named, or a record that overflows, asks for a catch-up instead (every key
//! of the tenant compared).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::cmd::{self, Command};
use crate::resp;

pub(crate) mod divergence;
mod journal;

use journal::{Journal, JournalDir};

/// Most keys recorded per tenant and secondary before the record overflows into a catch-up of every key.
pub(crate) const MAX_MISSED_KEYS: usize = 100_000;

/// Most bytes of key names recorded per tenant and secondary (the same overflow beyond).
pub(crate) const MAX_MISSED_BYTES: usize = 32 * 1024 * 1024;

/// A key as recorded: the database the client wrote it in (0: the resources' own), and its name as stored
/// (with the tenant's namespace prefix, when it has one).
pub(crate) type MissedKey = (u32, Bytes);

/// Why every key of the tenant must be compared rather than the recorded ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatchUp {
    /// More keys were missed than the record holds.
    Overflow,
    /// A failed write whose keys the gateway cannot name (a keyless write such as `FLUSHDB`, or one that reaches
    /// another database: `MOVE`, `COPY ... DB`, `SWAPDB`).
    UnnamedKeys,
    /// The secondary came back with less than it had (its `run_id` or replication id changed).
    Restarted,
}

impl CatchUp {
    /// Its byte in a record's file (see `journal`).
    fn code(self) -> u8 {
        match self {
            CatchUp::Overflow => b'o',
            CatchUp::UnnamedKeys => b'u',
            CatchUp::Restarted => b'r',
        }
    }

    fn from_code(code: u8) -> Option<CatchUp> {
        [CatchUp::Overflow, CatchUp::UnnamedKeys, CatchUp::Restarted]
            .into_iter()
            .find(|why| why.code() == code)
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            CatchUp::Overflow => "overflow",
            CatchUp::UnnamedKeys => "unnamed_keys",
            CatchUp::Restarted => "secondary_restarted",
        }
    }
}

/// One tenant's missed keys on one secondary resource, and the repair's counters for them.
pub(crate) struct Missed {
    pub tenant: String,
    pub resource: String,
    pending: Mutex<Pending>,
    /// Keys made equal on the secondary by a repair.
    pub repaired: AtomicU64,
    /// Repairs the secondary refused or that failed while it answered.
    pub failures: AtomicU64,
    /// Times the record overflowed its bound.
    pub overflows: AtomicU64,
    /// Catch-ups (every key compared) started.
    pub catch_ups: AtomicU64,
    /// Keys a catch-up compared so far.
    pub scanned: AtomicU64,
}

#[derive(Default)]
pub(crate) struct Pending {
    pub keys: HashSet<MissedKey>,
    bytes: usize,
    /// Keys whose last comparison found the copies different (measured divergence).
    pub differing: HashSet<MissedKey>,
    /// A catch-up is owed, and why; `generation` tells one asked during a running catch-up from the one it serves.
    pub catch_up: Option<CatchUp>,
    pub generation: u64,
    /// The record's file, with `--state-dir`.
    journal: Option<Journal>,
    /// Keys were taken off since the file was last rewritten.
    dirty: bool,
}

impl Missed {
    pub(crate) fn new(tenant: &str, resource: &str) -> Missed {
        Missed {
            tenant: tenant.to_string(),
            resource: resource.to_string(),
            pending: Mutex::default(),
            repaired: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            catch_ups: AtomicU64::new(0),
            scanned: AtomicU64::new(0),
        }
    }

    pub(crate) fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the keys of every request in `raw` (requests back to back, as sent to the secondary) that was
    /// written in database `db`.
    pub(crate) fn record_requests(&self, db: u32, raw: &[u8]) {
        for request in resp::each_request(raw) {
            self.record_request(db, request);
        }
    }

    /// Records the keys of one request that did not reach the secondary; a request whose keys cannot be named
    /// asks for a catch-up instead.
    pub(crate) fn record_request(&self, db: u32, request: &[u8]) {
        let args: Vec<Bytes> = resp::request_args(request)
            .map(Bytes::copy_from_slice)
            .collect();
        let mut indices = Vec::new();
        let named = cmd::lookup(&args).is_ok_and(|spec| {
            spec.key_indices(&args, &mut indices).is_ok()
                && !indices.is_empty()
                && !reaches_other_databases(spec.id, &args)
        });
        if !named {
            self.ask_catch_up(CatchUp::UnnamedKeys);
            return;
        }
        let mut pending = self.pending();
        for index in indices {
            if let Some(key) = args.get(index) {
                pending.insert(self, (db, key.clone()));
            }
        }
    }

    /// Asks for every key of the tenant to be compared, the record of single keys being then of no use.
    pub(crate) fn ask_catch_up(&self, why: CatchUp) {
        self.pending().catch_up(self, why);
    }

    /// Takes a key off the record: the copies were found equal.
    pub(crate) fn settled(&self, key: &MissedKey) {
        let mut pending = self.pending();
        if pending.keys.remove(key) {
            pending.bytes = pending.bytes.saturating_sub(key.1.len());
            pending.dirty = true;
        }
        pending.differing.remove(key);
    }

    /// Rewrites the record's file once keys were taken off it (see `journal`).
    pub(crate) fn compact(&self) {
        let mut pending = self.pending();
        if !pending.dirty {
            return;
        }
        pending.dirty = false;
        let Pending {
            keys,
            catch_up,
            journal,
            ..
        } = &mut *pending;
        if let Some(journal) = journal {
            journal.rewrite(keys.iter(), *catch_up);
        }
    }

    /// Notes whether the copies of `key` differed when last compared.
    pub(crate) fn compared(&self, key: &MissedKey, differ: bool) {
        let mut pending = self.pending();
        match differ {
            true => pending.differing.insert(key.clone()),
            false => pending.differing.remove(key),
        };
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

impl Pending {
    /// Asks for a catch-up (counted and logged when none was asked yet); a catch-up running then runs again.
    pub(crate) fn catch_up(&mut self, missed: &Missed, why: CatchUp) {
        if self.catch_up.is_none() {
            Missed::add(&missed.catch_ups, 1);
            tracing::warn!(tenant = %missed.tenant, resource = %missed.resource, reason = why.label(),
                "double-write repair: every key of the tenant will be compared with the primary");
        }
        if self.catch_up != Some(CatchUp::Overflow) {
            self.catch_up = Some(why);
            if let Some(journal) = &mut self.journal {
                journal.catch_up(why);
            }
        }
        self.generation += 1;
    }

    /// A catch-up is done: taken off the record unless another was asked since it started (`generation`).
    pub(crate) fn caught_up(&mut self, generation: u64) {
        if self.generation == generation {
            self.catch_up = None;
            self.dirty = true;
        }
    }

    /// Adds a key unless the record is full, which then overflows into a catch-up.
    pub(crate) fn insert(&mut self, missed: &Missed, key: MissedKey) {
        if self.catch_up == Some(CatchUp::Overflow) {
            // The catch-up compares every key; one missed after it passed the key runs it again.
            self.generation += 1;
            return;
        }
        if self.keys.contains(&key) {
            return;
        }
        if self.keys.len() >= MAX_MISSED_KEYS || self.bytes + key.1.len() > MAX_MISSED_BYTES {
            Missed::add(&missed.overflows, 1);
            tracing::warn!(tenant = %missed.tenant, resource = %missed.resource, keys = self.keys.len(),
                "double-write repair: the record of missed keys is full");
            self.keys.clear();
            self.bytes = 0;
            self.dirty = true;
            self.catch_up(missed, CatchUp::Overflow);
            return;
        }
        self.bytes += key.1.len();
        if let Some(journal) = &mut self.journal {
            journal.key(&key);
        }
        self.keys.insert(key);
    }
}

/// Whether a write changes keys of another database than its own, which the record of (database, key) cannot
/// name: `MOVE`, `COPY ... DB`, `SWAPDB`.
fn reaches_other_databases(command: Command, args: &[Bytes]) -> bool {
    match command {
        Command::Move | Command::Swapdb => true,
        Command::Copy => args
            .iter()
            .skip(3)
            .any(|arg| arg.eq_ignore_ascii_case(b"db")),
        _ => false,
    }
}

/// Every tenant's record of missed keys, by tenant and secondary resource: shared by the workers that record and
/// the task that repairs.
#[derive(Default)]
pub(crate) struct Repairs {
    book: Mutex<BTreeMap<(String, String), Arc<Missed>>>,
    /// Where the records are kept on disk, with `--state-dir`.
    dir: std::sync::OnceLock<JournalDir>,
}

/// One tenant's repair figures on one secondary, for `/metrics`.
pub(crate) struct RepairFigures {
    pub tenant: String,
    pub resource: String,
    pub pending: i64,
    pub differing: i64,
    pub catching_up: bool,
    pub repaired: i64,
    pub failures: i64,
    pub overflows: i64,
    pub catch_ups: i64,
    pub scanned: i64,
}

impl Repairs {
    /// The record of `tenant`'s keys that the secondary `resource` missed.
    pub(crate) fn missed(&self, tenant: &str, resource: &str) -> Arc<Missed> {
        let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let entry = book
            .entry((tenant.to_string(), resource.to_string()))
            .or_insert_with(|| {
                let missed = Missed::new(tenant, resource);
                if let Some(dir) = self.dir.get() {
                    match dir.create(tenant, resource) {
                        Ok(journal) => missed.pending().journal = Some(journal),
                        Err(e) => tracing::warn!(%tenant, %resource, error = %e,
                            "cannot create the record of missed keys on disk; it would not outlive a restart"),
                    }
                }
                Arc::new(missed)
            });
        Arc::clone(entry)
    }

    /// Keeps the records in `<state_dir>/repair` from now on, and takes back those a gateway left there.
    pub(crate) fn keep_in(&self, state_dir: &std::path::Path) -> std::io::Result<()> {
        let dir = JournalDir::open(state_dir)?;
        let loaded = dir.load()?;
        let _ = self.dir.set(dir);
        let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        for record in loaded {
            if record.keys.is_empty() && record.catch_up.is_none() {
                continue;
            }
            let missed = Missed::new(&record.tenant, &record.resource);
            {
                let mut pending = missed.pending();
                for key in record.keys {
                    pending.insert(&missed, key);
                }
                if let Some(why) = record.catch_up {
                    pending.catch_up(&missed, why);
                }
                // Rewritten at the first round: duplicates and cut entries go.
                pending.journal = Some(record.journal);
                pending.dirty = true;
            }
            tracing::info!(tenant = %record.tenant, resource = %record.resource,
                keys = missed.pending().keys.len(), "double-write repair: missed keys taken back from disk");
            book.insert((record.tenant, record.resource), Arc::new(missed));
        }
        Ok(())
    }

    /// Every record, in tenant and resource order.
    pub(crate) fn all(&self) -> Vec<Arc<Missed>> {
        let book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        book.values().cloned().collect()
    }

    /// The figures of every record.
    pub(crate) fn figures(&self) -> Vec<RepairFigures> {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as i64;
        self.all()
            .iter()
            .map(|missed| {
                let pending = missed.pending();
                RepairFigures {
                    tenant: missed.tenant.clone(),
                    resource: missed.resource.clone(),
                    pending: pending.keys.len() as i64,
                    differing: pending.differing.len() as i64,
                    catching_up: pending.catch_up.is_some(),
                    repaired: load(&missed.repaired),
                    failures: load(&missed.failures),
                    overflows: load(&missed.overflows),
                    catch_ups: load(&missed.catch_ups),
                    scanned: load(&missed.scanned),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(args: &[&str]) -> Vec<u8> {
        let mut out = bytes::BytesMut::new();
        resp::command(&mut out, args);
        out.to_vec()
    }

    fn keys(missed: &Missed) -> Vec<MissedKey> {
        let mut keys: Vec<MissedKey> = missed.pending().keys.iter().cloned().collect();
        keys.sort();
        keys
    }

    #[test]
    fn failed_writes_record_their_keys_once_and_unnamed_ones_ask_for_a_catch_up() {
        let missed = Missed::new("t", "redis://h:1/0");
        let mut run = request(&["MSET", "a", "1", "b", "2"]);
        run.extend(request(&["SET", "a", "3"]));
        missed.record_requests(2, &run);
        let named = [(2, Bytes::from_static(b"a")), (2, Bytes::from_static(b"b"))];
        assert_eq!(keys(&missed), named);
        assert_eq!(missed.pending().catch_up, None);
        for unnamed in [
            &["FLUSHDB"][..],
            &["MOVE", "a", "1"],
            &["COPY", "a", "b", "DB", "1"],
        ] {
            let missed = Missed::new("t", "r");
            missed.record_request(0, &request(unnamed));
            assert_eq!(
                missed.pending().catch_up,
                Some(CatchUp::UnnamedKeys),
                "{unnamed:?}"
            );
        }
        let copy = Missed::new("t", "r");
        copy.record_request(0, &request(&["COPY", "a", "b", "REPLACE"]));
        assert_eq!(copy.pending().catch_up, None);
        assert_eq!(keys(&copy).len(), 2);
    }

    #[test]
    fn a_full_record_overflows_into_a_catch_up() {
        let missed = Missed::new("t", "r");
        let mut pending = missed.pending();
        for i in 0..=MAX_MISSED_KEYS {
            pending.insert(&missed, (0, Bytes::from(format!("k{i}"))));
        }
        assert!(pending.keys.is_empty());
        assert_eq!(pending.catch_up, Some(CatchUp::Overflow));
        drop(pending);
        assert_eq!(missed.overflows.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn records_on_disk_are_taken_back_by_the_next_gateway() {
        let dir = std::env::temp_dir().join(format!("switchyard-missed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = Repairs::default();
        first.keep_in(&dir).unwrap();
        assert!(
            Repairs::default().keep_in(&dir).is_err(),
            "the directory is locked"
        );
        let missed = first.missed("t", "r");
        missed.record_request(1, &request(&["SET", "a", "1"]));
        missed.record_request(1, &request(&["DEL", "b", "c"]));
        missed.settled(&(1, Bytes::from_static(b"c")));
        missed.compact();
        missed.record_request(0, &request(&["FLUSHDB"]));
        drop((missed, first));

        let second = Repairs::default();
        second.keep_in(&dir).unwrap();
        let back = second.missed("t", "r");
        let expected = [(1, Bytes::from_static(b"a")), (1, Bytes::from_static(b"b"))];
        assert_eq!(keys(&back), expected);
        assert_eq!(back.pending().catch_up, Some(CatchUp::UnnamedKeys));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
