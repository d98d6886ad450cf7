//! The session's side of its tenant's near cache (`near_cache`): a read the cache holds (`near_cache::Query`) is
//! answered in its
//! place among the client's replies; a write drops the keys it names from the cache before it is sent, and keeps
//! them from being filled until its reply is in (the client reads its own writes); a write in a transaction or a
//! blocking command, whose replies come another way, does so for every key until every reply of the client is in.
//!
//! A read the cache cannot answer waits for the fill of its key that the cache then sends (or has in flight), its
//! reply in its place among the client's and the client's next requests held until it has it (see
//! `near_cache::waiters`); or, when it cannot wait, goes on along the steps, in order with the client's other
//! commands.
//!
//! Hits of `GET` are answered on the direct path too (`NearView::read`); the other cached reads, and every
//! command that may write, take the steps.

use std::cell::Cell;
use std::ops::ControlFlow::{self, Continue};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::Session;
use super::steps::Command;
use crate::cmd::{self, CommandSpec, Policy, flag};
use crate::family::Family;
use crate::near_cache::{Lookup, OwnWrites, Query, TenantCache, Waiter, WriteGuard};
use crate::reply::{ReplyQueue, Transform, chain};
use crate::resp::{Frame, Protocol, RequestDecoder};
use crate::route::{CacheNode, CacheRoute, ResolvedRoute, Tenant};
use crate::tenancy::Namespace;
use crate::worker::Worker;

/// A tenant's near cache as a session sees it: the cache, and where it fills the route's keys from.
pub(super) struct NearView {
    cache: Rc<TenantCache>,
    route: CacheRoute,
}

impl NearView {
    /// The near cache of `tenant` on `route`, when it has the policy, the route is one the cache serves (see
    /// `route::CacheRoute`) and no migration checks its commands.
    pub(super) fn of(
        worker: &Worker,
        tenant: &Arc<Tenant>,
        route: &ResolvedRoute,
    ) -> Option<NearView> {
        tenant.near_cache?;
        if tenant.readiness.is_some() {
            return None;
        }
        let route = route.cache_route()?;
        let cache = worker.near_caches.for_tenant(tenant)?;
        Some(NearView { cache, route })
    }
}

impl NearView {
    /// What the cache says of `query` of `key` (as stored) to a session with the writes `own` in flight, with
    /// the node it reads `key` from (`None`: not known now, the read goes to Redis).
    fn lookup(
        &self,
        (key, own): (&[u8], &OwnWrites),
        query: &Query<'_>,
        protocol: Protocol,
        now: Instant,
    ) -> Option<(Lookup, CacheNode)> {
        let node = self.route.node(key)?;
        Some((
            self.cache.read(&node, (key, own), query, protocol, now),
            node,
        ))
    }

    /// A request of a tenant with a near cache, on the direct path: what the cache does with a `GET`, or with
    /// another request that neither writes nor is a read the cache answers (it goes on); `None` for the others
    /// (the reads the cache answers but `GET`, and every command that may write: its keys are dropped from the
    /// cache), which take the steps.
    #[inline(never)]
    pub(super) fn read(
        &self,
        spec: &'static CommandSpec,
        (decoder, frame): (&RequestDecoder, &Frame),
        namespace: Option<&Namespace>,
        (protocol, own): (Protocol, &OwnWrites),
        now: Instant,
    ) -> Option<NearRead> {
        if spec.id != cmd::Command::Get || decoder.arg_count() != 2 {
            return (!may_write(spec) && !Query::cached(spec.id)).then_some(NearRead::Forward);
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
        Some(self.outcome((key, own), &Query::GET, protocol, now))
    }

    /// What the cache does with `query` of `key` (as stored) read by a session with the writes `own` in flight.
    fn outcome(
        &self,
        (key, own): (&[u8], &OwnWrites),
        query: &Query<'_>,
        protocol: Protocol,
        now: Instant,
    ) -> NearRead {
        match self.lookup((key, own), query, protocol, now) {
            Some((Lookup::Hit(reply), _)) => NearRead::Hit(reply),
            Some((Lookup::Wait { started, source }, node)) => NearRead::Wait(FillWait {
                cache: Rc::clone(&self.cache),
                node: node.backend,
                key: Bytes::copy_from_slice(key),
                source,
                started,
            }),
            Some((Lookup::Miss, _)) | None => NearRead::Forward,
        }
    }
}

impl NearView {
    /// Keeps the keys the write `args` names (its table's `spec`; `keys`, a buffer for their positions) from
    /// being filled until its reply goes through the transform returned, and from being read from the cache by
    /// the session sending it (`own`); their entries go then (see `TenantCache::write`).
    fn write(
        &self,
        spec: &'static CommandSpec,
        args: &[Bytes],
        (keys, own): (&mut Vec<usize>, &Rc<OwnWrites>),
        namespace: Option<&Namespace>,
    ) -> Transform {
        // A script's keys are what it writes only if its author says so: any key, then.
        let known = spec.family() != Family::Script
            && spec.key_indices(args, keys).is_ok()
            && !keys.is_empty();
        let keys = known.then(|| {
            keys.iter()
                .filter_map(|&i| args.get(i))
                .map(|key| stored(namespace, key))
                .collect()
        });
        let guard = self.cache.write(keys, own);
        Box::new(move |reply| {
            drop(guard);
            reply
        })
    }
}

/// What the near cache does with a request.
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
    /// The node it goes to if the fill cannot answer it.
    node: Rc<crate::backend::Backend>,
    key: Bytes,
    /// The tracking connection of the fill, and whether the read's own miss started it.
    source: u32,
    started: bool,
}

/// Whether a command may write keys: its table says so, or it may replicate (scripts and functions, whose keys
/// are their author's), pub/sub aside.
fn may_write(spec: &CommandSpec) -> bool {
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
                let guard = near.cache.write(None, &self.near.own);
                self.near.holds.push(guard);
            }
            return Continue(command);
        }
        let args = command.request.args();
        if let Some(query) = Query::of(spec.id, args) {
            let key = stored(namespace, &args[1]);
            let (client, request) = (&self.client, command.request.raw());
            let own = (&key[..], &*self.near.own);
            match near.outcome(own, &query, client.protocol, command.started) {
                NearRead::Hit(reply) => {
                    client.replies.tag(Some(request));
                    client.replies.push_ready(reply, command.started);
                    client.replies.tag(None);
                }
                NearRead::Wait(wait) => {
                    let to = (&client.replies, client.protocol, client.info.id as usize);
                    self.near
                        .wait_for_fill(wait, (&query, request), to, command.started);
                }
                NearRead::Forward => return Continue(command),
            }
            return ControlFlow::Break(());
        }
        if !may_write(spec) {
            return Continue(command);
        }
        let own = (&mut self.client.keys, &self.near.own);
        let release = near.write(spec, args, own, namespace);
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
    /// The keys of the client's writes in flight, which it does not read from the cache.
    pub(super) own: Rc<OwnWrites>,
}

impl NearState {
    /// Has the read `query` (`request`, as the client sent it) wait for the fill of its key (`wait`), its reply
    /// in its place among the client's (`replies`; in `protocol`, from its connection `affinity` if it goes to
    /// Redis after all); the client's next requests are not read until it has its reply (see
    /// `near_cache::waiters`).
    pub(super) fn wait_for_fill(
        &self,
        wait: FillWait,
        (query, request): (&Query<'_>, &Bytes),
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
        let read = (query, &wait.key[..]);
        let waiter = Waiter::new(handle, protocol, read, wait.node, affinity);
        wait.cache
            .wait(&wait.key, wait.source, wait.started, waiter);
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
