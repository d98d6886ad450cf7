//! INFO's keyspace section summed over the INFO replies of every shard and cluster master of a route, showing a
//! tenant its own databases only.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::ops::Range;

/// One `dbN:keys=..,expires=..,avg_ttl=..` line's numbers.
#[derive(Default, Clone, Copy)]
pub(super) struct DbStats {
    keys: u64,
    expires: u64,
    avg_ttl: u64,
}

/// The keyspace summed over several backends' INFO fields. Keys and expiring keys add up, `avg_ttl` is weighted
/// by the expiring keys. A tenant sees only the databases it owns (`own`, numbered from its `db0`); the others
/// belong to other tenants.
pub(super) fn sum(
    bodies: &[HashMap<&str, &str>],
    own: Option<Range<u32>>,
) -> BTreeMap<u32, DbStats> {
    let mut dbs: BTreeMap<u32, DbStats> = BTreeMap::new();
    for (db, stats) in bodies
        .iter()
        .flatten()
        .filter_map(|(name, value)| parse_db(name, value))
    {
        let db = match &own {
            None => db,
            Some(own) if own.contains(&db) => db - own.start,
            Some(_) => continue,
        };
        let total = dbs.entry(db).or_default();
        let expires = total.expires + stats.expires;
        if expires > 0 {
            total.avg_ttl = ((u128::from(total.avg_ttl) * u128::from(total.expires)
                + u128::from(stats.avg_ttl) * u128::from(stats.expires))
                / u128::from(expires)) as u64;
        }
        total.keys += stats.keys;
        total.expires = expires;
    }
    dbs
}

/// The `dbN:` lines of the databases that hold keys.
pub(super) fn write(text: &mut String, dbs: &BTreeMap<u32, DbStats>) {
    for (db, stats) in dbs.iter().filter(|(_, s)| s.keys > 0) {
        let _ = write!(
            text,
            "db{db}:keys={},expires={},avg_ttl={}\r\n",
            stats.keys, stats.expires, stats.avg_ttl
        );
    }
}

fn parse_db(name: &str, fields: &str) -> Option<(u32, DbStats)> {
    let db = name.strip_prefix("db")?.parse().ok()?;
    let mut stats = DbStats::default();
    for field in fields.split(',') {
        let (name, value) = field.split_once('=')?;
        let value = value.parse().ok()?;
        match name {
            "keys" => stats.keys = value,
            "expires" => stats.expires = value,
            "avg_ttl" => stats.avg_ttl = value,
            _ => {}
        }
    }
    Some((db, stats))
}

/// The text of a bulk string reply, or of a RESP3 verbatim string (without its `txt:` format).
pub(super) fn bulk_body(reply: &[u8]) -> Option<&[u8]> {
    let (kind, rest) = reply.split_first()?;
    let header_end = rest.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&rest[..header_end])
        .ok()?
        .parse()
        .ok()?;
    let body = rest.get(header_end + 2..header_end + 2 + len)?;
    match kind {
        b'$' => Some(body),
        b'=' => body.get(4..),
        _ => None,
    }
}
