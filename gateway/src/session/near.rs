//! The session's side of its tenant's near cache (`near_cache`): a read the cache holds (`near_cache::Query`) is
//! answered in its
//! place among the client's replies; a write drops the keys it names from the cache before it is sent, and keeps
//! them from being filled until its reply is in (the client reads its own writes); a write in a transaction or a
//! blocking command, whose replies come another way, does so for every key until every reply of the client is in.
//!
//! A read the cache cannot answer goes on along the steps, in order with the client's other commands; the cache
//! fills the key in the background for the next read.

use std::ops::ControlFlow::{self, Continue};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;

use super::Session;
use super::steps::Command;
use crate::cmd::{self, CommandSpec, Policy, flag};
use crate::family::Family;
use crate::near_cache::{Query, TenantCache};
use crate::reply::{Transform, chain};
use crate::route::{CacheRoute, ResolvedRoute, Tenant};
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
                self.near_holds.push(near.cache.write(None));
            }
            return Continue(command);
        }
        let args = command.request.args();
        if let Some(query) = Query::of(spec.id, args) {
            let key = stored(namespace, &args[1]);
            let Some(node) = near.route.node(&key) else {
                return Continue(command);
            };
            let Some(reply) =
                near.cache
                    .read(&node, &key, &query, self.client.protocol, command.started)
            else {
                return Continue(command);
            };
            self.client.replies.tag(Some(command.request.raw()));
            self.client.replies.push_ready(reply, command.started);
            self.client.replies.tag(None);
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

    /// Once every reply of the client is in and no transaction is open, its transactions' and blocking
    /// commands' writes no longer keep the cache from filling.
    pub(super) fn release_near_holds(&mut self) {
        if !self.near_holds.is_empty() && self.stateful.transaction.is_none() {
            self.near_holds.clear();
        }
    }
}

/// `key` as stored: under the tenant's namespace, if it has one.
fn stored(namespace: Option<&Namespace>, key: &Bytes) -> Bytes {
    match namespace {
        Some(namespace) => [&namespace.prefix()[..], &key[..]].concat().into(),
        None => key.clone(),
    }
}
