//! Applying a control-plane delta to the snapshot being served: only the tenants it names are compiled, the
//! others are carried over as they are (the same `Arc<Tenant>`, metrics and resource plans), and the credential
//! index and resource list are updated in one linear pass each, so that a one-tenant change at 100,000 tenants
//! costs a few milliseconds rather than a rebuild of everything.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

use switchyard_schemas::{SnapshotDelta, ValidationError};

use super::build::{Refused, TenantSource, compile, validate_routes};
use super::{Catalog, Snapshot, Tenant};

impl Snapshot {
    /// This snapshot with `changes` (a delta) applied, as generation `generation`: each tenant of the delta
    /// replaces the served one of its name (a disabled one is dropped, as a full build leaves it out), and the
    /// removed ones are dropped. The delta must apply to this snapshot's revision and epoch.
    pub(crate) fn with_delta(
        &self,
        changes: &switchyard_schemas::Snapshot,
        delta: &SnapshotDelta,
        generation: u64,
        catalog: &mut Catalog,
    ) -> Result<Snapshot, Refused> {
        let applies = self.epoch.is_some()
            && self.epoch == changes.epoch
            && self.revision == Some(delta.after);
        if !applies {
            return Err(Refused::DoesNotApply(format!(
                "a delta from revision {} of epoch {:?} does not apply to revision {:?} of epoch {:?}",
                delta.after, changes.epoch, self.revision, self.epoch
            )));
        }
        validate_routes(&changes.tenants, delta_errors(changes, delta))?;
        let mut gone: HashSet<&str> = delta.removed_tenants.iter().map(String::as_str).collect();
        gone.extend(
            changes
                .tenants
                .iter()
                .filter(|t| t.disabled)
                .map(|t| t.name.as_str()),
        );
        let shared = RefCell::new(&mut *catalog);
        let plan = |url: &str| shared.borrow_mut().plan(url);
        let mut upserts: Vec<Arc<Tenant>> = changes
            .tenants
            .iter()
            .filter(|t| !t.disabled)
            .map(|t| compile(TenantSource::control_plane(t), self, &plan))
            .collect();
        upserts.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        let merged = merge_by_name(
            &self.tenants,
            upserts,
            |name| gone.contains(name),
            |t| &t.name,
        );
        for (old, moved) in self.tenants.iter().zip(&merged.moved) {
            if moved.is_none() {
                catalog.release(&old.route);
            }
        }
        let added = || {
            merged
                .added
                .iter()
                .filter_map(|&i| Some((i, &**merged.list.get(i)?)))
        };
        for (_, tenant) in added() {
            catalog.hold(&tenant.route);
        }
        let by_digest = self.by_digest.moved(&merged.moved, added());
        Ok(Snapshot {
            generation,
            revision: Some(changes.revision),
            epoch: changes.epoch.clone(),
            tenants: merged.list,
            by_digest,
            open_tenant: None,
            resources: catalog.specs(),
        })
    }
}

/// What makes a delta malformed: a tenant named twice, or both changed and removed.
fn delta_errors(
    changes: &switchyard_schemas::Snapshot,
    delta: &SnapshotDelta,
) -> Vec<ValidationError> {
    let removed: HashSet<&str> = delta.removed_tenants.iter().map(String::as_str).collect();
    let mut seen = HashSet::new();
    let mut errors = Vec::new();
    for (i, tenant) in changes.tenants.iter().enumerate() {
        let problem = match (
            seen.insert(tenant.name.as_str()),
            removed.contains(tenant.name.as_str()),
        ) {
            (false, _) => "is named twice in the delta",
            (true, true) => "is also in delta.removed_tenants",
            (true, false) => continue,
        };
        errors.push(ValidationError {
            path: format!("/tenants/{i}/name"),
            message: problem.to_string(),
        });
    }
    errors
}

/// A list sorted by name after [`merge_by_name`].
pub(crate) struct Merged<T> {
    pub list: Vec<T>,
    /// For each entry of the old list, its index in `list`; `None` when it was replaced or dropped.
    pub moved: Vec<Option<u32>>,
    /// The indices in `list` of the entries that came in.
    pub added: Vec<usize>,
}

/// `old` (sorted by name) with `upserts` (sorted by name, each name once) put in, each replacing the old entry
/// of its name, and the old entries whose name is `gone` dropped: one pass over both lists.
pub(crate) fn merge_by_name<T: Clone>(
    old: &[T],
    upserts: Vec<T>,
    gone: impl Fn(&str) -> bool,
    name: impl Fn(&T) -> &str,
) -> Merged<T> {
    let mut merged = Merged {
        list: Vec::with_capacity(old.len() + upserts.len()),
        moved: Vec::with_capacity(old.len()),
        added: Vec::with_capacity(upserts.len()),
    };
    let mut upserts = upserts.into_iter().peekable();
    for entry in old {
        let mut replaced = false;
        while let Some(new) = upserts.next_if(|new| name(new) <= name(entry)) {
            // Names are unique, so only the last one taken can be the entry's.
            replaced = name(&new) == name(entry);
            merged.added.push(merged.list.len());
            merged.list.push(new);
        }
        let kept = !replaced && !gone(name(entry));
        let index = u32::try_from(merged.list.len()).ok();
        merged.moved.push(index.filter(|_| kept));
        if kept {
            merged.list.push(entry.clone());
        }
    }
    for new in upserts {
        merged.added.push(merged.list.len());
        merged.list.push(new);
    }
    merged
}
