//! The resources of the snapshots a gateway builds one after another: one [`ResourcePlan`] per URL shared by
//! every tenant that names it, whichever snapshot built the tenant, and the distinct resource specs of the
//! snapshot being served, counted by use so that a delta updates them in proportion to its size.
//!
//! Plans are held weakly: a plan lives as long as a tenant of a live snapshot holds it, so tenants compiled in
//! different deltas still share one plan per URL, and a URL no tenant names any more is forgotten.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use super::{ResourcePlan, RoutePlan};
use crate::backend::ResourceSpec;

/// Carried from each build to the next (see the module's documentation); a build changes it only once it cannot
/// fail, so that it always describes the snapshot being served.
#[derive(Default)]
pub(crate) struct Catalog {
    plans: HashMap<String, Weak<ResourcePlan>>,
    /// How many entries `plans` had after its last pruning (see `Catalog::plan`).
    pruned_to: usize,
    /// Each spec of the served snapshot's routes, and how many times its tenants name it.
    uses: HashMap<ResourceSpec, usize>,
    /// The keys of `uses`, shared with every snapshot until they change.
    specs: Arc<[ResourceSpec]>,
    /// Whether a spec appeared or disappeared since `specs` was made.
    specs_changed: bool,
}

impl Catalog {
    /// The plan for a resource URL: the one tenants already hold, else a new one. A plan whose resource cannot
    /// be served (a TLS file unreadable, say) is made again each time, so that the next build retries it.
    pub(super) fn plan(&mut self, url: &str) -> Arc<ResourcePlan> {
        if let Some(plan) = self.plans.get(url).and_then(Weak::upgrade)
            && plan.spec.is_ok()
        {
            return plan;
        }
        let plan = Arc::new(ResourcePlan::new(url));
        self.plans.insert(url.to_string(), Arc::downgrade(&plan));
        // Dead entries are dropped once the map has doubled since the last pruning: amortised O(1) a plan.
        if self.plans.len() > 2 * self.pruned_to.max(64) {
            self.plans.retain(|_, plan| plan.strong_count() > 0);
            self.pruned_to = self.plans.len();
        }
        plan
    }

    /// Forgets every use: the next uses are those of a whole new snapshot.
    pub(super) fn clear_uses(&mut self) {
        self.uses.clear();
        self.specs_changed = true;
    }

    /// Counts the resources of a route the next snapshot serves.
    pub(super) fn hold(&mut self, route: &RoutePlan) {
        for spec in route.resources() {
            let count = self.uses.entry(spec.clone()).or_insert(0);
            self.specs_changed |= *count == 0;
            *count += 1;
        }
    }

    /// Uncounts the resources of a route the next snapshot no longer serves.
    pub(super) fn release(&mut self, route: &RoutePlan) {
        for spec in route.resources() {
            if let Some(count) = self.uses.get_mut(spec) {
                *count -= 1;
                if *count == 0 {
                    self.uses.remove(spec);
                    self.specs_changed = true;
                }
            }
        }
    }

    /// The distinct specs of the routes counted: the same list as before when no spec came or went.
    pub(super) fn specs(&mut self) -> Arc<[ResourceSpec]> {
        if std::mem::take(&mut self.specs_changed) {
            self.specs = self.uses.keys().cloned().collect();
        }
        Arc::clone(&self.specs)
    }
}
