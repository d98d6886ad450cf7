//! The client of a session: who it is (its registry entry, its tenant as one snapshot resolves it), what it asked
//! for (database, protocol, which replies it wants) and where its replies go. Every step and state of the session
//! works on it; the answers the gateway makes itself are written here, as is where a command's keys go and the
//! dedicated connection a command opens there.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::clients::ClientInfo;
use crate::cmd::{self, CommandSpec};
use crate::failure::Failure;
use crate::reply::ReplyQueue;
use crate::resp::{self, Protocol};
use crate::route::{Dedicated, DirectRoute, Opening, Place, ResolvedRoute, Tenant};
use crate::tenant::Lease;
use crate::worker::Worker;
use switchyard_schemas::OutputBufferLimit;

/// The tenant a session is authenticated as, resolved against one snapshot generation.
pub(super) struct TenantView {
    pub(super) tenant: Arc<Tenant>,
    pub(super) generation: u64,
    /// The tenant's route on this worker, for the session's database.
    pub(super) route: ResolvedRoute,
    /// The route's resources, when it is a direct route (see `Session::direct`).
    pub(super) direct: Option<DirectRoute>,
    /// The tenant's near cache, when it has one and its route is one it serves (see `near`).
    pub(super) near: Option<super::near::NearView>,
    /// Digest of the credential the client authenticated with (none for the tenant without passwords): when a
    /// snapshot no longer has it, the connection is closed.
    pub(super) credential: Option<String>,
    /// The connection's place among the tenant's `max_connections`.
    pub(super) place: Lease,
}

/// Which replies a client wants written (`CLIENT REPLY`): the replies it does not want are still awaited, in order,
/// and dropped instead of written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Replying {
    On,
    Off,
    /// None to the next command.
    SkipNext,
}

pub(super) struct Client {
    pub(super) worker: Rc<Worker>,
    pub(super) info: Arc<ClientInfo>,
    pub(super) tenant: Option<TenantView>,
    pub(super) db: u32,
    /// What the client speaks (`HELLO`): its replies, and the backend connections that serve it.
    pub(super) protocol: Protocol,
    pub(super) replies: Rc<ReplyQueue>,
    /// Set by QUIT or a protocol error: answer what was read, then close.
    pub(super) closing: bool,
    /// Key positions of the current command, and where each goes (reused: no allocation per command).
    pub(super) keys: Vec<usize>,
    pub(super) places: Vec<Place>,
    pub(super) commands: cmd::LookupCache,
    /// State of the random read-resource choice.
    pub(super) random: Cell<u64>,
    /// Which replies the client wants written (`CLIENT REPLY`).
    pub(super) replying: Replying,
}

impl Client {
    pub(super) fn local_reply(&self, started: Instant, write: impl FnOnce(&mut BytesMut)) {
        let mut out = BytesMut::new();
        write(&mut out);
        self.replies.push_ready(out.freeze(), started);
    }

    pub(super) fn local_error(&self, started: Instant, text: &str) {
        self.local_reply(started, |out| resp::error(out, text));
    }

    pub(super) fn local_ok(&self, started: Instant) {
        self.local_reply(started, |out| resp::simple(out, b"OK"));
    }

    /// Queues an error reply made elsewhere.
    pub(super) fn local_error_reply(&self, started: Instant, reply: Bytes) {
        self.replies.push_ready(reply, started);
    }

    /// Answers a request that failed (see `failure`), counted.
    pub(super) fn fail(&self, started: Instant, failure: &Failure) {
        failure.count(1);
        self.local_error_reply(started, failure.reply());
    }

    /// Refuses `spec` before running it (INFO's `rejected_calls`): a limit, a refusal of the tenant's rules, a
    /// route that cannot serve it as asked.
    pub(super) fn reject(&self, spec: &CommandSpec, started: Instant, failure: &Failure) {
        if let Some(view) = &self.tenant {
            view.tenant.runtime.counters.commands.reject(spec.id);
        }
        self.fail(started, failure);
    }

    pub(super) fn quit(&mut self, started: Instant) {
        self.local_ok(started);
        self.closing = true;
    }

    /// Sets the connection's name, checked with `valid_name` (an empty one removes it).
    pub(super) fn set_name(&self, name: &[u8]) {
        let name = (!name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned());
        self.info.set_name(name);
    }

    pub(super) fn set_replying(&mut self, replying: Replying) {
        self.replying = replying;
        self.replies.set_muted(replying == Replying::Off);
    }

    /// Mutes the reply of the command about to run if the client asked to skip it (`CLIENT REPLY SKIP`).
    /// Returns whether it did, for `end_skip`.
    pub(super) fn skip_reply(&mut self) -> bool {
        if self.replying != Replying::SkipNext {
            return false;
        }
        self.replying = Replying::On;
        self.replies.set_muted(true);
        true
    }

    /// After a command whose reply `skip_reply` muted: replies are written again, unless the command changed
    /// the reply mode itself; a command `parked` for later is skipped when it goes.
    pub(super) fn end_skip(&mut self, skipped: bool, parked: bool) {
        if skipped && self.replying == Replying::On {
            self.replies.set_muted(false);
            if parked {
                self.replying = Replying::SkipNext;
            }
        }
    }

    /// The bound on what a connection may leave unread, when it receives a stream (subscribed, monitoring) or
    /// not.
    pub(super) fn limit_for(&self, streaming: bool) -> OutputBufferLimit {
        let clients = &self.worker.gateway.config.clients;
        let limits = self.tenant.as_ref().map(|view| &view.tenant.limits);
        if streaming {
            limits
                .and_then(|l| l.pubsub_output_buffer_limit)
                .unwrap_or(clients.pubsub_output_buffer)
        } else {
            limits
                .and_then(|l| l.output_buffer_limit)
                .unwrap_or(clients.output_buffer)
        }
    }

    /// Where every key of a command goes (CROSSSLOT when they disagree; `None` when it has none).
    pub(super) fn place_of(
        &mut self,
        spec: &CommandSpec,
        args: &[Bytes],
    ) -> Result<Option<Place>, String> {
        match &self.tenant {
            Some(view) => view
                .route
                .place_of(&view.tenant.route, spec, args, &mut self.keys),
            None => Ok(None),
        }
    }

    /// Opens a dedicated connection to the primary of `place` (see `ResolvedRoute::open_dedicated`). `pushes`:
    /// the connection delivers pub/sub messages to the reply queue. An error is returned as the reply the client
    /// gets.
    pub(super) fn open_dedicated(&self, place: Place, pushes: bool) -> Result<Dedicated, Bytes> {
        let Some(view) = &self.tenant else {
            return Err(resp::error_reply("ERR no tenant"));
        };
        let gateway = &self.worker.gateway;
        let config = &gateway.config;
        let opening = Opening {
            tenant: &view.tenant,
            budget: &gateway.dedicated,
            spares: &self.worker.spares,
            connect_timeout: config.connect_timeout,
            command_timeout: config.command_timeout,
            max_per_tenant: config.max_dedicated_connections,
            pushes: pushes.then_some(&self.replies),
        };
        view.route.open_dedicated(place, opening)
    }

    /// Whether `connection` goes to the node that serves `place` of the tenant's route.
    pub(super) fn serves(&self, connection: &Dedicated, place: Place) -> Result<bool, Bytes> {
        match &self.tenant {
            Some(view) => connection.serves(&view.route, place),
            None => Err(resp::error_reply("ERR no tenant")),
        }
    }

    /// Whether the tenant's route double-writes the shard of `place`.
    pub(super) fn double_written(&self, place: Place) -> bool {
        self.tenant
            .as_ref()
            .is_some_and(|v| v.route.double_written(place.0))
    }
}

impl Drop for Client {
    /// Whether the session ended or its task panicked: the client leaves the registry and the counts, and replies
    /// that still come for it are dropped.
    fn drop(&mut self) {
        let gateway = &self.worker.gateway;
        self.replies.close();
        self.worker.client_tracking.close_port(self.info.id);
        gateway.clients.remove(self.info.id);
        gateway
            .metrics
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}
