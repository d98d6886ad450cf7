//! The databases a tenant's route reaches, each named as one place (a "place"), so that two routes reaching one
//! database name it alike: the control plane holds tenants to its sharing rules with them, and a routes file is
//! checked with the same names (`RoutesFile::validate`).
//!
//! Places are read from resource URLs alone: a node is its host (lowercase) and port with the database number, a
//! sentinel-managed master its name under each of its sentinels, a cluster each of its seeds (database 0). TLS,
//! credentials and reading from replicas name no other place (replicas hold their master's keys). Two URLs that
//! name one server differently (a host name and its address, a cluster by seeds the other does not list) are not
//! seen as one.

use std::collections::BTreeSet;

use crate::{Node, ResourceKind, ResourceUrl, RouteTable};

/// Every database `route` reaches, sorted. `url_of` gives the URL of a resource named by name; a reference that
/// names no resource, or a URL that does not parse, reaches nothing (routes are validated against the same).
pub fn places(route: &RouteTable, url_of: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut places = BTreeSet::new();
    for part in route.parts() {
        let databases = part.databases();
        for target in part.targets() {
            let references = target
                .write_resources()
                .iter()
                .chain(target.read_resources());
            for reference in references {
                let url = match reference.contains("://") {
                    true => Some(reference.clone()),
                    false => url_of(reference),
                };
                if let Some(Ok(url)) = url.map(|url| ResourceUrl::parse(&url)) {
                    add(&url.kind, databases, &mut places);
                }
            }
        }
    }
    places.into_iter().collect()
}

/// The places of one resource whose route owns `databases` databases from the resource's own.
fn add(kind: &ResourceKind, databases: u32, places: &mut BTreeSet<String>) {
    let numbers = |first: u32| first..first.saturating_add(databases.max(1));
    let server = |node: &Node| node.to_string().to_ascii_lowercase();
    match kind {
        ResourceKind::Standalone { node, db } => {
            places.extend(numbers(*db).map(|n| format!("{}/{n}", server(node))));
        }
        ResourceKind::Sentinel {
            sentinels,
            master_name,
            db,
            ..
        } => {
            for sentinel in sentinels {
                let master = format!("sentinel {} {master_name}", server(sentinel));
                places.extend(numbers(*db).map(|n| format!("{master}/{n}")));
            }
        }
        // A Redis Cluster has database 0 only.
        ResourceKind::Cluster { seeds, .. } => {
            places.extend(seeds.iter().map(|seed| format!("{}/0", server(seed))));
        }
    }
}

/// Why a tenant without a key namespace may not share a database with a namespaced one (neither an admin
/// tenant): no namespace is the start of every namespace, so its clients would read and write the other's keys
/// (`KEYS *`, `SCAN`, `FLUSHDB`). `bare` is the tenant without one, `namespaced` the other, with its namespace,
/// and `place` the database they share.
pub fn mixed_namespaces(bare: &str, namespaced: &str, namespace: &str, place: &str) -> String {
    format!(
        "tenant '{bare}' has no key namespace, and tenant '{namespaced}' uses database {place} with namespace \
         '{namespace}': no namespace is the start of every namespace, so '{bare}' would see '{namespaced}''s keys"
    )
}
