//! What a cluster node's error reply asks for: `MOVED`, `ASK` and `TRYAGAIN` followed, and a run with an error
//! taken apart.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;

use super::{ClusterBackend, MAX_REDIRECTS};
use crate::backend::Backend;
use crate::reply::{Combine, Redirect, Redirector, ReplyHandle, RunAs};
use crate::resp;
use switchyard_schemas::placement::{SLOTS, slot_of};

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
        self.topology.schedule_refresh();
    }

    /// An error reply to a request the gateway runs as itself, whose error replies are Redis' own: followed,
    /// once the node it names is known to be a member.
    fn on_error(&self, reply: Bytes, handle: ReplyHandle, redirect: Redirect) {
        if redirect.count > 1 {
            return self.split_run(reply, handle, redirect);
        }
        // A script's reply comes through its `PayloadSent`; should one ever come here, it is not Redis' word.
        let Some(me) = self.me.upgrade().filter(|_| !handle.reply_is_payload()) else {
            return handle.deliver(reply);
        };
        let kind = classify(&reply);
        if let Some(too_many) = too_many_redirects(&kind, &reply, redirect.attempts) {
            return handle.deliver(too_many);
        }
        let stranger = match kind {
            ClusterError::Moved { addr, .. } | ClusterError::Ask { addr }
                if !self.is_member(addr) =>
            {
                addr.to_string()
            }
            _ => return self.follow(me, kind, &reply, handle, redirect),
        };
        // A node the topology does not name yet (a master just added, importing its first slots): no connection
        // to it before a known node lists it.
        tokio::task::spawn_local(async move {
            match me.confirms_member(&stranger).await {
                true => me.on_error(reply, handle, redirect),
                false => handle.deliver(not_a_member(&stranger, &reply)),
            }
        });
    }
}

/// The redirector of a request whose reply is payload (a script's, see `ReplyHandle::reply_is_payload`), which
/// knows where the request went: a redirect in such a reply may be the script's own text, so it is followed only
/// once the cluster itself confirms it (see [`ClusterBackend::on_payload_error`]).
struct PayloadSent {
    cluster: Rc<ClusterBackend>,
    node: Rc<Backend>,
}

impl Redirector for PayloadSent {
    fn on_failure(&self) {
        self.cluster.topology.schedule_refresh();
    }

    fn on_error(&self, reply: Bytes, handle: ReplyHandle, redirect: Redirect) {
        self.cluster
            .on_payload_error(reply, handle, redirect, &self.node);
    }
}

/// Who hears of the error replies to a request sent to `node` with `handle`: the cluster itself, or for a script,
/// a [`PayloadSent`] (one allocation, on the script path only).
pub(super) fn redirector(
    cluster: Rc<ClusterBackend>,
    handle: &ReplyHandle,
    node: &Rc<Backend>,
) -> Rc<dyn Redirector> {
    match handle.reply_is_payload() {
        false => cluster,
        true => Rc::new(PayloadSent {
            cluster,
            node: Rc::clone(node),
        }),
    }
}

/// A script's redirect, and what confirms it.
enum Claim {
    /// `MOVED`: a map read after the reply gives the slot to the node named (see `on_payload_error`).
    Moved { slot: u16, addr: String },
    /// `ASK`: the node the script went to says it is migrating the slot to the node named.
    Ask { slot: u16, addr: String },
}

impl ClusterBackend {
    /// An error reply to a script (or function) sent to `node`. Redis' own `MOVED` and `ASK` come before a
    /// script runs (the cluster's redirection is checked before any command executes), so a genuine one means
    /// the script did not run; but the script may return the same text itself after it ran (`return
    /// redis.error_reply('MOVED ...')`), and the bytes cannot tell the two apart. So the claim is checked against
    /// the cluster: `MOVED` is followed only when it names the request's slot and another node than the one that
    /// answered, and a slot map read afterwards gives the slot to that node (the slot did move); `ASK` only when
    /// it names another node and the answering node's own `CLUSTER NODES` says it is migrating the request's slot
    /// to it. Anything else, `TRYAGAIN` and `CLUSTERDOWN` included, goes to the client as it is: nothing is
    /// resent, no node is connected to and the slot map is left alone. (A script that returns a forged `MOVED`
    /// or `ASK` for its own slot while an operator moves that very slot to the node it names can still be run
    /// again: the cluster then says what the script said.)
    fn on_payload_error(
        &self,
        reply: Bytes,
        handle: ReplyHandle,
        redirect: Redirect,
        node: &Rc<Backend>,
    ) {
        let Some(me) = self.me.upgrade() else {
            return handle.deliver(reply);
        };
        let kind = classify(&reply);
        let answered_by = node.node.addr.as_str();
        let claim = match (&kind, redirect.slot) {
            (ClusterError::Moved { slot, addr }, Some(sent))
                if *slot == sent && *addr != answered_by =>
            {
                Claim::Moved {
                    slot: sent,
                    addr: addr.to_string(),
                }
            }
            (ClusterError::Ask { addr }, Some(slot)) if *addr != answered_by => Claim::Ask {
                slot,
                addr: addr.to_string(),
            },
            _ => return handle.deliver(reply),
        };
        if let Some(too_many) = too_many_redirects(&kind, &reply, redirect.attempts) {
            return handle.deliver(too_many);
        }
        let answered_by = answered_by.to_string();
        tokio::task::spawn_local(async move {
            let confirmed = match &claim {
                Claim::Moved { slot, addr } => {
                    me.topology.fresh_map().await
                        && me.topology.owner_addr(*slot).as_ref() == Some(addr)
                }
                Claim::Ask { slot, addr } => {
                    me.importer_of(&answered_by, *slot).await.as_ref() == Some(addr)
                        && (me.is_member(addr) || {
                            me.learn_members().await;
                            me.is_member(addr)
                        })
                }
            };
            if !confirmed {
                tracing::debug!(node = %answered_by, "cluster: a script's redirect is not the cluster's; passed on");
                return handle.deliver(reply);
            }
            me.follow(Rc::clone(&me), classify(&reply), &reply, handle, redirect);
        });
    }

    /// Follows a redirect that is Redis' own, or that the cluster confirmed, to a member: `MOVED` fixes the slot
    /// in place and resends to its master, `ASK` sends `ASKING` and the request to the importing node, `TRYAGAIN`
    /// resends after a pause, `CLUSTERDOWN` asks for a fresh map.
    fn follow(
        &self,
        me: Rc<ClusterBackend>,
        kind: ClusterError<'_>,
        reply: &Bytes,
        handle: ReplyHandle,
        redirect: Redirect,
    ) {
        let Redirect {
            raw,
            attempts,
            affinity,
            slot,
            ..
        } = redirect;
        let again = |node: &Rc<Backend>, handle: &ReplyHandle, slot| Redirect {
            via: redirector(Rc::clone(&me), handle, node),
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
                self.topology.moved(moved, addr);
                self.topology.schedule_refresh();
                let backend = self.node_at(addr);
                let redirect = again(&backend, &handle, Some(moved));
                backend.send(raw.clone(), handle.with_redirect(redirect), affinity);
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
                let redirect = again(&backend, &handle, slot);
                backend.send(raw.clone(), handle.with_redirect(redirect), affinity);
            }
            ClusterError::TryAgain => {
                let pause = Duration::from_millis(10 << attempts.min(5));
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(pause).await;
                    me.route(slot, raw, 1, handle, affinity, attempts + 1);
                });
            }
            ClusterError::Stale => {
                self.topology.schedule_refresh();
                handle.deliver(reply.clone());
            }
            ClusterError::Other => handle.deliver(reply.clone()),
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

/// The client's error once a request has followed `MAX_REDIRECTS` redirects and gets another.
fn too_many_redirects(kind: &ClusterError<'_>, reply: &[u8], attempts: u8) -> Option<Bytes> {
    let redirecting = matches!(
        kind,
        ClusterError::Moved { .. } | ClusterError::Ask { .. } | ClusterError::TryAgain
    );
    (redirecting && attempts >= MAX_REDIRECTS).then(|| {
        let line = String::from_utf8_lossy(reply);
        let last = line.trim_start_matches('-').trim_end();
        resp::error_reply(&format!("ERR too many cluster redirects (last: {last})"))
    })
}

/// The client's error for a redirect to a node that no known member lists (logged as a warning).
pub(crate) fn not_a_member(stranger: &str, reply: &[u8]) -> Bytes {
    tracing::warn!(node = %stranger, "cluster: a redirect names a node that is not a member");
    let line = String::from_utf8_lossy(reply);
    let redirect = line.trim_start_matches('-').trim_end();
    resp::error_reply(&format!(
        "ERR cluster redirect to a node that is not a member of the cluster ({redirect})"
    ))
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
