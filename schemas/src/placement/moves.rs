//! What a route change does to where a tenant's keys live: the share of keys a new table would look for in a
//! different place than the one the current table keeps them in.
//!
//! A key lives in the first write resource of its target (reads of replicas and double-write secondaries find
//! nothing the primary does not hold), in the resource's database. Two places are the same when they are the
//! same deployment (the same node; a cluster or sentinel group sharing a seed or a sentinel and the master name)
//! and the same database: a changed password, TLS option or read set moves nothing.
//!
//! The share is exact where the two tables place keys on the same hash: two rings (their arcs over the whole
//! 64-bit hash space), two bucket tables with the same hash and bucket count (every bucket, weighted by the CRC16
//! values that fall in it), and any table against a single target (the other table's own shares). Otherwise
//! (another algorithm, another bucket count) both tables place the same [`SAMPLE_KEYS`] deterministic keys.

use std::collections::BTreeMap;

use super::{BucketHash, Placement};
use crate::{Node, ResourceKind, ResourceUrl, RouteTable, Shard};

/// Keys placed by both tables when their hashes differ.
pub const SAMPLE_KEYS: u32 = 65_536;

/// How a share was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Estimate {
    /// Over the whole hash space or every bucket.
    Exact,
    /// Over [`SAMPLE_KEYS`] keys placed by both tables.
    Sampled,
}

/// Where a table keeps some of the keys: its shard (none for a single table) and the reference of the shard's
/// first write resource as the table writes it (a name or a URL, which holds the database).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    pub shard: Option<String>,
    pub resource: String,
}

/// Keys that would be looked for in `to` while they are kept in `from`: `share` of all the tenant's keys.
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    pub from: Place,
    pub to: Place,
    pub share: f64,
}

/// Every move a change makes, the largest first, and how the shares were found.
#[derive(Clone, Debug, PartialEq)]
pub struct Moves {
    pub moves: Vec<Move>,
    pub estimate: Estimate,
    /// Databases the tenant owns now and would no longer own (`databases` made smaller): `(from, to)`.
    pub databases: Option<(u32, u32)>,
}

impl Moves {
    /// The share of the tenant's keys the moves concern (0 to 1), databases given up left out.
    pub fn share(&self) -> f64 {
        self.moves.iter().map(|m| m.share).sum::<f64>().min(1.0)
    }
}

/// The moves from `old` to `new`; `url_of` gives the URL of a resource name (a reference without `://`). A
/// double-write table keeps keys where its primary does.
pub fn key_moves(
    old: &RouteTable,
    new: &RouteTable,
    url_of: &dyn Fn(&str) -> Option<String>,
) -> Moves {
    let (old, new) = (home_table(old), home_table(new));
    let (pairs, estimate) = pair_shares(old, new);
    let mut moved: BTreeMap<(Place, Place), f64> = BTreeMap::new();
    for ((from, to), share) in pairs {
        let (Some(from), Some(to)) = (place(old, from), place(new, to)) else {
            continue;
        };
        if share > 0.0 && !same_home(&from, &to, url_of) {
            *moved.entry((from, to)).or_default() += share;
        }
    }
    let mut moves: Vec<Move> = moved
        .into_iter()
        .map(|((from, to), share)| Move { from, to, share })
        .collect();
    moves.sort_by(|a, b| b.share.total_cmp(&a.share));
    let databases = (new.databases() < old.databases()).then(|| (old.databases(), new.databases()));
    Moves {
        moves,
        estimate,
        databases,
    }
}

fn home_table(route: &RouteTable) -> &RouteTable {
    match route {
        RouteTable::DoubleWrite { primary, .. } => home_table(primary),
        other => other,
    }
}

/// Shard indices (`None`: the single target) of the two tables and the share of keys each pair holds.
type Pairs = Vec<((Option<usize>, Option<usize>), f64)>;

fn pair_shares(old: &RouteTable, new: &RouteTable) -> (Pairs, Estimate) {
    let sharded = |route: &RouteTable| match route {
        RouteTable::Sharded { hash, shards, .. } => Some(Placement::new(hash, shards)),
        _ => None,
    };
    match (sharded(old), sharded(new)) {
        (None, None) => (vec![((None, None), 1.0)], Estimate::Exact),
        (Some(old), None) => (
            shares(&old)
                .into_iter()
                .map(|(i, s)| ((Some(i), None), s))
                .collect(),
            Estimate::Exact,
        ),
        (None, Some(new)) => (
            shares(&new)
                .into_iter()
                .map(|(i, s)| ((None, Some(i)), s))
                .collect(),
            Estimate::Exact,
        ),
        (Some(old), Some(new)) => {
            let pairs = match (&old, &new) {
                (
                    Placement::Ring {
                        ends: a,
                        owners: oa,
                        ..
                    },
                    Placement::Ring {
                        ends: b,
                        owners: ob,
                        ..
                    },
                ) => Some(ring_overlap(a, oa, b, ob)),
                (
                    Placement::Buckets {
                        hash: ha,
                        owners: oa,
                    },
                    Placement::Buckets {
                        hash: hb,
                        owners: ob,
                    },
                ) if ha == hb && oa.len() == ob.len() => Some(
                    oa.iter()
                        .zip(ob)
                        .enumerate()
                        .map(|(bucket, (&a, &b))| (pair(a, b), bucket_share(*ha, bucket, oa.len())))
                        .collect(),
                ),
                _ => None,
            };
            match pairs {
                Some(pairs) => (pairs, Estimate::Exact),
                None => (sampled(&old, &new), Estimate::Sampled),
            }
        }
    }
}

fn pair(a: u16, b: u16) -> (Option<usize>, Option<usize>) {
    (Some(usize::from(a)), Some(usize::from(b)))
}

/// 2^64, the size of the ring's hash space.
const RING_SPACE: f64 = 18_446_744_073_709_551_616.0;

/// Each shard's share of the keys under one placement.
fn shares(placement: &Placement) -> Vec<(usize, f64)> {
    match placement {
        Placement::Ring { ends, owners, .. } => {
            let mut start = 0u64;
            let mut shares = Vec::with_capacity(ends.len());
            for (&end, &owner) in ends.iter().zip(owners) {
                shares.push((usize::from(owner), arc_share(start, end)));
                start = end.wrapping_add(1);
            }
            shares
        }
        Placement::Buckets { hash, owners } => owners
            .iter()
            .enumerate()
            .map(|(bucket, &owner)| {
                (
                    usize::from(owner),
                    bucket_share(*hash, bucket, owners.len()),
                )
            })
            .collect(),
    }
}

/// The share of the hash space from `start` to `end`, both included.
fn arc_share(start: u64, end: u64) -> f64 {
    (end.saturating_sub(start) as f64 + 1.0) / RING_SPACE
}

/// The two rings' arcs cut where either changes hands: each piece with its owner in both (both rings' last arc
/// ends at `u64::MAX`).
fn ring_overlap(a: &[u64], oa: &[u16], b: &[u64], ob: &[u16]) -> Pairs {
    let (mut i, mut j, mut start) = (0, 0, 0u64);
    let mut pairs = Vec::with_capacity(a.len() + b.len());
    while let (Some(&ea), Some(&eb), Some(&wa), Some(&wb)) =
        (a.get(i), b.get(j), oa.get(i), ob.get(j))
    {
        let end = ea.min(eb);
        pairs.push((pair(wa, wb), arc_share(start, end)));
        if end == u64::MAX {
            break;
        }
        start = end + 1;
        i += usize::from(ea == end);
        j += usize::from(eb == end);
    }
    pairs
}

/// The share of keys in `bucket` of `count`: for CRC16, the fraction of its 65,536 values that fall there; for
/// camellia's 32-bit hash, one bucket's (within 2^-32 of exact when `count` is not a power of two).
fn bucket_share(hash: BucketHash, bucket: usize, count: usize) -> f64 {
    match hash {
        BucketHash::Crc16 => {
            let values = 65_536 / count + usize::from(bucket < 65_536 % count);
            values as f64 / 65_536.0
        }
        BucketHash::Camellia | BucketHash::CamelliaHashtag => 1.0 / count as f64,
    }
}

fn sampled(old: &Placement, new: &Placement) -> Pairs {
    let each = 1.0 / f64::from(SAMPLE_KEYS);
    let mut counts: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for i in 0..SAMPLE_KEYS {
        let key = format!("key:{i}");
        let (a, b) = (old.shard_of(key.as_bytes()), new.shard_of(key.as_bytes()));
        *counts.entry((a, b)).or_default() += each;
    }
    counts
        .into_iter()
        .map(|((a, b), share)| ((Some(a), Some(b)), share))
        .collect()
}

fn place(route: &RouteTable, shard: Option<usize>) -> Option<Place> {
    let (name, target) = match (route, shard) {
        (RouteTable::Single { target, .. }, None) => (None, target),
        (RouteTable::Sharded { shards, .. }, Some(index)) => {
            let Shard { name, target, .. } = shards.get(index)?;
            (Some(name.clone()), target)
        }
        _ => return None,
    };
    Some(Place {
        shard: name,
        resource: target.write_resources().first()?.clone(),
    })
}

/// Whether keys kept in `from` are found in `to`: the same reference, or the same deployment and database.
fn same_home(from: &Place, to: &Place, url_of: &dyn Fn(&str) -> Option<String>) -> bool {
    if from.resource == to.resource {
        return true;
    }
    let url = |reference: &str| match reference.contains("://") {
        true => Some(reference.to_string()),
        false => url_of(reference),
    };
    match (url(&from.resource), url(&to.resource)) {
        (Some(a), Some(b)) => same_data(&a, &b),
        _ => false,
    }
}

/// Whether keys kept at URL `from` are found at URL `to`: the same kind of deployment and the same node and
/// database, sentinel master and database (with a sentinel in common) or cluster (a seed in common).
/// Credentials, TLS and URL parameters do not count; hosts are compared as written.
pub fn same_data(from: &str, to: &str) -> bool {
    match (ResourceUrl::parse(from), ResourceUrl::parse(to)) {
        (Ok(a), Ok(b)) => same_deployment(&a.kind, &b.kind),
        _ => false,
    }
}

fn same_deployment(a: &ResourceKind, b: &ResourceKind) -> bool {
    let shares = |a: &[Node], b: &[Node]| a.iter().any(|n| b.contains(n));
    match (a, b) {
        (
            ResourceKind::Standalone { node: na, db: da },
            ResourceKind::Standalone { node: nb, db: db_b },
        ) => na == nb && da == db_b,
        (
            ResourceKind::Sentinel {
                sentinels: sa,
                master_name: ma,
                db: da,
                ..
            },
            ResourceKind::Sentinel {
                sentinels: sb,
                master_name: mb,
                db: db_b,
                ..
            },
        ) => ma == mb && da == db_b && shares(sa, sb),
        (ResourceKind::Cluster { seeds: sa, .. }, ResourceKind::Cluster { seeds: sb, .. }) => {
            shares(sa, sb)
        }
        _ => false,
    }
}
