//! Why the gateway answers a request with an error of its own instead of a reply from Redis: on which side the
//! request failed (the client's request, the gateway, a backend node), whether sending it again is safe (nothing
//! of it ran), and the error text the client gets, rendered here and nowhere else (`Failure::reply`).
//!
//! Every failed request is counted by side and retry safety ([`failed_requests`], exported as
//! `switchyard_failed_requests_total`): after an incident, the requests that may have run without their
//! client learning so are the ones with `retry_safe="false"`.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::resp;

/// Where a request's failure lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The request cannot be served as asked: the tenant's rules, its route's shape, Redis' own rules
    /// (`CROSSSLOT`) or a limit refuse it before it goes anywhere.
    Client,
    /// The gateway cannot serve it now (no routes yet): nothing was sent.
    Gateway,
    /// A backend node did not serve it.
    Backend,
}

impl Side {
    const ALL: [Side; 3] = [Side::Client, Side::Gateway, Side::Backend];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Gateway => "gateway",
            Side::Backend => "backend",
        }
    }
}

/// A request's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Refused before it went anywhere (see `Side::Client`), with Redis' error text where Redis has one.
    Refused(Cow<'static, str>),
    /// The gateway cannot serve it now (see `Side::Gateway`).
    Gateway(&'static str),
    /// Backend node `node` did not serve it, for `reason`; `ran`: it was written to the node and no reply came
    /// (a timeout, a lost connection, a reply that cannot be read), so it may have run there.
    Backend {
        node: String,
        reason: String,
        ran: bool,
    },
}

impl Failure {
    /// A refusal in Redis' words (the whole error text, prefix included).
    pub(crate) fn refused(text: impl Into<Cow<'static, str>>) -> Failure {
        Failure::Refused(text.into())
    }

    /// A request backend `node` did not serve, for `reason`; `ran`: it may have run there.
    pub(crate) fn backend(
        node: impl fmt::Display,
        reason: impl fmt::Display,
        ran: bool,
    ) -> Failure {
        Failure::Backend {
            node: node.to_string(),
            reason: reason.to_string(),
            ran,
        }
    }

    /// Requests `node` was never sent: its connection is down, or was lost before they were written.
    pub(crate) fn unavailable(node: impl fmt::Display, reason: impl fmt::Display) -> Failure {
        Failure::backend(node, format_args!("unavailable: {reason}"), false)
    }

    /// Requests written to `node` that got no reply, for `reason` (`timed out after 5 ms`, `connection lost:
    /// ...`): they may have run.
    pub(crate) fn lost(node: impl fmt::Display, reason: impl fmt::Display) -> Failure {
        Failure::backend(node, reason, true)
    }

    /// The same failure, for requests that were (`sent`) or were not written to the node: those that were may
    /// have run, whatever the text says (a dedicated connection's requests in flight when it is lost); nothing of
    /// those that were not did (requests queued behind one that timed out).
    pub(crate) fn sent(self, sent: bool) -> Failure {
        match self {
            Failure::Backend { node, reason, .. } => Failure::Backend {
                node,
                reason,
                ran: sent,
            },
            other => other,
        }
    }

    pub(crate) fn side(&self) -> Side {
        match self {
            Failure::Refused(_) => Side::Client,
            Failure::Gateway(_) => Side::Gateway,
            Failure::Backend { .. } => Side::Backend,
        }
    }

    /// Whether sending the request again is safe: nothing of it ran.
    pub(crate) fn retry_safe(&self) -> bool {
        !matches!(self, Failure::Backend { ran: true, .. })
    }

    /// The error reply the client gets.
    pub(crate) fn reply(&self) -> Bytes {
        resp::error_reply(&self.to_string())
    }

    /// Counts `requests` that failed so (see [`failed_requests`]).
    pub(crate) fn count(&self, requests: u64) {
        let at = self.side() as usize * 2 + usize::from(self.retry_safe());
        FAILED[at].fetch_add(requests, Ordering::Relaxed);
    }
}

impl fmt::Display for Failure {
    /// The error text, without the `-` of the reply.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Refused(text) => f.write_str(text),
            Failure::Gateway(text) => f.write_str(text),
            Failure::Backend { node, reason, .. } => write!(f, "ERR backend {node} {reason}"),
        }
    }
}

/// Failed requests, by side and retry safety (`side * 2 + retry_safe`).
static FAILED: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];

/// Requests failed so far: (side, retry safe, count), for every pair.
pub(crate) fn failed_requests() -> impl Iterator<Item = (Side, bool, u64)> {
    Side::ALL.into_iter().flat_map(|side| {
        [false, true].map(|safe| {
            let count = FAILED[side as usize * 2 + usize::from(safe)].load(Ordering::Relaxed);
            (side, safe, count)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_each_failure_as_the_client_sees_it() {
        let down = Failure::unavailable("127.0.0.1:7001", "connection refused");
        assert_eq!(
            &down.reply()[..],
            b"-ERR backend 127.0.0.1:7001 unavailable: connection refused\r\n"
        );
        assert_eq!((down.side(), down.retry_safe()), (Side::Backend, true));
        let lost = Failure::lost("h:1", "timed out after 5 ms");
        assert_eq!(
            &lost.reply()[..],
            b"-ERR backend h:1 timed out after 5 ms\r\n"
        );
        assert!(!lost.retry_safe());
        // Queued behind the request that timed out: the same words, but nothing of it ran.
        let queued = lost.sent(false);
        assert_eq!(
            &queued.reply()[..],
            b"-ERR backend h:1 timed out after 5 ms\r\n"
        );
        assert!(queued.retry_safe());
        let crossslot = Failure::refused("CROSSSLOT Keys in request don't hash to the same slot");
        assert_eq!(
            (crossslot.side(), crossslot.retry_safe()),
            (Side::Client, true)
        );
        assert_eq!(Failure::Gateway("ERR x").side(), Side::Gateway);
    }

    #[test]
    fn counts_by_side_and_retry_safety() {
        let before = |side, safe| {
            failed_requests()
                .find(|&(s, r, _)| s == side && r == safe)
                .map_or(0, |(_, _, count)| count)
        };
        let (lost, unsent) = (before(Side::Backend, false), before(Side::Backend, true));
        Failure::lost("h:1", "connection closed").count(3);
        Failure::unavailable("h:1", "connection refused").count(2);
        assert!(before(Side::Backend, false) >= lost + 3);
        assert!(before(Side::Backend, true) >= unsent + 2);
        assert_eq!(failed_requests().count(), 6);
    }
}
