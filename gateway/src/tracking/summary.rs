//! What a report says: the workers' observations merged by tenant, turned into the control plane's types, and
//! bounded in size, each tenant keeping its share. The last one made is kept, without argument values, for the
//! admin port's `/tracking`.

use std::sync::Arc;

use serde::Serialize;
use switchyard_schemas::api::{
    BigKey as ApiBigKey, BigKeyDirection, HotKey, ObservationReport, SlowLogEntry,
    TenantObservations,
};

use super::slowlog::without_values;
use super::{Direction, HOT_KEYS_REPORTED, SlowEntry, TenantObserved, Tracking, lock, printable};

/// The most a report's JSON body may weigh, well under the control plane's 2 MiB body limit. Tenants share it
/// (see `fit`): one that does not fit in its share loses its own oldest entries, not the other tenants' turn.
const MAX_REPORT_BYTES: usize = 1024 * 1024;

impl Tracking {
    /// Takes what every worker noticed since the last report, as a report of `gateway` covering `interval_ms`;
    /// keeps it, without argument values, for `last`.
    pub(crate) fn report(&self, gateway: &str, interval_ms: u64) -> ObservationReport {
        let sample = u64::from(self.config.hot_key_sample);
        let mut tenants: Vec<Summary> = self
            .take()
            .into_iter()
            .map(|(tenant, observed)| summarize(tenant, observed, sample, interval_ms))
            .collect();
        // The busiest first: what the shares leave over goes to them first.
        tenants.sort_by(|a, b| {
            b.busy
                .cmp(&a.busy)
                .then_with(|| a.observations.tenant.cmp(&b.observations.tenant))
        });
        let mut report = ObservationReport {
            gateway: gateway.to_string(),
            interval_ms,
            tenants: Vec::new(),
            readiness: Vec::new(),
            usage: Vec::new(),
            resources: Vec::new(),
            divergence: Vec::new(),
        };
        let (mut observations, slow): (Vec<TenantObservations>, Vec<_>) = tenants
            .into_iter()
            .map(|tenant| (tenant.observations, tenant.slow))
            .unzip();
        fit(
            &mut observations,
            MAX_REPORT_BYTES.saturating_sub(json_len(&report)),
        );
        let shown = observations
            .iter()
            .zip(&slow)
            .filter(|(kept, _)| !is_empty(kept))
            .map(|(kept, slow)| shown(kept.clone(), slow))
            .collect();
        report.tenants = observations.into_iter().filter(|t| !is_empty(t)).collect();
        *lock(&self.last) = ObservationReport {
            tenants: shown,
            ..report.clone()
        };
        report
    }

    /// The last report made (empty before the first), without argument values (see `without_values`).
    pub(crate) fn last(&self) -> ObservationReport {
        lock(&self.last).clone()
    }
}

/// One tenant's observations, how busy it looks, and its slow log entries in the order of its
/// `observations.slowlog`.
struct Summary {
    busy: u64,
    observations: TenantObservations,
    slow: Vec<Arc<SlowEntry>>,
}

/// `kept` (a tenant's part of a report, its slow log cut to a start of `slow`) with its slow log entries'
/// arguments reduced to names and keys.
fn shown(mut kept: TenantObservations, slow: &[Arc<SlowEntry>]) -> TenantObservations {
    for (entry, logged) in kept.slowlog.iter_mut().zip(slow) {
        entry.args = without_values(&logged.args)
            .iter()
            .map(|arg| printable(arg))
            .collect();
    }
    kept
}

/// Cuts `tenants` (the busiest first) so that, as a report's list, they weigh at most `budget` bytes of JSON,
/// each keeping a fair share: every tenant may weigh up to one level, the highest at which they all fit; one
/// under it keeps everything, one over it keeps its items up to it, in the order they tell most (hot keys, big
/// keys, then its slow log newest first). What the level leaves over goes, one item each, to the busiest first.
/// A tenant left with nothing is to be left out.
fn fit(tenants: &mut [TenantObservations], budget: usize) {
    // Each tenant's weight with its first 1, 2, ... items: its own braces and name, the items, a comma each.
    let weights: Vec<Vec<usize>> = tenants
        .iter()
        .map(|tenant| {
            let mut weight = json_len(&TenantObservations {
                tenant: tenant.tenant.clone(),
                hot_keys: Vec::new(),
                big_keys: Vec::new(),
                slowlog: Vec::new(),
            }) + 1;
            items(tenant)
                .map(|item| {
                    weight += item + 1;
                    weight
                })
                .collect()
        })
        .collect();
    let kept = |weights: &[usize], level: usize| weights.partition_point(|&w| w <= level);
    let weight = |weights: &[usize], n: usize| {
        n.checked_sub(1)
            .and_then(|i| weights.get(i))
            .copied()
            .unwrap_or(0)
    };
    let total = |level: usize| -> usize { weights.iter().map(|w| weight(w, kept(w, level))).sum() };
    let (mut low, mut high) = (
        0,
        weights
            .iter()
            .filter_map(|w| w.last())
            .max()
            .copied()
            .unwrap_or(0),
    );
    if total(high) <= budget {
        return;
    }
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if total(mid) <= budget {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let mut left = budget - total(low);
    for (tenant, weights) in tenants.iter_mut().zip(&weights) {
        let mut n = kept(weights, low);
        if let Some(next) = weights.get(n)
            && next - weight(weights, n) <= left
        {
            left -= next - weight(weights, n);
            n += 1;
        }
        keep(tenant, n);
    }
}

/// The JSON weight of each of a tenant's items, in the order `fit` keeps them.
fn items(tenant: &TenantObservations) -> impl Iterator<Item = usize> + '_ {
    let hot = tenant.hot_keys.iter().map(json_len);
    let big = tenant.big_keys.iter().map(json_len);
    hot.chain(big).chain(tenant.slowlog.iter().map(json_len))
}

/// Keeps the first `n` of a tenant's items (see `items`).
fn keep(tenant: &mut TenantObservations, n: usize) {
    let hot = n.min(tenant.hot_keys.len());
    tenant.hot_keys.truncate(hot);
    let big = (n - hot).min(tenant.big_keys.len());
    tenant.big_keys.truncate(big);
    tenant.slowlog.truncate(n - hot - big);
}

fn is_empty(tenant: &TenantObservations) -> bool {
    tenant.hot_keys.is_empty() && tenant.big_keys.is_empty() && tenant.slowlog.is_empty()
}

/// Bytes of `value`'s JSON.
fn json_len(value: &impl Serialize) -> usize {
    serde_json::to_vec(value).map_or(0, |json| json.len())
}

/// One tenant's observations, with how busy it looks (for the report's bound), its slow log newest first.
fn summarize(
    tenant: String,
    mut observed: TenantObserved,
    sample: u64,
    interval_ms: u64,
) -> Summary {
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
    // Ids grow in a tenant's log: the newest first, so that a tenant cut to its share loses its oldest.
    observed
        .slow
        .sort_by_key(|entry| std::cmp::Reverse(entry.id));
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
    Summary {
        busy,
        observations,
        slow: observed.slow,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::{BigKey, TrackingConfig};
    use super::*;

    /// A slow log entry of `size` bytes of `SET`'s value.
    fn slow(id: u64, size: usize) -> Arc<SlowEntry> {
        let args = ["SET", "k", &"v".repeat(size)].map(|a| Bytes::from(a.to_string()));
        Arc::new(SlowEntry {
            id,
            timestamp: 1,
            duration_us: 20_000,
            args: args.to_vec(),
            key: Some(Bytes::from("k")),
            client_addr: "127.0.0.1:1".into(),
            client_name: String::new(),
            backend: String::new(),
            run: 1,
        })
    }

    #[test]
    fn a_tenant_over_its_share_loses_its_oldest_entries_not_the_others_turn() {
        let tracking = Tracking::new(TrackingConfig::default());
        let worker = tracking.worker();
        {
            let mut observed = lock(&worker);
            // 1,000 slow entries of 2 KB each: twice what a whole report may weigh, and the busiest tenant (its
            // hot key the most counted), which a report used to put first and then stop at, sending nothing.
            let loud = observed.tenant("loud");
            loud.slow = (0..1000).map(|id| slow(id, 2048)).collect();
            loud.hot.add(b"loud", 10);
            for i in 0..100 {
                let quiet = observed.tenant(&format!("quiet{i:03}"));
                quiet.hot.add(b"hot", 3);
                quiet.big.add(BigKey {
                    key: Some(Bytes::from("big")),
                    command: "set",
                    direction: Direction::Request,
                    bytes: 2_000_000,
                    elements: None,
                    at_ms: 1,
                });
                quiet.slow = vec![slow(7, 10)];
            }
        }
        let report = tracking.report("gw", 1000);
        let json = serde_json::to_vec(&report).expect("JSON");
        assert!(json.len() <= MAX_REPORT_BYTES, "{}", json.len());
        assert_eq!(report.tenants.len(), 101);
        for quiet in report.tenants.iter().filter(|t| t.tenant != "loud") {
            let counts = (
                quiet.hot_keys.len(),
                quiet.big_keys.len(),
                quiet.slowlog.len(),
            );
            assert_eq!(counts, (1, 1, 1), "{}", quiet.tenant);
        }
        let loud = report
            .tenants
            .iter()
            .find(|t| t.tenant == "loud")
            .expect("the loud tenant, cut");
        assert_eq!(loud.hot_keys.len(), 1);
        let ids: Vec<u64> = loud.slowlog.iter().map(|e| e.id).collect();
        // Its newest entries, most of the report: what the others leave.
        assert!((300..1000).contains(&ids.len()), "{}", ids.len());
        assert_eq!(ids.first(), Some(&999));
        assert!(ids.windows(2).all(|w| w[0] == w[1] + 1), "{ids:?}");
        assert!(json.len() > MAX_REPORT_BYTES - 4096, "{}", json.len());

        // The admin port's copy: the same entries, without values.
        let last = tracking.last();
        let shown = last
            .tenants
            .iter()
            .find(|t| t.tenant == "loud")
            .expect("the loud tenant");
        assert_eq!(shown.slowlog.len(), ids.len());
        assert_eq!(shown.slowlog[0].args, ["SET", "k", "(redacted)"]);
        assert_eq!(loud.slowlog[0].args[2].len(), 2048);
    }

    #[test]
    fn tenants_that_fit_are_kept_whole_and_empty_ones_left_out() {
        let tracking = Tracking::new(TrackingConfig::default());
        let worker = tracking.worker();
        {
            let mut observed = lock(&worker);
            observed.tenant("a").slow = vec![slow(0, 10), slow(1, 10)];
            // Hot keys under the tenant's threshold: nothing to say.
            let quiet = observed.tenant("b");
            quiet.hot.add(b"k", 1);
            quiet.hot_threshold = 1_000_000;
        }
        let report = tracking.report("gw", 1000);
        assert_eq!(report.tenants.len(), 1);
        assert_eq!(report.tenants[0].tenant, "a");
        let ids: Vec<u64> = report.tenants[0].slowlog.iter().map(|e| e.id).collect();
        assert_eq!(ids, [1, 0]);
    }
}
