//! Migration readiness, from live traffic. While a tenant's route double-writes to a table that places keys
//! apart (several shards, or a Redis Cluster's slots: a migration's destination), each of its commands is
//! checked against that table's placement, and what would fail there (`CROSSSLOT`), or what the gateway would
//! have to split, is counted with a few examples. The gateway hands the counts over at each tracking report; the
//! control plane sums them for the migration (docs/migration.md#readiness).
//!
//! A tenant whose route has no such destination pays one check of an `Option` per command. One that has pays a
//! hash of each key of its multi-key commands and a shared counter add; only a command that would fail takes a
//! lock, to count it and keep its example.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use switchyard_schemas::api::{
    ReadinessCounts, ReadinessExample, ReadinessKind, TenantReadiness, merge_examples,
};

use super::{Secondary, Snapshot, splits};
use crate::cmd::CommandSpec;
use crate::cmd::policy::is_script;
use crate::tracking::lock;

mod pattern;

pub(crate) use pattern::key_pattern;

/// Distinct examples one tenant keeps between two reports: past them only the counts go on (a report names the
/// most frequent `MAX_READINESS_EXAMPLES`), so memory stays bounded whatever the traffic.
const KEPT_EXAMPLES: usize = 64;

/// A tenant's counts since the last report, shared by its sessions on every worker and kept across snapshots
/// while its route keeps a destination.
#[derive(Default)]
pub(crate) struct Counters {
    checked: AtomicU64,
    found: Mutex<Found>,
}

#[derive(Default)]
struct Found {
    counts: ReadinessCounts,
    examples: Vec<ReadinessExample>,
}

impl Counters {
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

    /// What was counted since the last call, none if nothing was checked.
    fn take(&self, tenant: &str) -> Option<TenantReadiness> {
        let checked = self.checked.swap(0, Ordering::Relaxed);
        let found = std::mem::take(&mut *lock(&self.found));
        if checked == 0 && found.counts == ReadinessCounts::default() {
            return None;
        }
        let mut examples = Vec::new();
        merge_examples(&mut examples, &found.examples);
        Some(TenantReadiness {
            tenant: tenant.to_string(),
            checked,
            counts: found.counts,
            examples,
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
        .filter_map(|tenant| tenant.readiness.as_ref()?.take(&tenant.name))
        .collect()
}

#[cfg(test)]
mod tests;
