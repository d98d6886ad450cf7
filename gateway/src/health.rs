//! What the gateway knows of a backend node's state without asking it, for the `PING` it answers itself: whether
//! the node is busy running a script.
//!
//! Redis runs one script at a time; a script written on one of the node's shared connections and not answered
//! yet runs there or waits behind the one that does. Once a script has run for the node's
//! `busy-reply-threshold` (read at connect, 5 s by default), Redis answers every other client `BUSY`, and so does
//! the gateway's `PING` (see `session::health`). Counting costs only scripts: two atomic operations when one is
//! written and when it is answered; `PING` looks further only while some script runs somewhere
//! ([`SCRIPTS_RUNNING`]).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

/// Scripts in flight on every node, gateway-wide: while 0, `PING` has nothing to look at.
pub(crate) static SCRIPTS_RUNNING: AtomicU32 = AtomicU32::new(0);

/// Redis' default `busy-reply-threshold`, for a node whose own cannot be read.
const DEFAULT_THRESHOLD_MS: u64 = 5000;

/// One node's scripts in flight, summed over workers (held by its `BackendMetrics`).
pub(crate) struct RunningScripts {
    count: AtomicU32,
    /// When the script the node runs now started ([`millis`]).
    since: AtomicU64,
    /// Whether that one is a function (whose `BUSY` names `FUNCTION KILL`).
    function: AtomicBool,
    /// The node's `busy-reply-threshold`, in milliseconds.
    threshold: AtomicU64,
}

impl Default for RunningScripts {
    fn default() -> RunningScripts {
        RunningScripts {
            count: AtomicU32::new(0),
            since: AtomicU64::new(0),
            function: AtomicBool::new(false),
            threshold: AtomicU64::new(DEFAULT_THRESHOLD_MS),
        }
    }
}

impl RunningScripts {
    /// A script (`function`: a function call) was written to the node. The first in flight starts now; the
    /// others wait for it on the node.
    pub(crate) fn started(&self, function: bool) {
        SCRIPTS_RUNNING.fetch_add(1, Ordering::Relaxed);
        if self.count.fetch_add(1, Ordering::AcqRel) == 0 {
            self.function.store(function, Ordering::Relaxed);
            self.since.store(millis(), Ordering::Release);
        }
    }

    /// A script's reply came (or the gateway gave up on it): the next one in flight, if any, runs from now.
    pub(crate) fn finished(&self) {
        SCRIPTS_RUNNING.fetch_sub(1, Ordering::Relaxed);
        if self.count.fetch_sub(1, Ordering::AcqRel) > 1 {
            self.since.store(millis(), Ordering::Release);
        }
    }

    /// The node's `busy-reply-threshold`, as a handshake read it.
    pub(crate) fn set_threshold(&self, millis: u64) {
        self.threshold.store(millis, Ordering::Relaxed);
    }

    /// `Some(function)` while a script has run on the node for its `busy-reply-threshold`, so that the node
    /// answers `BUSY`.
    pub(crate) fn busy(&self) -> Option<bool> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let ran = millis().saturating_sub(self.since.load(Ordering::Acquire));
        (ran >= self.threshold.load(Ordering::Relaxed))
            .then(|| self.function.load(Ordering::Relaxed))
    }
}

/// Redis' reply to a command while a script (`function`: a function) keeps the node busy.
pub(crate) fn busy_text(function: bool) -> String {
    let kill = if function { "FUNCTION" } else { "SCRIPT" };
    format!(
        "BUSY Redis is busy running a script. You can only call {kill} KILL or SHUTDOWN NOSAVE."
    )
}

/// Milliseconds since the gateway's first look at the time.
fn millis() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_busy_once_its_script_passed_the_threshold_until_every_script_answered() {
        let scripts = RunningScripts::default();
        assert_eq!(scripts.busy(), None);
        scripts.set_threshold(0);
        scripts.started(true);
        scripts.started(false);
        assert_eq!(scripts.busy(), Some(true));
        scripts.finished();
        assert!(scripts.busy().is_some(), "the second one runs now");
        scripts.set_threshold(60_000);
        assert_eq!(scripts.busy(), None, "but not for its threshold yet");
        scripts.finished();
        scripts.set_threshold(0);
        assert_eq!(scripts.busy(), None);
    }
}
