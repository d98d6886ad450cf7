//! Hands what the data path noticed (hot keys, big keys, slow commands: see `tracking`; migration readiness: see
//! `route::readiness`; each tenant's usage: see `tenant::TenantRuntime::usage`; whether each resource is reached:
//! see `reach`; how far double-write secondaries are from their primaries: see `repair`) to the control plane every report
//! interval, with the gateway's token, apart from heartbeats so that a large report never delays one. Without a control plane (a routes file), reports are still made, for the admin port's `/tracking`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_schemas::api::{ObservationReport, ResourceReach, SecondaryDivergence, TenantUsage};

use crate::state::Gateway;
use crate::sync::Sync;

/// How long one push may take before it is given up (the report is then lost: the next one carries on).
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Tenants' usage entries per push (a few hundred bytes each): more go in further pushes, so that a body stays
/// well under the control plane's 2 MiB limit however many tenants are active.
const USAGE_PER_PUSH: usize = 2000;

/// Reports every interval; with a control plane (`push`), to the replica it follows.
pub(crate) async fn run(gateway: Arc<Gateway>, push: Option<Arc<Sync>>) {
    let interval = gateway.tracking.config.report_interval;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let mut since = Instant::now();
    loop {
        ticker.tick().await;
        let now = Instant::now();
        let covered = now.duration_since(since).as_millis() as u64;
        since = now;
        let id = push.as_ref().map_or("", |sync| sync.gateway_id());
        let mut report = gateway.tracking.report(id, covered);
        report.readiness = crate::route::readiness::report(&gateway.snapshot());
        let Some(sync) = &push else {
            continue;
        };
        let (mut usage, resources) = usage(&gateway).await;
        let rest = usage.split_off(usage.len().min(USAGE_PER_PUSH));
        report.usage = usage;
        report.resources = resources;
        report.divergence = divergence(&gateway);
        let more: Vec<ObservationReport> = rest
            .chunks(USAGE_PER_PUSH)
            .map(|chunk| ObservationReport {
                gateway: report.gateway.clone(),
                interval_ms: report.interval_ms,
                tenants: Vec::new(),
                readiness: Vec::new(),
                usage: chunk.to_vec(),
                resources: Vec::new(),
                divergence: Vec::new(),
            })
            .collect();
        for report in std::iter::once(report).chain(more) {
            if report.tenants.is_empty()
                && report.readiness.is_empty()
                && report.usage.is_empty()
                && report.resources.is_empty()
                && report.divergence.is_empty()
            {
                continue;
            }
            let sent = sync
                .post("/v1/gateways/observations")
                .json(&report)
                .timeout(PUSH_TIMEOUT)
                .send()
                .await;
            if let Err(e) = sent.and_then(reqwest::Response::error_for_status) {
                tracing::debug!("tracking report failed: {e}");
            }
        }
    }
}

/// Every tenant's usage since the last report, for those with something to say: read off the runtime (a few
/// microseconds a tenant, which adds up at 100,000); and whether the gateway reaches each resource of the
/// routes (see `reach`), which also visits every tenant.
async fn usage(gateway: &Arc<Gateway>) -> (Vec<TenantUsage>, Vec<ResourceReach>) {
    let gateway = Arc::clone(gateway);
    tokio::task::spawn_blocking(move || {
        let snapshot = gateway.snapshot();
        let usage = snapshot
            .tenants()
            .iter()
            .filter_map(|tenant| tenant.runtime.usage(&tenant.name))
            .collect();
        let resources = gateway.reachability.report(&snapshot, &gateway.metrics);
        (usage, resources)
    })
    .await
    .unwrap_or_default()
}

/// Every tenant's double-write secondary the gateway samples or keeps a repair record for: the sampler's window
/// and the repair's figures together.
fn divergence(gateway: &Gateway) -> Vec<SecondaryDivergence> {
    type Entries = std::collections::BTreeMap<(String, String), SecondaryDivergence>;
    fn entry<'a>(
        entries: &'a mut Entries,
        tenant: &str,
        resource: &str,
    ) -> &'a mut SecondaryDivergence {
        entries
            .entry((tenant.to_string(), resource.to_string()))
            .or_insert_with(|| SecondaryDivergence {
                tenant: tenant.to_string(),
                resource: resource.to_string(),
                samples: 0,
                differing: 0,
                pending: 0,
                catching_up: false,
                repaired: 0,
            })
    }
    let mut entries = Entries::new();
    for f in gateway.divergence.figures() {
        let entry = entry(&mut entries, &f.tenant, &f.resource);
        entry.samples = f.samples as u64;
        entry.differing = f.differing as u64;
    }
    for f in gateway.repairs.figures() {
        let entry = entry(&mut entries, &f.tenant, &f.resource);
        entry.pending = f.pending.max(0) as u64;
        entry.catching_up = f.catching_up;
        entry.repaired = f.repaired.max(0) as u64;
    }
    entries.into_values().collect()
}
