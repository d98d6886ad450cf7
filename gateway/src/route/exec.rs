//! `EXEC` along a route: where a transaction runs (the shared connection to its node, or a dedicated one), who it
//! runs as, and, under double-write, how its writes reach each secondary once it ran on the primary.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::{Dedicated, Place, ResolvedRoute, Tenant};
use crate::backend::Keyspace;
use crate::backend::dedicated::Wait;
use crate::backend::identity::{self, RunAs};
use crate::cmd::{CommandSpec, flag};
use crate::reply::{ReplyHandle, Transform};
use crate::resp::Request;

const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
const EXEC: &[u8] = b"*1\r\n$4\r\nEXEC\r\n";

/// A transaction as `EXEC` runs it.
pub(crate) struct Exec<'a> {
    pub tenant: &'a Tenant,
    /// The commands queued since `MULTI`, checked and narrowed.
    pub queued: &'a [(&'static CommandSpec, Request)],
    /// Where its keys live (or the watched keys').
    pub place: Place,
    /// Keeps the client's commands on one shared connection (see `Dispatch::affinity`).
    pub affinity: usize,
}

impl ResolvedRoute {
    /// Whether `EXEC` rides the shared connection to the transaction's node: no keys are watched (the watching
    /// connection holds them) and the node is known.
    pub(crate) fn exec_rides_shared(&self, place: Place, watching: bool) -> bool {
        !watching && self.primary(place.0).is_ok()
    }

    /// Runs a transaction: `MULTI`, the queued commands and `EXEC` in one piece, and only `EXEC`'s reply to the
    /// client, in the slot `reserve` opens with the route's own rewrite of it (the replication to double-write
    /// secondaries). Without `WATCH` and without a script it rides the shared connection to its node, queued back
    /// to back so nothing comes between them, and on a cluster no redirect splits them. Otherwise it goes on the
    /// watching connection, or on one of its own (`open`), which is returned: the session holds it until the
    /// reply is written. A transaction with a script runs as the script's user from `MULTI` on, since Redis checks
    /// each command's permissions when it is queued. An error is the client's reply.
    pub(crate) fn exec(
        &self,
        exec: Exec<'_>,
        watching: Option<Dedicated>,
        open: impl FnOnce() -> Result<Dedicated, Bytes>,
        reserve: impl FnOnce(Option<Transform>) -> ReplyHandle,
    ) -> Result<Option<Dedicated>, Bytes> {
        let run_as = run_as(&exec);
        let shared = match (&run_as, &watching) {
            (RunAs::Gateway, None) => self.primary(exec.place.0).ok().cloned(),
            _ => None,
        };
        let dedicated = match (shared.is_some(), watching) {
            (true, _) => None,
            (false, Some(watching)) => Some(watching),
            (false, None) => Some(open()?),
        };
        let reply = reserve(self.replicate_after_exec(&exec));
        let (multi, exec_command) = (Bytes::from_static(MULTI), Bytes::from_static(EXEC));
        if let Some(upstream) = shared {
            let (slot, affinity) = (exec.place.1, exec.affinity);
            upstream.send_unredirected(multi, slot, ReplyHandle::discard(), affinity);
            for (_, command) in exec.queued {
                let raw = command.raw().clone();
                upstream.send_unredirected(raw, slot, ReplyHandle::discard(), affinity);
            }
            upstream.send_unredirected(exec_command, slot, reply, affinity);
            return Ok(None);
        }
        let Some(held) = dedicated else {
            return Ok(None);
        };
        let connection = held.connection();
        if let Some(refusal) = identity::refusal(connection.node(), &run_as) {
            reply.failed(refusal);
            return Ok(Some(held));
        }
        let mut raw = BytesMut::new();
        let mut replies = Vec::new();
        if run_as != RunAs::Gateway {
            // A connection of its own: a tenant's restricted user is created on it (see `identity`), before the
            // connection's handshake has told whether the node checks RESTORE payloads: made as for one that
            // does not.
            let switch = identity::switch_to(connection.node(), &run_as, false, false, &mut raw);
            replies.extend((0..switch).map(|_| ReplyHandle::discard()));
        }
        raw.extend_from_slice(&multi);
        replies.push(ReplyHandle::discard());
        for (_, command) in exec.queued {
            raw.extend_from_slice(command.raw());
            replies.push(ReplyHandle::discard());
        }
        raw.extend_from_slice(&exec_command);
        replies.push(reply);
        let wait = match run_as {
            RunAs::Gateway => Wait::Bounded,
            run_as => Wait::Script {
                limit: Duration::from_millis(u64::from(exec.tenant.limits.script_limit_ms())),
                kill: run_as.is_tenants(),
            },
        };
        connection.send(raw.freeze(), replies, wait);
        Ok(Some(held))
    }

    /// Under double-write: what sends the transaction's writes to the secondaries once `EXEC` succeeded, each
    /// in its own database numbers (`RoutePlan::request_for`), in the background as other writes with ack
    /// `primary` are.
    fn replicate_after_exec(&self, exec: &Exec<'_>) -> Option<Transform> {
        let secondaries = self.secondaries(exec.place.0);
        if secondaries.is_empty() {
            return None;
        }
        let tenant = exec.tenant;
        let script_limit_ms = tenant.limits.script_limit_ms();
        let copies: Vec<_> = secondaries
            .into_iter()
            .map(|(index, upstream, detached)| {
                let writes: Vec<(&'static str, RunAs, Bytes)> = exec
                    .queued
                    .iter()
                    .filter(|(spec, _)| !spec.has(flag::READONLY))
                    .map(|(spec, request)| {
                        (
                            spec.name,
                            identity::run_as(spec, &tenant.scripts_run_as),
                            tenant.route.request_for(spec, request, exec.place.0, index),
                        )
                    })
                    .collect();
                (upstream, detached, writes)
            })
            .collect();
        let (slot, affinity) = (exec.place.1, exec.affinity);
        Some(Box::new(move |reply: Bytes| {
            // An array is a transaction that ran; `*-1` one that WATCH aborted, an error one that never ran.
            if reply.starts_with(b"*") && !reply.starts_with(b"*-1") {
                let keyspace = slot.map_or(Keyspace::Any, Keyspace::Slot);
                for (upstream, detached, writes) in &copies {
                    for (name, run_as, raw) in writes {
                        if let Some(handle) = detached.admit(name, raw) {
                            let handle = handle.running_as(run_as.clone(), script_limit_ms);
                            upstream.send_to(raw.clone(), keyspace.clone(), handle, affinity);
                        }
                    }
                }
            }
            reply
        }))
    }
}

/// Who a transaction runs as: the user of its first script, if it holds one.
fn run_as(exec: &Exec<'_>) -> RunAs {
    exec.queued
        .iter()
        .map(|(spec, _)| identity::run_as(spec, &exec.tenant.scripts_run_as))
        .find(|run_as| *run_as != RunAs::Gateway)
        .unwrap_or_default()
}
