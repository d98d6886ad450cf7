//! A tenant's figures as INFO shows them: counters that INFO reads from the tenant's last `CONFIG RESETSTAT`
//! while Prometheus sees them grow for ever (a tenant must not reset the operator's metrics), and the error
//! replies by their prefix (`errorstats`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::resp;

/// A counter with the value it had at the tenant's last `CONFIG RESETSTAT`.
#[derive(Default)]
pub(crate) struct Stat {
    total: AtomicU64,
    at_reset: AtomicU64,
}

impl Stat {
    #[inline]
    pub(crate) fn add(&self, count: u64) {
        self.total.fetch_add(count, Ordering::Relaxed);
    }

    /// Everything counted (Prometheus).
    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// What was counted since the last reset (INFO).
    pub(crate) fn since_reset(&self) -> u64 {
        self.total()
            .saturating_sub(self.at_reset.load(Ordering::Relaxed))
    }

    pub(crate) fn reset(&self) {
        self.at_reset.store(self.total(), Ordering::Relaxed);
    }
}

/// Error prefixes counted at most: beyond them a new prefix counts in `total_error_replies` only (a tenant's
/// scripts may make up any number of them; Redis 7.2 bounds them the same way).
const MAX_ERROR_KINDS: usize = 128;

/// Error replies written to the tenant's clients: in all, and by prefix.
#[derive(Default)]
pub(crate) struct ErrorStats {
    pub total: Stat,
    kinds: Mutex<BTreeMap<String, u64>>,
}

impl ErrorStats {
    /// Counts the error replies among `replies` (one reply, or a run's replies back to back): called only for
    /// replies that may hold one, so that the lock and the scan are on the error path only.
    pub(crate) fn count(&self, replies: &[u8]) {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        for reply in resp::each_reply(replies) {
            let Some(error) = reply.strip_prefix(b"-") else {
                continue;
            };
            self.total.add(1);
            let kind = String::from_utf8_lossy(prefix(error));
            if let Some(count) = kinds.get_mut(kind.as_ref()) {
                *count += 1;
            } else if kinds.len() < MAX_ERROR_KINDS {
                kinds.insert(kind.into_owned(), 1);
            }
        }
    }

    /// `errorstat_<prefix>:count=N` lines, by prefix.
    pub(crate) fn lines(&self) -> String {
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        kinds
            .iter()
            .map(|(kind, count)| format!("errorstat_{kind}:count={count}\r\n"))
            .collect()
    }

    pub(crate) fn reset(&self) {
        self.total.reset();
        self.kinds.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// An error's prefix as Redis takes it: its first word when a space comes within the reply's first 32 bytes (`-`
/// included), else `ERR`.
fn prefix(error: &[u8]) -> &[u8] {
    let line = &error[..error.len().saturating_sub(2)];
    match line.iter().take(31).position(|&b| b == b' ') {
        Some(end) => &line[..end],
        None => b"ERR",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_counted_by_prefix_and_reset() {
        let stats = ErrorStats::default();
        stats.count(b"-ERR unknown command 'x'\r\n");
        stats.count(b"+OK\r\n-WRONGTYPE Operation against a key\r\n:1\r\n-ERR syntax error\r\n");
        stats.count(b"-NOSPACEHEREATALL\r\n");
        assert_eq!(stats.total.since_reset(), 4);
        assert_eq!(
            stats.lines(),
            "errorstat_ERR:count=3\r\nerrorstat_WRONGTYPE:count=1\r\n"
        );
        stats.reset();
        assert_eq!((stats.total.since_reset(), stats.total.total()), (0, 4));
        assert_eq!(stats.lines(), "");
    }

    #[test]
    fn error_kinds_are_bounded() {
        let stats = ErrorStats::default();
        for i in 0..MAX_ERROR_KINDS + 10 {
            stats.count(format!("-E{i} x\r\n").as_bytes());
        }
        assert_eq!(stats.total.since_reset(), MAX_ERROR_KINDS as u64 + 10);
        assert_eq!(stats.lines().lines().count(), MAX_ERROR_KINDS);
    }
}
