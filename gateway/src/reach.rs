//! Whether the gateway reaches each backend resource its routes use, for its tracking reports (see `report`;
//! docs/usage.md#resources). Every worker holds the current routes' upstreams open (`Worker::pinned`), and their
//! connections reconnect by themselves: each worker looks at them every [`TICK`] (`server::watch_resources`; no
//! request is sent for it), and a report reads every worker's last look. A resource is up when some worker has a
//! working connection to it (to a sentinel set's master, to some master of a cluster); its last error is the
//! latest connection failure on its nodes (`BackendMetrics::failed`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use switchyard_schemas::api::ResourceReach;

use crate::backend::ResourceSpec;
use crate::metrics::Metrics;
use crate::route::Snapshot;

/// How often a worker looks at its upstreams: "since" in a report is this precise.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// What a worker saw of one resource at its last look.
pub(crate) struct Seen {
    pub healthy: bool,
    /// The nodes it knows now (`host:port`): the node, a sentinel set's master, a cluster's masters.
    pub nodes: Vec<String>,
}

/// One worker's last look, by resource.
pub(crate) type WorkerView = Arc<Mutex<HashMap<ResourceSpec, Seen>>>;

#[derive(Default)]
pub(crate) struct Reachability {
    workers: Mutex<Vec<WorkerView>>,
    /// By location, whether it was up at the last report and since when (milliseconds since the Unix epoch).
    states: Mutex<HashMap<String, (bool, i64)>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ms() -> i64 {
    (crate::tracking::unix_micros() / 1000) as i64
}

impl Reachability {
    /// A new worker's view, read by every report.
    pub(crate) fn worker(&self) -> WorkerView {
        let view = WorkerView::default();
        lock(&self.workers).push(Arc::clone(&view));
        view
    }

    /// Every resource the routes of `snapshot` name, by location, as the workers last saw it. A resource no
    /// worker has looked at yet (the routes just changed) waits for the next report.
    pub(crate) fn report(&self, snapshot: &Snapshot, metrics: &Metrics) -> Vec<ResourceReach> {
        let mut reached: HashMap<String, (bool, Option<(String, i64)>)> = HashMap::new();
        let mut planned = HashSet::new();
        let plans = snapshot
            .tenants()
            .iter()
            .flat_map(|tenant| tenant.route.resource_plans())
            .filter(|plan| planned.insert(Arc::as_ptr(plan)));
        let workers: Vec<WorkerView> = lock(&self.workers).clone();
        for plan in plans {
            let (up, error) = match &plan.spec {
                Err(e) => (false, Some((e.clone(), now_ms()))),
                Ok(spec) => match seen(&workers, spec, metrics) {
                    Some(seen) => seen,
                    None => continue,
                },
            };
            // Resources at one location (another user, say) are up there only if all are.
            let entry = reached.entry(plan.name.clone()).or_insert((true, None));
            entry.0 &= up;
            entry.1 = latest(entry.1.take(), error);
        }
        let now = now_ms();
        let mut states = lock(&self.states);
        states.retain(|location, _| reached.contains_key(location));
        let mut report: Vec<ResourceReach> = reached
            .into_iter()
            .map(|(location, (up, error))| {
                let state = states.entry(location.clone()).or_insert((up, now));
                if state.0 != up {
                    *state = (up, now);
                }
                let (last_error, last_error_ms) = error.unzip();
                ResourceReach {
                    location,
                    up,
                    since_ms: state.1,
                    last_error,
                    last_error_ms,
                }
            })
            .collect();
        report.sort_by(|a, b| a.location.cmp(&b.location));
        report
    }
}

/// Whether some worker reaches `spec`, and the latest failure on its nodes; `None` when no worker looked at it.
fn seen(
    workers: &[WorkerView],
    spec: &ResourceSpec,
    metrics: &Metrics,
) -> Option<(bool, Option<(String, i64)>)> {
    let mut looked = false;
    let mut up = false;
    // A sentinel set's sentinels and a cluster's seeds fail too before any data node is known.
    let mut nodes: HashSet<String> = match spec {
        ResourceSpec::Node(_) => HashSet::new(),
        ResourceSpec::Sentinel(sentinel, _) => sentinel.sentinels.iter().cloned().collect(),
        ResourceSpec::Cluster(cluster) => cluster.seeds.iter().cloned().collect(),
    };
    for worker in workers {
        if let Some(seen) = lock(worker).get(spec) {
            looked = true;
            up |= seen.healthy;
            nodes.extend(seen.nodes.iter().cloned());
        }
    }
    let error = nodes
        .iter()
        .filter_map(|addr| metrics.backend(addr).last_failure())
        .fold(None, |latest_yet, failure| {
            latest(latest_yet, Some(failure))
        });
    looked.then_some((up, error))
}

fn latest(a: Option<(String, i64)>, b: Option<(String, i64)>) -> Option<(String, i64)> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.1 > a.1 { b } else { a }),
        (a, b) => a.or(b),
    }
}
