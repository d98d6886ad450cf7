//! The dedicated connections' budget per backend node, shared fairly by the tenants that use the node.
//!
//! Every dedicated connection (a blocking command, a watched transaction, a subscription: see `dedicated`) is one
//! client of its node, and a node serves at most its `maxclients`: without a budget, one tenant's blocked clients
//! use them up and every other tenant's next `BLPOP` fails at its handshake. So this gateway holds at most
//! `--dedicated-maxclients-percent` of a node's `maxclients` (read at each handshake, see
//! `connection::NodeFacts`; `--backend-maxclients` where it cannot be read) as dedicated connections. The rest is
//! left for the shared pipelined connections, the spares, other gateways and the node's other clients.
//!
//! Within the budget, tenants share. With `n` tenants holding dedicated connections to the node (the one asking
//! counted), a tenant's share is `budget / (n + 1)`: one share is always kept free for a tenant that holds none
//! yet. A tenant gets a connection while it holds less than its share and the budget is not used up, and beyond
//! its share only while a whole share stays free after it. Alone, a tenant takes half the budget; a tenant that
//! comes later finds its share free. Nothing is taken back from a tenant over its share (a blocked command, a
//! transaction or a subscription cannot be moved), but it gets no more until its connections, as they are
//! released, bring it back under.
//!
//! Counted per node address across every worker (one lock, taken when a dedicated connection opens or closes,
//! never per command).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::metrics::{BackendMetrics, Metrics};
use crate::resp;

/// Every node's dedicated connections, as this gateway holds them.
pub(crate) struct DedicatedBudget {
    /// The percentage of a node's `maxclients` that this gateway's dedicated connections may hold; 0: no budget.
    percent: u64,
    /// The `maxclients` assumed for a node whose own could not be read.
    fallback_maxclients: u64,
    metrics: Arc<Metrics>,
    nodes: Mutex<HashMap<String, NodeShares>>,
}

/// One node's dedicated connections.
struct NodeShares {
    /// Where its `maxclients` is kept, and its dedicated connections shown.
    metrics: Arc<BackendMetrics>,
    held: usize,
    /// Per tenant, only those holding some (so that their count is the number of tenants using the node).
    by_tenant: HashMap<String, usize>,
}

/// One dedicated connection's place in its node's budget; given back when dropped.
pub(crate) struct NodeLease {
    budget: Arc<DedicatedBudget>,
    addr: String,
    tenant: String,
}

/// Why a tenant may not open one more dedicated connection to a node.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// The node's budget is used up.
    Full,
    /// The tenant holds its share, and what is left is kept for other tenants.
    OverShare,
}

impl DedicatedBudget {
    pub(crate) fn new(
        percent: u64,
        fallback_maxclients: u64,
        metrics: Arc<Metrics>,
    ) -> DedicatedBudget {
        DedicatedBudget {
            percent,
            fallback_maxclients,
            metrics,
            nodes: Mutex::new(HashMap::new()),
        }
    }

    /// A place for one more of `tenant`'s dedicated connections to the node at `addr`; an error is the reply the
    /// client gets.
    pub(crate) fn take(self: &Arc<Self>, addr: &str, tenant: &str) -> Result<NodeLease, Bytes> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let node = nodes.entry(addr.to_string()).or_insert_with(|| NodeShares {
            metrics: self.metrics.backend(addr),
            held: 0,
            by_tenant: HashMap::new(),
        });
        let own = node.by_tenant.get(tenant).copied().unwrap_or(0);
        let budget = self.budget(&node.metrics);
        if let Some(budget) = budget {
            let tenants = node.by_tenant.len() + usize::from(own == 0);
            if let Err(refusal) = admits(budget, node.held, own, tenants) {
                node.metrics
                    .dedicated_refused
                    .fetch_add(1, Ordering::Relaxed);
                return Err(refusal.reply(addr, tenant, own, budget));
            }
        }
        node.held += 1;
        *node.by_tenant.entry(tenant.to_string()).or_default() += 1;
        node.metrics.dedicated.fetch_add(1, Ordering::Relaxed);
        Ok(NodeLease {
            budget: Arc::clone(self),
            addr: addr.to_string(),
            tenant: tenant.to_string(),
        })
    }

    /// How many dedicated connections this gateway may hold to a node; `None`: no budget.
    fn budget(&self, node: &BackendMetrics) -> Option<usize> {
        if self.percent == 0 {
            return None;
        }
        let maxclients = match node.maxclients.load(Ordering::Relaxed) {
            0 => self.fallback_maxclients,
            read => read,
        };
        let budget = maxclients.saturating_mul(self.percent) / 100;
        Some(usize::try_from(budget).unwrap_or(usize::MAX).max(1))
    }

    fn give_back(&self, addr: &str, tenant: &str) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let Some(node) = nodes.get_mut(addr) else {
            return;
        };
        node.held = node.held.saturating_sub(1);
        node.metrics.dedicated.fetch_sub(1, Ordering::Relaxed);
        if let Some(own) = node.by_tenant.get_mut(tenant) {
            *own = own.saturating_sub(1);
            if *own == 0 {
                node.by_tenant.remove(tenant);
            }
        }
    }
}

/// Whether a tenant holding `own` of the `held` dedicated connections to a node may take one more of `budget`,
/// `tenants` tenants holding some (the asking one counted).
fn admits(budget: usize, held: usize, own: usize, tenants: usize) -> Result<(), Refusal> {
    if held >= budget {
        return Err(Refusal::Full);
    }
    let share = (budget / tenants.saturating_add(1)).max(1);
    if own < share || held.saturating_add(1).saturating_add(share) <= budget {
        Ok(())
    } else {
        Err(Refusal::OverShare)
    }
}

impl Refusal {
    fn reply(&self, addr: &str, tenant: &str, own: usize, budget: usize) -> Bytes {
        let text = match self {
            Refusal::Full => format!(
                "ERR max number of clients reached: the {budget} dedicated connections (blocking commands, transactions, subscriptions) this gateway may open to backend {addr} are all in use; try again later"
            ),
            Refusal::OverShare => format!(
                "ERR tenant '{tenant}' holds its share of the dedicated connections (blocking commands, transactions, subscriptions) to backend {addr}: {own} of {budget}, the rest is kept for other tenants; try again later"
            ),
        };
        resp::error_reply(&text)
    }
}

impl Drop for NodeLease {
    fn drop(&mut self) {
        self.budget.give_back(&self.addr, &self.tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tenants taking connections in turn, as `take` would count them.
    struct Node {
        budget: usize,
        own: Vec<usize>,
    }

    impl Node {
        fn take(&mut self, tenant: usize) -> Result<(), Refusal> {
            let held = self.own.iter().sum();
            let own = self.own[tenant];
            let tenants = self.own.iter().filter(|&&n| n > 0).count() + usize::from(own == 0);
            admits(self.budget, held, own, tenants)?;
            self.own[tenant] += 1;
            Ok(())
        }

        /// Takes until refused; how many it got.
        fn take_all(&mut self, tenant: usize) -> usize {
            (0..).take_while(|_| self.take(tenant).is_ok()).count()
        }
    }

    #[test]
    fn a_tenant_alone_takes_half_and_a_later_one_finds_its_share() {
        let mut node = Node {
            budget: 20,
            own: vec![0; 4],
        };
        assert_eq!(
            node.take_all(0),
            10,
            "alone: a share for a newcomer stays free"
        );
        assert_eq!(node.take(0), Err(Refusal::OverShare));
        assert_eq!(node.take_all(1), 6, "20 / 3");
        assert_eq!(
            node.take(0),
            Err(Refusal::OverShare),
            "the first gets no more"
        );
        assert_eq!(node.take_all(2), 4, "what is left");
        assert_eq!(node.take(3), Err(Refusal::Full));
        // As the first tenant's connections go, it gets no more until it is under its share (20 / 4).
        node.own[0] = 5;
        assert_eq!(node.take(0), Err(Refusal::OverShare));
        node.own[0] = 4;
        assert_eq!(node.take(0), Ok(()));
    }

    #[test]
    fn beyond_its_share_a_tenant_borrows_while_a_share_stays_free() {
        let mut node = Node {
            budget: 20,
            own: vec![0, 2],
        };
        // Two tenants: a share is 20 / 3 = 6, and 6 are kept free.
        assert_eq!(node.take_all(0), 12);
        assert_eq!(node.own, vec![12, 2]);
    }

    #[test]
    fn every_tenant_gets_one_of_a_tiny_budget_while_any_is_free() {
        let mut node = Node {
            budget: 2,
            own: vec![0; 3],
        };
        assert_eq!(node.take_all(0), 1);
        assert_eq!(node.take_all(1), 1);
        assert_eq!(node.take(2), Err(Refusal::Full));
    }

    #[test]
    fn leases_are_counted_per_node_and_tenant_and_given_back() {
        let metrics = Arc::new(Metrics::default());
        metrics
            .backend("n:1")
            .maxclients
            .store(40, Ordering::Relaxed);
        let budget = Arc::new(DedicatedBudget::new(50, 10_000, Arc::clone(&metrics)));
        let first: Vec<NodeLease> = (0..10)
            .map_while(|_| budget.take("n:1", "a").ok())
            .collect();
        assert_eq!(first.len(), 10, "half of 50% of 40");
        let refused = budget.take("n:1", "a").err().expect("over its share");
        assert!(
            refused.starts_with(b"-ERR tenant 'a' holds its share of the dedicated connections"),
            "{refused:?}"
        );
        assert!(
            budget.take("n:1", "b").is_ok(),
            "another tenant's share is free"
        );
        assert!(
            budget.take("n:2", "a").is_ok(),
            "another node has its own budget"
        );
        assert_eq!(metrics.backend("n:1").dedicated.load(Ordering::Relaxed), 10);
        assert_eq!(
            metrics
                .backend("n:1")
                .dedicated_refused
                .load(Ordering::Relaxed),
            1
        );
        drop(first);
        assert_eq!(metrics.backend("n:1").dedicated.load(Ordering::Relaxed), 0);
        let unread = Arc::new(DedicatedBudget::new(50, 8, metrics));
        let taken: Vec<NodeLease> = (0..8).map_while(|_| unread.take("n:3", "a").ok()).collect();
        assert_eq!(taken.len(), 2, "half of 50% of the assumed 8");
    }
}
