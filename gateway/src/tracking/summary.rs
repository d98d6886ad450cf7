//! What a report says: the workers' observations merged by tenant, turned into the control plane's types, and
//! bounded in size. The last one made is kept for the admin port's `/tracking`.

use switchyard_schemas::api::{
    BigKey as ApiBigKey, BigKeyDirection, HotKey, ObservationReport, SlowLogEntry,
    TenantObservations,
};

use super::{Direction, HOT_KEYS_REPORTED, TenantObserved, Tracking, lock, printable};

/// The most a report's JSON body may weigh: tenants beyond it (the least busy) wait for no later report, they
/// are left out. Well under the control plane's 2 MiB body limit.
const MAX_REPORT_BYTES: usize = 1024 * 1024;

impl Tracking {
    /// Takes what every worker noticed since the last report, as a report of `gateway` covering `interval_ms`;
    /// keeps it for `last`.
    pub(crate) fn report(&self, gateway: &str, interval_ms: u64) -> ObservationReport {
        let sample = u64::from(self.config.hot_key_sample);
        let mut tenants: Vec<(u64, TenantObservations)> = self
            .take()
            .into_iter()
            .map(|(tenant, observed)| summarize(tenant, observed, sample, interval_ms))
            .collect();
        // The busiest first, so that the bound leaves out the least telling.
        tenants.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.tenant.cmp(&b.1.tenant)));
        let mut size = 0;
        let tenants = tenants
            .into_iter()
            .map(|(_, tenant)| tenant)
            .take_while(|tenant| {
                size += serde_json::to_vec(tenant).map_or(0, |json| json.len() + 1);
                size <= MAX_REPORT_BYTES
            })
            .collect();
        let report = ObservationReport {
            gateway: gateway.to_string(),
            interval_ms,
            tenants,
        };
        *lock(&self.last) = report.clone();
        report
    }

    /// The last report made (empty before the first).
    pub(crate) fn last(&self) -> ObservationReport {
        lock(&self.last).clone()
    }
}

/// One tenant's observations, with how busy it looks (for the report's bound).
fn summarize(
    tenant: String,
    observed: TenantObserved,
    sample: u64,
    interval_ms: u64,
) -> (u64, TenantObservations) {
    // The tenant's threshold is a rate; the counts are the interval's.
    let least = observed
        .hot_threshold
        .saturating_mul(interval_ms.max(1))
        .div_ceil(1000);
    let hot_keys: Vec<HotKey> = observed
        .hot
        .top(HOT_KEYS_REPORTED)
        .into_iter()
        .map(|(key, count)| HotKey {
            key: printable(&key),
            count: count.saturating_mul(sample),
        })
        .filter(|hot| hot.count >= least)
        .collect();
    let busy = hot_keys.iter().map(|k| k.count).sum::<u64>() + observed.slow.len() as u64;
    let big_keys = observed
        .big
        .largest()
        .into_iter()
        .map(|big| ApiBigKey {
            key: big.key.as_deref().map(printable),
            command: big.command.to_string(),
            direction: match big.direction {
                Direction::Request => BigKeyDirection::Request,
                Direction::Reply => BigKeyDirection::Reply,
            },
            bytes: big.bytes as u64,
            elements: big.elements,
            at_ms: big.at_ms as i64,
            gateway: String::new(),
        })
        .collect();
    let slowlog = observed
        .slow
        .iter()
        .map(|entry| SlowLogEntry {
            id: entry.id,
            timestamp: entry.timestamp,
            duration_us: entry.duration_us,
            args: entry.args.iter().map(|arg| printable(arg)).collect(),
            key: entry.key.as_deref().map(printable),
            client_addr: entry.client_addr.clone(),
            client_name: entry.client_name.clone(),
            backend: entry.backend.clone(),
            run: entry.run,
            gateway: String::new(),
        })
        .collect();
    let observations = TenantObservations {
        tenant,
        hot_keys,
        big_keys,
        slowlog,
    };
    (busy, observations)
}
