//! `SCRIPT KILL` and `FUNCTION KILL`, which must reach the node a script keeps busy past the shared connections
//! queued behind it (see `backend::kill_on`).

use std::collections::HashSet;
use std::time::Instant;

use super::Dispatch;
use crate::backend::{Upstream, kill_on};
use crate::resp::Request;

impl Dispatch<'_> {
    /// Sends `request`, a `SCRIPT KILL` or `FUNCTION KILL`, to every node the tenant's writes reach (scripts
    /// are writes): each write resource of each shard, every master of a cluster, each node once.
    pub(crate) fn kill_scripts(&mut self, request: &Request, started: Instant) {
        let upstreams: Vec<Result<Upstream, bytes::Bytes>> = self
            .plan
            .fan_out(true)
            .into_iter()
            .flat_map(|shard| &self.route.shards[shard].write)
            .map(|endpoint| endpoint.upstream.clone())
            .collect();
        let reply = self.reserve(started);
        let request = request.raw().clone();
        tokio::task::spawn_local(async move {
            let mut nodes = Vec::new();
            for upstream in upstreams {
                match upstream {
                    Ok(upstream) => nodes.extend(upstream.script_nodes().await),
                    Err(error) => nodes.push(Err(error)),
                }
            }
            let mut seen = HashSet::new();
            nodes.retain(|node| {
                node.as_ref()
                    .map_or(true, |node| seen.insert(node.addr.clone()))
            });
            reply.deliver(kill_on(nodes, request).await);
        });
    }
}
