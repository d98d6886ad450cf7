//! What the tenant's `PING` says of its backends. The gateway answers `PING` itself, without a round trip (it is
//! what health checks and `redis-benchmark -t ping` send), but not `PONG` when it knows that the tenant's Redis
//! would not serve: while a script has kept one of the nodes of the tenant's route busy past the node's
//! `busy-reply-threshold` (see `health`), `PING` gets Redis' own `BUSY`, as from that Redis.

use std::sync::atomic::Ordering;

use crate::health::{SCRIPTS_RUNNING, busy_text};
use crate::session::client::Client;

impl Client {
    /// The error `PING` answers instead of `PONG`, if any. One atomic load while no script runs anywhere.
    #[inline]
    pub(in crate::session) fn ping_refusal(&self) -> Option<String> {
        if SCRIPTS_RUNNING.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.busy_node()
    }

    /// Redis' `BUSY` when some node of the tenant's route runs a script past its threshold.
    #[cold]
    fn busy_node(&self) -> Option<String> {
        let view = self.tenant.as_ref()?;
        let metrics = &self.worker.gateway.metrics;
        view.route
            .script_nodes()
            .find_map(|node| metrics.backend(&node.addr).scripts.busy())
            .map(busy_text)
    }
}
