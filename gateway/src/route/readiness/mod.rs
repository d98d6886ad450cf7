//! Migration readiness, from live traffic. While a tenant's route double-writes (a migration's destination is
//! its secondary table), the commands it runs are reported by name, from its command counters, for the control
//! plane to ask the destination which it knows. When that table places keys apart (several shards, or a Redis
//! Cluster's slots), each command is also checked against its placement, and what would fail there
//! (`CROSSSLOT`), or what the gateway would have to split, is counted with a few examples. The gateway hands the
//! counts over at each tracking report; the control plane sums them for the migration
//! (docs/migration.md#readiness).
//!
//! A tenant whose route has no destination that places keys apart pays one check of an `Option` per command. One
//! that has pays a hash of each key of its multi-key commands and a shared counter add; only a command that would
//! fail takes a lock, to count it and keep its example. The commands run cost nothing more: the tenant counts
//! them anyway (`metrics::CommandCounters`), and a report takes the difference since the last one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use switchyard_schemas::RouteTable;
use switchyard_schemas::api::{
    ReadinessCounts, ReadinessExample, ReadinessKind, TenantReadiness, merge_examples,
};

use super::{Secondary, Snapshot, splits};
use crate::cmd::policy::is_script;
use crate::cmd::{self, CommandSpec, Policy};
use crate::metrics::CommandCounters;
use crate::tracking::lock;

mod pattern;

pub(crate) use pattern::key_pattern;

/// Distinct examples one tenant keeps between two reports: past them only the counts go on (a report names the
/// most frequent `MAX_READINESS_EXAMPLES`), so memory stays bounded whatever the traffic.
const KEPT_EXAMPLES: usize = 64;

/// A tenant's counts since the last report, shared by its sessions on every worker and kept across snapshots
/// while its route keeps a destination.
pub(crate) struct Counters {
    checked: AtomicU64,
    found: Mutex<Found>,
    /// The tenant's command calls at the last report (`CommandCounters::calls`): what ran since is the difference.
    calls: Mutex<Vec<u64>>,
}

#[derive(Default)]
struct Found {
    counts: ReadinessCounts,
    examples: Vec<ReadinessExample>,
}

impl Counters {
    /// Counts from now: the commands `commands` counted so far are not the destination's business.
    pub(crate) fn new(commands: &CommandCounters) -> Counters {
        Counters {
            checked: AtomicU64::new(0),
            found: Mutex::default(),
            calls: Mutex::new(commands.calls()),
        }
    }

    /// `n` more commands were checked.
    pub(crate) fn checked(&self, n: u64) {
        self.checked.fetch_add(n, Ordering::Relaxed);
    }

    /// A command of `kind` whose keys `apart` the destination places apart. `prefix` is the tenant's key
    /// namespace: examples show keys as the tenant sent them.
    #[cold]
    pub(crate) fn found(
        &self,
        kind: ReadinessKind,
        command: &str,
        apart: [&[u8]; 2],
        prefix: Option<&[u8]>,
    ) {
        let keys: Vec<String> = apart
            .iter()
            .map(|key| {
                let key = prefix.and_then(|p| key.strip_prefix(p)).unwrap_or(key);
                key_pattern(key)
            })
            .collect();
        let mut found = lock(&self.found);
        let found = &mut *found;
        *found.counts.get_mut(kind) += 1;
        let examples = &mut found.examples;
        let kept = examples.len();
        let same = examples
            .iter_mut()
            .find(|e| e.kind == kind && e.command == command && e.keys == keys);
        match same {
            Some(example) => example.count += 1,
            None if kept < KEPT_EXAMPLES => examples.push(ReadinessExample {
                kind,
                command: command.to_string(),
                keys,
                count: 1,
            }),
            None => {}
        }
    }

    /// What was counted since the last call, and the commands `commands` counted since (those the gateway
    /// answers itself left out: the destination never sees them); none if nothing was.
    fn take(&self, tenant: &str, commands: &CommandCounters) -> Option<TenantReadiness> {
        let checked = self.checked.swap(0, Ordering::Relaxed);
        let found = std::mem::take(&mut *lock(&self.found));
        let now = commands.calls();
        let before = std::mem::replace(&mut *lock(&self.calls), now.clone());
        let commands: std::collections::BTreeMap<String, u64> = now
            .iter()
            .enumerate()
            .filter_map(|(index, &calls)| {
                let ran = calls.saturating_sub(before.get(index).copied().unwrap_or(0));
                let spec = cmd::by_index(index)?;
                (ran > 0 && Policy::of(spec) != Policy::Local).then(|| (spec.name.to_string(), ran))
            })
            .collect();
        if checked == 0 && found.counts == ReadinessCounts::default() && commands.is_empty() {
            return None;
        }
        let mut examples = Vec::new();
        merge_examples(&mut examples, &found.examples);
        Some(TenantReadiness {
            tenant: tenant.to_string(),
            checked,
            counts: found.counts,
            examples,
            commands,
            probe: false,
        })
    }
}

/// Two keys of a command (argument indices among `keys`) that `destination` places apart: its first key and the
/// first one not in its group.
pub(crate) fn apart(
    destination: &Secondary,
    args: &[Bytes],
    keys: &[usize],
) -> Option<(usize, usize)> {
    let (&first, rest) = keys.split_first()?;
    let group = destination.group_of(args.get(first)?);
    rest.iter()
        .copied()
        .find(|&k| {
            args.get(k)
                .is_some_and(|key| destination.group_of(key) != group)
        })
        .map(|k| (first, k))
}

/// What a command (outside a transaction) whose keys are placed apart meets there.
pub(crate) fn kind_of(spec: &CommandSpec) -> ReadinessKind {
    if is_script(spec) {
        ReadinessKind::Script
    } else if splits(spec.id) {
        ReadinessKind::Split
    } else {
        ReadinessKind::CrossSlot
    }
}

/// Takes every tenant's counts since the last call, for the tenants `snapshot` serves with a destination.
pub(crate) fn report(snapshot: &Snapshot) -> Vec<TenantReadiness> {
    snapshot
        .tenants()
        .iter()
        .filter_map(|tenant| {
            let readiness = tenant.readiness.as_ref()?;
            let mut taken = readiness
                .counters
                .take(&tenant.name, &tenant.runtime.counters.commands)?;
            taken.probe = readiness.probe.is_some();
            Some(taken)
        })
        .collect()
}

/// What a tenant's commands are checked against while it has a destination (its route's secondary table, a
/// migration's; or else its readiness probe's), and what was counted.
pub(crate) struct Readiness {
    pub(crate) counters: Arc<Counters>,
    /// The readiness probe's destination, placement only; none: the route's secondary table.
    pub(crate) probe: Option<Secondary>,
    /// Whether the destination places keys apart: its commands' keys are then checked (else only the commands
    /// run are reported).
    pub(crate) places_apart: bool,
}

impl Readiness {
    /// The readiness of a tenant whose route is `route` and readiness probe `probe`, none without a
    /// destination. A migration's destination comes first: while the route double-writes, the probe waits. The
    /// counts not reported yet of `previous` (the tenant's readiness in the snapshot served so far) go on while
    /// they were made against the same kind of destination.
    pub(crate) fn of(
        route: &super::RoutePlan,
        probe: Option<&RouteTable>,
        previous: Option<&Readiness>,
        commands: &CommandCounters,
    ) -> Option<Readiness> {
        let probe = match route.secondary() {
            Some(_) => None,
            None => Some(Secondary::of_table(probe?)?),
        };
        let destination = probe.as_ref().or(route.secondary())?;
        let places_apart = destination.splits_keys();
        let counters = previous
            .filter(|previous| previous.probe.is_some() == probe.is_some())
            .map_or_else(
                || Arc::new(Counters::new(commands)),
                |previous| previous.counters.clone(),
            );
        Some(Readiness {
            counters,
            probe,
            places_apart,
        })
    }
}

#[cfg(test)]
mod tests;
