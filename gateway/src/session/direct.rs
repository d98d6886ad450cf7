//! The direct path: requests forwarded untouched, in runs, when nothing about them needs a decision; and a
//! tenant's near cache hits, answered in their place.

use std::time::Instant;

use bytes::Bytes;

use super::near::{FillWait, NearRead};
use super::{Replying, Session};
use crate::cmd::{CommandSpec, Policy};
use crate::resp::{Frame, RequestDecoder};
use crate::route::RunTarget;
use crate::tenancy::DirectKeys;

/// Where the direct path takes a request.
pub(super) enum Direct {
    /// Into the run to this target.
    Run(RunTarget),
    /// Nowhere: the tenant's near cache answers it with this reply.
    Answered(Bytes),
    /// Nowhere yet: it waits for the near cache's fill of its key (`NearState::wait_for_fill`). Boxed: the
    /// other variants are what the direct path returns for nearly every request.
    Wait(Box<FillWait>),
}

impl Session {
    /// Where a request goes untouched, when nothing about it needs a decision (no readiness check reads its keys:
    /// `Tenant::checks_keys`): the route is direct (one
    /// resource for reads, one for writes), the session holds no state (transaction, subscription...), and the
    /// command is one the gateway forwards verbatim (on a cluster: with its one key first, which gives the slot).
    /// Everything else takes `dispatch`, which would send such a request to the same place. A namespaced
    /// tenant's request is written with its keys under the prefix when the argument count tells where they are
    /// (`tenancy::DirectKeys`), in place of `frame`; any other takes `dispatch`. For a tenant with a near cache,
    /// a `GET` the cache holds is answered, and a command that may write takes `dispatch` (which drops its keys
    /// from the cache). Returns where the request goes, and its command.
    pub(super) fn direct(
        &self,
        decoder: &RequestDecoder,
        frame: &mut Frame,
        now: Instant,
    ) -> Option<(Direct, &'static CommandSpec)> {
        let view = self.client.tenant.as_ref()?;
        let direct = view.direct.as_ref()?;
        if view.generation != self.client.worker.gateway.generation()
            || view.tenant.ops_interval.is_some()
            || view.tenant.runtime.monitors.active()
            || view.tenant.checks_keys()
            || !self.stateful.is_idle()
            || self.client.replying != Replying::On
            || self.caching.is_on()
        {
            return None;
        }
        let (spec, policy) = self
            .client
            .commands
            .cached(decoder.arg(frame, 0)?, decoder.arg_count())?;
        if policy != Policy::Verbatim {
            return None;
        }
        let namespace = view.tenant.namespace();
        if let Some(near) = &view.near {
            let reader = (self.client.protocol, &*self.near.own);
            let to = match near.read(spec, (decoder, frame), namespace, reader, now)? {
                NearRead::Forward => None,
                NearRead::Hit(reply) => Some(Direct::Answered(reply)),
                NearRead::Wait(wait) => Some(Direct::Wait(Box::new(wait))),
            };
            if let Some(to) = to {
                self.count_direct(spec);
                return Some((to, spec));
            }
        }
        let rewrite = match namespace {
            Some(namespace) => Some((namespace, DirectKeys::of(spec, decoder.arg_count())?)),
            None => None,
        };
        let prefix = rewrite
            .as_ref()
            .map(|(namespace, _)| &namespace.prefix()[..]);
        let to = direct.target(spec, || decoder.arg(frame, 1), prefix)?;
        if let Some((namespace, keys)) = rewrite {
            *frame = namespace.direct_frame(decoder, frame, keys);
        }
        self.count_direct(spec);
        Some((Direct::Run(to), spec))
    }

    /// Counts a command the direct path took, in a tally of the same command in a row.
    #[inline(always)]
    fn count_direct(&self, spec: &'static CommandSpec) {
        match self.uncounted.get() {
            (Some(id), count) if id == spec.id => {
                self.uncounted.set((Some(id), count + 1));
            }
            _ => {
                self.count_commands();
                self.uncounted.set((Some(spec.id), 1));
            }
        }
    }

    /// Adds the commands the direct path forwarded since the last call to the tenant's counters.
    pub(super) fn count_commands(&self) {
        if let ((Some(id), count @ 1..), Some(view)) =
            (self.uncounted.replace((None, 0)), &self.client.tenant)
        {
            view.tenant.runtime.counters.commands.add(id, count);
            self.client.info.set_command(id);
        }
    }
}
