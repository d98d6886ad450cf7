//! INFO's keyspace section summed over the `INFO keyspace` replies of every shard and cluster master of a route,
//! showing a tenant its own databases only.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;

use bytes::{Bytes, BytesMut};

use crate::resp::{self, Protocol};

/// One `dbN:keys=..,expires=..,avg_ttl=..` line's numbers.
#[derive(Default, Clone, Copy)]
struct DbStats {
    keys: u64,
    expires: u64,
    avg_ttl: u64,
}

/// The keyspace section summed over several backends' `INFO keyspace` replies (bulk strings), after `local`
/// (the gateway's other sections; `None` for a partial sum, such as one cluster's masters). Keys and expiring
/// keys add up, `avg_ttl` is weighted by the expiring keys. A tenant sees only the databases it owns (`own`,
/// numbered from its `db0`); the others belong to other tenants. A failed backend adds nothing rather than
/// failing INFO.
pub(super) fn sum(
    local: Option<&str>,
    replies: &[Bytes],
    own: Option<Range<u32>>,
    protocol: Protocol,
) -> Bytes {
    let mut dbs: BTreeMap<u32, DbStats> = BTreeMap::new();
    for body in replies.iter().filter_map(|reply| bulk_body(reply)) {
        for line in String::from_utf8_lossy(body).split("\r\n") {
            let Some((db, stats)) = parse_db_line(line) else {
                continue;
            };
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
    }
    let mut text = local.map(str::to_string).unwrap_or_default();
    if !text.is_empty() {
        text.push_str("\r\n");
    }
    text.push_str("# Keyspace\r\n");
    for (db, stats) in dbs.iter().filter(|(_, s)| s.keys > 0) {
        let _ = write!(
            text,
            "db{db}:keys={},expires={},avg_ttl={}\r\n",
            stats.keys, stats.expires, stats.avg_ttl
        );
    }
    let mut out = BytesMut::new();
    resp::verbatim(&mut out, text.as_bytes(), protocol);
    out.freeze()
}

fn parse_db_line(line: &str) -> Option<(u32, DbStats)> {
    let (db, fields) = line.strip_prefix("db")?.split_once(':')?;
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
    Some((db.parse().ok()?, stats))
}

/// The text of a bulk string reply, or of a RESP3 verbatim string (without its `txt:` format).
fn bulk_body(reply: &[u8]) -> Option<&[u8]> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Bytes {
        let mut out = BytesMut::new();
        resp::bulk(&mut out, text.as_bytes());
        out.freeze()
    }

    #[test]
    fn keyspaces_add_up() {
        let replies = [
            bulk(
                "# Keyspace\r\ndb0:keys=10,expires=2,avg_ttl=1000\r\ndb3:keys=1,expires=0,avg_ttl=0\r\n",
            ),
            bulk("# Keyspace\r\ndb0:keys=5,expires=2,avg_ttl=3000\r\n"),
            Bytes::from_static(b"-ERR down\r\n"),
        ];
        assert_eq!(
            sum(Some("# Server\r\n"), &replies, None, Protocol::Resp2),
            bulk(
                "# Server\r\n\r\n# Keyspace\r\ndb0:keys=15,expires=4,avg_ttl=2000\r\ndb3:keys=1,expires=0,avg_ttl=0\r\n"
            )
        );
        assert_eq!(
            sum(None, &replies, Some(3..4), Protocol::Resp2),
            bulk("# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n")
        );
        // A tenant on database 0 does not see its neighbours' on 3; one that owns 0 to 3 sees both.
        assert_eq!(
            sum(None, &replies, Some(0..1), Protocol::Resp2),
            bulk("# Keyspace\r\ndb0:keys=15,expires=4,avg_ttl=2000\r\n")
        );
        assert_eq!(
            sum(None, &replies, Some(0..4), Protocol::Resp2),
            bulk(
                "# Keyspace\r\ndb0:keys=15,expires=4,avg_ttl=2000\r\ndb3:keys=1,expires=0,avg_ttl=0\r\n"
            )
        );
        assert_eq!(
            sum(None, &[], None, Protocol::Resp2),
            bulk("# Keyspace\r\n")
        );
    }
}
