//! Which tenant a credential digest selects: a sorted list of (digest prefix, tenant index, credential slot),
//! 16 bytes a credential. A lookup binary-searches the prefix, then compares the full digest the tenant holds in
//! constant time; a delta rebuilds the list in one linear merge, without hashing or sorting every credential.

use std::sync::Arc;

use super::{ByName, Tenant};

#[derive(Default)]
pub(super) struct DigestIndex(Vec<Entry>);

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    /// `digest_prefix` of the digest.
    prefix: u64,
    /// Index of the tenant in the snapshot's sorted list.
    tenant: u32,
    /// Index of the digest in the tenant's `credentials`.
    slot: u32,
}

impl DigestIndex {
    /// The index of every credential of `tenants`.
    pub(super) fn new(tenants: &ByName<Arc<Tenant>>) -> DigestIndex {
        let mut entries: Vec<Entry> = tenants
            .iter()
            .enumerate()
            .flat_map(|(index, tenant)| entries_of(index, tenant))
            .collect();
        entries.sort_unstable();
        DigestIndex(entries)
    }

    /// This index after tenants moved (`moved[i]`: the new index of tenant `i`, `None` if it is gone or replaced)
    /// and `added` (new index, tenant) came in.
    pub(super) fn moved<'a>(
        &self,
        moved: &[Option<u32>],
        added: impl Iterator<Item = (usize, &'a Tenant)>,
    ) -> DigestIndex {
        let mut added: Vec<Entry> = added
            .flat_map(|(index, tenant)| entries_of(index, tenant))
            .collect();
        added.sort_unstable();
        // Indices move in order, so the kept entries stay sorted: one merge of two sorted lists.
        let kept = self.0.iter().filter_map(|entry| {
            let tenant = moved.get(to_usize(entry.tenant)).copied().flatten()?;
            Some(Entry { tenant, ..*entry })
        });
        let mut merged = Vec::with_capacity(self.0.len() + added.len());
        let mut added = added.into_iter().peekable();
        for entry in kept {
            while let Some(new) = added.next_if(|new| *new < entry) {
                merged.push(new);
            }
            merged.push(entry);
        }
        merged.extend(added);
        DigestIndex(merged)
    }

    /// The tenant whose credential `digest` is.
    pub(super) fn find<'a>(
        &self,
        digest: &str,
        tenants: &'a ByName<Arc<Tenant>>,
    ) -> Option<&'a Arc<Tenant>> {
        let prefix = digest_prefix(digest);
        let start = self.0.partition_point(|entry| entry.prefix < prefix);
        self.0
            .get(start..)?
            .iter()
            .take_while(|entry| entry.prefix == prefix)
            .find_map(|entry| {
                let tenant = tenants.get(to_usize(entry.tenant))?;
                let known = tenant.credentials.get(to_usize(entry.slot))?;
                constant_time_eq(known.as_bytes(), digest.as_bytes()).then_some(tenant)
            })
    }

    /// The digests the index maps to each tenant (by tenant index), sorted.
    pub(super) fn digests<'a>(&self, tenants: &'a ByName<Arc<Tenant>>) -> Vec<Vec<&'a str>> {
        let mut digests = vec![Vec::new(); tenants.len()];
        for entry in &self.0 {
            let tenant = tenants.get(to_usize(entry.tenant));
            if let (Some(tenant), Some(list)) = (tenant, digests.get_mut(to_usize(entry.tenant)))
                && let Some(digest) = tenant.credentials.get(to_usize(entry.slot))
            {
                list.push(digest.as_str());
            }
        }
        for list in &mut digests {
            list.sort_unstable();
        }
        digests
    }
}

fn entries_of(index: usize, tenant: &Tenant) -> impl Iterator<Item = Entry> + '_ {
    let tenant_index = to_u32(index);
    tenant
        .credentials
        .iter()
        .enumerate()
        .map(move |(slot, digest)| Entry {
            prefix: digest_prefix(digest),
            tenant: tenant_index,
            slot: to_u32(slot),
        })
}

/// An index that does not fit (beyond 4 billion tenants) points nowhere rather than at another tenant.
fn to_u32(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

fn to_usize(index: u32) -> usize {
    usize::try_from(index).unwrap_or(usize::MAX)
}

/// The sort key of a digest: the first 16 hex digits of its hash (after a certificate's prefix; a digest that
/// is not hex gets key 0 and still works).
fn digest_prefix(digest: &str) -> u64 {
    let hash = digest.rsplit(':').next().unwrap_or(digest);
    hash.get(..16)
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .unwrap_or(0)
}

/// Equality whose time depends only on the length, not on where the bytes differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
