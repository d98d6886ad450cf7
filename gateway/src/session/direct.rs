//! The direct path: requests forwarded untouched, in runs, when nothing about them needs a decision.

use super::{Replying, Session};
use crate::cmd::{CommandSpec, Policy};
use crate::resp::{Frame, RequestDecoder};
use crate::route::RunTarget;
use crate::tenancy::DirectKeys;

impl Session {
    /// Where a request goes untouched, when nothing about it needs a decision (no readiness check reads its keys:
    /// `Tenant::checks_keys`): the route is direct (one
    /// resource for reads, one for writes), the session holds no state (transaction, subscription...), and the
    /// command is one the gateway forwards verbatim (on a cluster: with its one key first, which gives the slot).
    /// Everything else takes `dispatch`, which would send such a request to the same place. A namespaced
    /// tenant's request is written with its keys under the prefix when the argument count tells where they are
    /// (`tenancy::DirectKeys`), in place of `frame`; any other takes `dispatch`. Returns the run the
    /// request joins, and its command.
    pub(super) fn direct(
        &self,
        decoder: &RequestDecoder,
        frame: &mut Frame,
    ) -> Option<(RunTarget, &'static CommandSpec)> {
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
        let rewrite = match view.tenant.namespace() {
            Some(namespace) => Some((namespace, DirectKeys::of(spec, decoder.arg_count())?)),
            None => None,
        };
        let prefix = rewrite
            .as_ref()
            .map(|(namespace, _)| &namespace.prefix()[..]);
        let to = direct.target(spec, || decoder.arg(frame, 1), prefix)?;
        match self.uncounted.get() {
            (Some(id), count) if id == spec.id => {
                self.uncounted.set((Some(id), count + 1));
            }
            _ => {
                self.count_commands();
                self.uncounted.set((Some(spec.id), 1));
            }
        }
        if let Some((namespace, keys)) = rewrite {
            *frame = namespace.direct_frame(decoder, frame, keys);
        }
        Some((to, spec))
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
