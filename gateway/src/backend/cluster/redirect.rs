//! What a cluster node's error reply asks for: `MOVED`, `ASK` and `TRYAGAIN` followed, and a run with an error
//! taken apart.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;

use super::{ClusterBackend, MAX_REDIRECTS, SLOTS, slot_of};
use crate::reply::{Combine, Redirect, Redirector, ReplyHandle, RunAs};
use crate::resp;

/// What an error reply from a cluster node asks the gateway to do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClusterError<'a> {
    Moved {
        slot: u16,
        addr: &'a str,
    },
    Ask {
        addr: &'a str,
    },
    TryAgain,
    /// A node or the cluster is unreachable or reconfiguring: the map may be stale.
    Stale,
    Other,
}

pub(crate) fn classify(reply: &[u8]) -> ClusterError<'_> {
    let line = reply.strip_suffix(b"\r\n").unwrap_or(reply);
    let Ok(line) = std::str::from_utf8(line) else {
        return ClusterError::Other;
    };
    let mut words = line.split(' ');
    match words.next() {
        Some("-MOVED") => match (words.next().and_then(|s| s.parse().ok()), words.next()) {
            (Some(slot), Some(addr)) if usize::from(slot) < SLOTS => {
                ClusterError::Moved { slot, addr }
            }
            _ => ClusterError::Other,
        },
        Some("-ASK") => match (words.next(), words.next()) {
            (Some(_), Some(addr)) => ClusterError::Ask { addr },
            _ => ClusterError::Other,
        },
        Some("-TRYAGAIN") => ClusterError::TryAgain,
        Some("-CLUSTERDOWN") => ClusterError::Stale,
        _ => ClusterError::Other,
    }
}

impl Redirector for ClusterBackend {
    fn on_failure(&self) {
        self.schedule_refresh();
    }

    fn on_error(&self, reply: Bytes, handle: ReplyHandle, redirect: Redirect) {
        if redirect.count > 1 {
            return self.split_run(reply, handle, redirect);
        }
        let kind = classify(&reply);
        let redirecting = matches!(
            kind,
            ClusterError::Moved { .. } | ClusterError::Ask { .. } | ClusterError::TryAgain
        );
        if redirecting && redirect.attempts >= MAX_REDIRECTS {
            let line = String::from_utf8_lossy(&reply);
            let last = line.trim_start_matches('-').trim_end();
            return handle.deliver(resp::error_reply(&format!(
                "ERR too many cluster redirects (last: {last})"
            )));
        }
        let Redirect {
            via,
            raw,
            attempts,
            affinity,
            slot,
            ..
        } = redirect;
        let again = |slot| Redirect {
            via: Rc::clone(&via),
            raw: raw.clone(),
            count: 1,
            attempts: attempts + 1,
            affinity,
            slot,
        };
        let affinity = affinity as usize;
        match kind {
            ClusterError::Moved { slot: moved, addr } => {
                tracing::debug!(slot = moved, %addr, "cluster: MOVED");
                self.moved(moved, addr);
                self.schedule_refresh();
                let backend = self.node_at(addr);
                backend.send(
                    raw.clone(),
                    handle.with_redirect(again(Some(moved))),
                    affinity,
                );
            }
            ClusterError::Ask { addr } => {
                tracing::debug!(?slot, %addr, "cluster: ASK");
                // ASKING and the request go out back to back on the same connection, as the protocol requires;
                // a script's ASKING goes after the AUTH that precedes it (see `identity`).
                let backend = self.node_at(addr);
                let handle = match handle.run_as() {
                    RunAs::Gateway => {
                        backend.send(asking(), ReplyHandle::discard(), affinity);
                        handle
                    }
                    _ => handle.after_asking(),
                };
                backend.send(raw.clone(), handle.with_redirect(again(slot)), affinity);
            }
            ClusterError::TryAgain => {
                let Some(me) = self.me.upgrade() else {
                    return handle.deliver(reply);
                };
                let pause = Duration::from_millis(10 << attempts.min(5));
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(pause).await;
                    me.route(slot, raw, 1, handle, affinity, attempts + 1);
                });
            }
            ClusterError::Stale => {
                self.schedule_refresh();
                handle.deliver(reply);
            }
            ClusterError::Other => handle.deliver(reply),
        }
    }
}

impl ClusterBackend {
    /// A run whose replies hold an error: each request gets its reply back separately, so that those refused
    /// with a redirect (or a stale map) can be handled one by one, as if sent alone; the run's reply is then
    /// put together again, in order.
    fn split_run(&self, replies: Bytes, handle: ReplyHandle, redirect: Redirect) {
        let requests: Vec<&[u8]> = resp::each_reply(&redirect.raw).collect();
        let answers: Vec<&[u8]> = resp::each_reply(&replies).collect();
        if requests.len() != redirect.count as usize || answers.len() != requests.len() {
            // A connection answers each request of a run exactly once; anything else is a bug, not a redirect.
            return handle.deliver(resp::error_reply("ERR unexpected reply from a backend"));
        }
        let concat: Combine = Box::new(|parts: Vec<Bytes>| Bytes::from(parts.concat()));
        let parts = handle.split(requests.len(), concat);
        for ((request, answer), part) in requests.into_iter().zip(answers).zip(parts) {
            let answer = replies.slice_ref(answer);
            if answer.first() != Some(&b'-') {
                part.deliver(answer);
                continue;
            }
            let request = redirect.raw.slice_ref(request);
            let slot = first_key_slot(&request);
            self.on_error(
                answer,
                part,
                Redirect {
                    via: Rc::clone(&redirect.via),
                    raw: request,
                    count: 1,
                    attempts: redirect.attempts,
                    affinity: redirect.affinity,
                    slot,
                },
            );
        }
    }
}

fn asking() -> Bytes {
    Bytes::from_static(b"*1\r\n$6\r\nASKING\r\n")
}

/// The slot of a request's first argument after its name: the key of the sub-commands a run holds.
fn first_key_slot(request: &[u8]) -> Option<u16> {
    resp::request_args(request).nth(1).map(slot_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_cluster_errors() {
        assert_eq!(
            classify(b"-MOVED 3999 127.0.0.1:6381\r\n"),
            ClusterError::Moved {
                slot: 3999,
                addr: "127.0.0.1:6381"
            }
        );
        assert_eq!(
            classify(b"-ASK 3999 127.0.0.1:6381\r\n"),
            ClusterError::Ask {
                addr: "127.0.0.1:6381"
            }
        );
        assert_eq!(classify(b"-MOVED 16384 h:1\r\n"), ClusterError::Other);
        assert_eq!(classify(b"-MOVED x\r\n"), ClusterError::Other);
        assert_eq!(
            classify(b"-TRYAGAIN Multiple keys\r\n"),
            ClusterError::TryAgain
        );
        // The gateway's own errors for a node that could not answer are not looked at: the connection tells the
        // cluster backend directly (`Redirector::on_failure`).
        assert_eq!(
            classify(b"-ERR backend h:1 unavailable: connection refused\r\n"),
            ClusterError::Other
        );
        assert_eq!(classify(b"-ERR wrong type\r\n"), ClusterError::Other);
        assert_eq!(classify(b"-\xff\r\n"), ClusterError::Other);
    }

    #[test]
    fn a_sub_command_is_placed_by_its_first_key() {
        let request = b"*3\r\n$3\r\nDEL\r\n$3\r\nfoo\r\n$3\r\n{a}\r\n";
        assert_eq!(first_key_slot(request), Some(slot_of(b"foo")));
        assert_eq!(first_key_slot(b"*1\r\n$4\r\nPING\r\n"), None);
        assert_eq!(first_key_slot(b"*2\r\n$3\r\nGET\r\n$3\r\nfo"), None);
    }
}
