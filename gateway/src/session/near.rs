//! The session's side of its tenant's near cache (`near_cache`): a `GET` the cache holds is answered in its
//! place among the client's replies; a write drops the keys it names from the cache before it is sent, and keeps
//! them from being filled until its reply is in (the client reads its own writes); a write in a transaction or a
//! blocking command, whose replies come another way, does so for every key until every reply of the client is in.
//!
//! A read the cache cannot answer goes on along the steps, in order with the client's other commands; the cache
//! fills the key in the background for the next read.

use std::cell::Cell;
use std::ops::ControlFlow::{self, Continue};
use std::rc::Rc;
use std::sync::Arc;

use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::Session;
use super::steps::Command;
use crate::backend::Backend;
use crate::cmd::{self, CommandSpec, Policy, flag};
use crate::family::Family;
use crate::near_cache::{Lookup, TenantCache, Waiter, WriteGuard};
use crate::reply::{ReplyQueue, Transform, chain};
use crate::resp::{self, Frame, Protocol, RequestDecoder};
use crate::route::{DirectRoute, ResolvedRoute, Tenant};
use crate::tenancy::Namespace;
use crate::worker::Worker;

/// A tenant's near cache as a session sees it: the cache, and the route's node it reads.
pub(super) struct NearView {
    cache: Rc<TenantCache>,
    route: DirectRoute,
}

impl NearView {
    /// The near cache of `tenant` on `route`, when it has the policy and the route is one the cache serves: one
    /// node or a sentinel-managed master for reads and writes alike (double-writes waiting for the primary
    /// only included), no migration checking its commands. A cluster, replica reads or any other route shape
    /// are served without the cache.
    pub(super) fn of(
        worker: &Worker,
        tenant: &Arc<Tenant>,
        route: &ResolvedRoute,
    ) -> Option<NearView> {
        tenant.near_cache?;
        if tenant.readiness.is_some() {
            return None;
        }
        let route = route.direct().filter(DirectRoute::caches)?;
        let cache = worker.near_caches.for_tenant(tenant)?;
        Some(NearView { cache, route })
    }
}

impl NearView {
    /// What the cache says of `GET key` (`key` as stored), with the node it reads (`None`: a sentinel master not
    /// known yet, the read goes to Redis).
    pub(super) fn get(
        &self,
        key: &[u8],
        protocol: Protocol,
        now: Instant,
    ) -> Option<(Lookup, Rc<Backend>)> {
        let node = self.route.cache_node()?;
        Some((self.cache.get(&node, key, protocol, now), node))
    }
}

impl NearView {
    /// A request of a tenant with a near cache, on the direct path: what the cache does with it, or `None` for
    /// a command that may write (its keys are dropped from the cache on the dispatch path).
    pub(super) fn read(
        &self,
        spec: &'static CommandSpec,
        decoder: &RequestDecoder,
        frame: &Frame,
        namespace: Option<&Namespace>,
        protocol: Protocol,
        now: Instant,
    ) -> Option<NearRead> {
        if spec.id != cmd::Command::Get || decoder.arg_count() != 2 {
            return (!may_write(spec)).then_some(NearRead::Forward);
        }
        let key = decoder.arg(frame, 1)?;
        let stored;
        let key = match namespace {
            Some(namespace) => {
                stored = [&namespace.prefix()[..], key].concat();
                &stored[..]
            }
            None => key,
        };
        Some(match self.get(key, protocol, now) {
            Some((Lookup::Hit(reply), _)) => NearRead::Hit(reply),
            Some((Lookup::Wait(started), node)) => {
                NearRead::Wait(FillWait::new(self, node, key, started))
            }
            Some((Lookup::Miss, _)) | None => NearRead::Forward,
        })
    }
}

/// What the near cache does with a request on the direct path.
pub(super) enum NearRead {
    /// Answers it.
    Hit(Bytes),
    /// Has it wait for a fill of its key.
    Wait(FillWait),
    /// Nothing: it goes on to Redis.
    Forward,
}

/// A read that waits for the fill of its key (see `near_cache::waiters`).
pub(super) struct FillWait {
    cache: Rc<TenantCache>,
    node: Rc<Backend>,
    key: Bytes,
    /// Whether the read's own miss started the fill.
    started: bool,
}

impl FillWait {
    pub(super) fn new(near: &NearView, node: Rc<Backend>, key: &[u8], started: bool) -> FillWait {
        FillWait {
            cache: Rc::clone(&near.cache),
            node,
            key: Bytes::copy_from_slice(key),
            started,
        }
    }
}

/// Whether a command may write keys: its table says so, or it may replicate (scripts and functions, whose keys
/// are their author's), pub/sub aside.
pub(super) fn may_write(spec: &CommandSpec) -> bool {
    (spec.has(flag::WRITE) || spec.has(flag::MAY_REPLICATE)) && !spec.has(flag::PUBSUB)
}

impl Session {
    /// A command of a tenant with a near cache (`NearView`).
    pub(super) fn through_near_cache(&mut self, mut command: Command) -> ControlFlow<(), Command> {
        let Some(view) = self.client.tenant.as_ref() else {
            return Continue(command);
        };
        let Some(near) = view.near.as_ref() else {
            return Continue(command);
        };
        let namespace = view.tenant.namespace();
        let spec = command.spec;
        if !self.stateful.is_idle() || command.policy == Policy::Stateful {
            if may_write(spec) || spec.id == cmd::Command::Exec {
                self.near.holds.push(near.cache.write(None));
            }
            return Continue(command);
        }
        let args = command.request.args();
        if spec.id == cmd::Command::Get && args.len() == 2 {
            let key = stored(namespace, &args[1]);
            let request = command.request.raw();
            match near.get(&key, self.client.protocol, command.started) {
                Some((Lookup::Hit(reply), _)) => {
                    self.client.replies.tag(Some(request));
                    self.client.replies.push_ready(reply, command.started);
                    self.client.replies.tag(None);
                }
                Some((Lookup::Wait(started), node)) => {
                    let wait = FillWait::new(near, node, &key, started);
                    let client = &self.client;
                    let to = (&client.replies, client.protocol, client.info.id as usize);
                    self.near.wait_for_fill(wait, request, to, command.started);
                }
                Some((Lookup::Miss, _)) | None => return Continue(command),
            }
            return ControlFlow::Break(());
        }
        if !may_write(spec) {
            return Continue(command);
        }
        // A script's keys are what it writes only if its author says so: any key, then.
        let keys = match spec.family() == Family::Script
            || spec.key_indices(args, &mut self.client.keys).is_err()
            || self.client.keys.is_empty()
        {
            true => None,
            false => Some(
                self.client
                    .keys
                    .iter()
                    .filter_map(|&i| args.get(i))
                    .map(|key| stored(namespace, key))
                    .collect(),
            ),
        };
        let guard = near.cache.write(keys);
        let release: Transform = Box::new(move |reply| {
            drop(guard);
            reply
        });
        command.transform = chain(command.transform.take(), Some(release));
        Continue(command)
    }
}

/// The session's side of its tenant's near cache: writes that keep it from filling, reads that wait for a fill.
#[derive(Default)]
pub(super) struct NearState {
    /// Writes of a transaction or a blocking command, whose keys the cache does not fill until every reply of
    /// the client is in.
    holds: Vec<WriteGuard>,
    /// Reads waiting for a fill: the client's next requests wait for their replies.
    waits: Rc<Cell<u32>>,
}

impl NearState {
    /// Has the read `request` wait for the fill of its key (`wait`), its reply in its place among the client's
    /// (`replies`; in `protocol`, from its connection `affinity` if it goes to Redis after all); the client's
    /// next requests are not read until it has its reply (see `near_cache::waiters`).
    pub(super) fn wait_for_fill(
        &self,
        wait: FillWait,
        request: &Bytes,
        (replies, protocol, affinity): (&Rc<ReplyQueue>, Protocol, usize),
        now: Instant,
    ) {
        let pause = FillPause::new(&self.waits);
        replies.tag(Some(request));
        let handle = replies.reserve_with(
            now,
            Some(Box::new(move |reply| {
                drop(pause);
                reply
            })),
        );
        replies.tag(None);
        let mut request = BytesMut::with_capacity(wait.key.len() + 32);
        resp::command(&mut request, &[&b"GET"[..], &wait.key]);
        let waiter = Waiter::new(handle, protocol, request.freeze(), wait.node, affinity);
        wait.cache.wait(&wait.key, wait.started, waiter);
    }

    /// Whether a read of the client waits for a fill (its next requests wait until it has its reply).
    pub(super) fn waits(&self) -> bool {
        self.waits.get() > 0
    }

    /// Once every reply of the client is in and no transaction is open (`transaction`), its transactions' and
    /// blocking commands' writes no longer keep the cache from filling.
    pub(super) fn release_holds(&mut self, transaction: bool) {
        if !transaction {
            self.holds.clear();
        }
    }
}

/// Counts a read waiting for a fill while it lasts.
struct FillPause(Rc<Cell<u32>>);

impl FillPause {
    fn new(waits: &Rc<Cell<u32>>) -> FillPause {
        waits.set(waits.get() + 1);
        FillPause(Rc::clone(waits))
    }
}

impl Drop for FillPause {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// `key` as stored: under the tenant's namespace, if it has one.
fn stored(namespace: Option<&Namespace>, key: &Bytes) -> Bytes {
    match namespace {
        Some(namespace) => [&namespace.prefix()[..], &key[..]].concat().into(),
        None => key.clone(),
    }
}
