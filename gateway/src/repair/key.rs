//! One key of a secondary made equal to the primary's: compared by `DUMP` (value and type) and `PEXPIRETIME`
//! (expiry, absolute, so that it can be compared and copied exactly), and copied with `RESTORE ... REPLACE
//! ABSTTL` (or `DEL` when the primary has no such key) in a transaction that `WATCH`es the key on the secondary:
//! a write that reaches the secondary between the repair's read and its write aborts the repair, which then
//! reads again. The payload `RESTORE` loads is always the primary's `DUMP` of the same key.
//!
//! Two payloads can differ for one value: a set or a hash kept in a hash table is dumped in its table's order,
//! which depends on its history, and a small one may be encoded otherwise on each side. Sets, hashes and sorted
//! sets whose payloads differ are therefore compared by content (members, fields and values, members and scores).

use std::io;

use bytes::Bytes;

use crate::backend::direct::{DirectConnection, Value};

/// Expiries closer than this are equal (the two servers' clocks, and a copy made within the same second).
const EXPIRY_SLACK_MS: i64 = 1000;

/// A key's state on one side: its `DUMP` (none: no such key) and its `PEXPIRETIME` (-1: none, -2: no key).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct KeyState {
    dump: Option<Bytes>,
    expires: i64,
}

impl KeyState {
    fn of(dump: &Value, expires: &Value) -> Option<KeyState> {
        let dump = match dump {
            Value::Bulk(payload) => Some(payload.clone()),
            Value::Nil => None,
            _ => return None,
        };
        Some(KeyState {
            dump,
            expires: expires.int()?,
        })
    }

    /// Whether both sides expire alike: neither, or within [`EXPIRY_SLACK_MS`] of each other.
    fn expires_as(&self, other: &KeyState) -> bool {
        match (self.expires, other.expires) {
            (a, b) if a < 0 || b < 0 => a == b,
            (a, b) => (a - b).abs() <= EXPIRY_SLACK_MS,
        }
    }
}

/// Whether both sides hold the same key: same expiry, and the same payload or, for a set, a hash or a sorted set
/// dumped differently, the same content.
async fn same(
    primary: &mut DirectConnection,
    secondary: &mut DirectConnection,
    key: &[u8],
    states: (&KeyState, &KeyState),
) -> Result<bool, Trouble> {
    let (ours, theirs) = states;
    if !ours.expires_as(theirs) {
        return Ok(false);
    }
    match (&ours.dump, &theirs.dump) {
        (a, b) if a == b => Ok(true),
        (Some(_), Some(_)) => {
            let ours = content(primary, key).await.map_err(Trouble::Primary)?;
            let theirs = content(secondary, key).await.map_err(Trouble::Secondary)?;
            Ok(ours.is_some() && ours == theirs)
        }
        _ => Ok(false),
    }
}

/// The content of a set, a hash or a sorted set, in an order of its own (sorted); none for another type.
async fn content(connection: &mut DirectConnection, key: &[u8]) -> io::Result<Option<Vec<Bytes>>> {
    let kind = connection.call(&[b"TYPE", key]).await?;
    let read: &[&[u8]] = match kind.text() {
        Some("set") => &[b"SMEMBERS", key],
        Some("hash") => &[b"HGETALL", key],
        Some("zset") => &[b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"],
        _ => return Ok(None),
    };
    let reply = connection.call(read).await?;
    let Some(items) = reply.array() else {
        return Ok(None);
    };
    let mut items: Vec<Bytes> = items
        .iter()
        .filter_map(|item| match item {
            Value::Bulk(b) => Some(b.clone()),
            _ => None,
        })
        .collect();
    match kind.text() {
        Some("hash") => {
            let mut pairs: Vec<Bytes> = Vec::with_capacity(items.len());
            let mut fields: Vec<(Bytes, Bytes)> = items
                .chunks(2)
                .filter_map(|pair| Some((pair.first()?.clone(), pair.get(1)?.clone())))
                .collect();
            fields.sort();
            for (field, value) in fields {
                pairs.extend([field, value]);
            }
            Ok(Some(pairs))
        }
        Some("set") => {
            items.sort();
            Ok(Some(items))
        }
        _ => Ok(Some(items)),
    }
}

/// What went wrong with a key: a side that does not answer (the repair waits), or a reply that refuses.
pub(super) enum Trouble {
    Primary(io::Error),
    Secondary(io::Error),
    Refused(String),
}

/// What a repair did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Both copies were equal already.
    Equal,
    /// The secondary now holds the primary's copy.
    Copied,
    /// A write reached the secondary meanwhile: nothing was written.
    Raced,
}

/// Reads `key` on the primary: value and expiry in one transaction, so that they belong together.
pub(super) async fn read_primary(
    primary: &mut DirectConnection,
    key: &[u8],
) -> Result<KeyState, Trouble> {
    let replies = primary
        .pipeline(&[
            &[b"MULTI"],
            &[b"DUMP", key],
            &[b"PEXPIRETIME", key],
            &[b"EXEC"],
        ])
        .await
        .map_err(Trouble::Primary)?;
    match replies.last() {
        Some(Value::Array(items)) => match &items[..] {
            [dump, expires] => {
                KeyState::of(dump, expires).ok_or_else(|| rejected(Trouble::Primary, items))
            }
            _ => Err(rejected(Trouble::Primary, items)),
        },
        _ => Err(rejected(Trouble::Primary, &replies)),
    }
}

/// Reads `key` on the secondary; with `watch`, first `WATCH`es it for the write that may follow.
pub(super) async fn read_secondary(
    secondary: &mut DirectConnection,
    key: &[u8],
    watch: bool,
) -> Result<KeyState, Trouble> {
    let read: [&[&[u8]]; 3] = [&[b"WATCH", key], &[b"DUMP", key], &[b"PEXPIRETIME", key]];
    let commands = if watch { &read[..] } else { &read[1..] };
    let replies = secondary
        .pipeline(commands)
        .await
        .map_err(Trouble::Secondary)?;
    match &replies[..] {
        [.., dump, expires] => {
            KeyState::of(dump, expires).ok_or_else(|| rejected(Trouble::Secondary, &replies))
        }
        _ => Err(rejected(Trouble::Secondary, &replies)),
    }
}

/// Compares `key` on both sides, and where they differ copies the primary's onto the secondary, unless a write
/// reached the secondary since it was read.
pub(super) async fn repair(
    primary: &mut DirectConnection,
    secondary: &mut DirectConnection,
    key: &[u8],
) -> Result<Outcome, Trouble> {
    let theirs = read_secondary(secondary, key, true).await?;
    let ours = match read_primary(primary, key).await {
        Ok(ours) => ours,
        Err(trouble) => {
            let _ = secondary.pipeline(&[&[b"UNWATCH"]]).await;
            return Err(trouble);
        }
    };
    if same(primary, secondary, key, (&ours, &theirs)).await? {
        secondary
            .pipeline(&[&[b"UNWATCH"]])
            .await
            .map_err(Trouble::Secondary)?;
        return Ok(Outcome::Equal);
    }
    let expires = ours.expires.max(0).to_string();
    let write: &[&[u8]] = match &ours.dump {
        Some(payload) => &[
            b"RESTORE",
            key,
            expires.as_bytes(),
            payload,
            b"REPLACE",
            b"ABSTTL",
        ],
        None => &[b"DEL", key],
    };
    let replies = secondary
        .pipeline(&[&[b"MULTI"], write, &[b"EXEC"]])
        .await
        .map_err(Trouble::Secondary)?;
    match replies.last() {
        Some(Value::Nil) => Ok(Outcome::Raced),
        Some(Value::Array(items)) if !items.iter().any(|i| matches!(i, Value::Error(_))) => {
            Ok(Outcome::Copied)
        }
        _ => Err(rejected(Trouble::Secondary, &replies)),
    }
}

/// Error replies that say "not here, not now" rather than "no": the key's slot is served by another master of a
/// cluster (or is moving), the cluster is down, the node is loading its data or lost its master. The key waits,
/// as for a side that does not answer, while the topology catches up (see `sides`): a redirect is never followed
/// from here.
const NOT_NOW: [&str; 6] = [
    "MOVED ",
    "ASK ",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "LOADING",
    "MASTERDOWN",
];

/// What the first error among `replies` (one side's) means: a refusal, or for the errors of [`NOT_NOW`], that
/// `side` cannot serve the key now.
fn rejected(side: fn(io::Error) -> Trouble, replies: &[Value]) -> Trouble {
    match refused(replies) {
        Trouble::Refused(text) if NOT_NOW.iter().any(|e| text.starts_with(e)) => {
            side(io::Error::other(text))
        }
        trouble => trouble,
    }
}

/// Whether both sides hold the same `key` now, compared as a repair compares it but with nothing written (the
/// sampler's comparison, see `sample`).
pub(super) async fn equal(
    primary: &mut DirectConnection,
    secondary: &mut DirectConnection,
    key: &[u8],
) -> Result<bool, Trouble> {
    let theirs = read_secondary(secondary, key, false).await?;
    let ours = read_primary(primary, key).await?;
    same(primary, secondary, key, (&ours, &theirs)).await
}

/// The first error among `replies`, or a note that they were not what was asked for.
fn refused(replies: &[Value]) -> Trouble {
    let text = replies
        .iter()
        .flat_map(|reply| match reply {
            Value::Array(items) => items.clone(),
            other => vec![other.clone()],
        })
        .find_map(|reply| match reply {
            Value::Error(text) => Some(String::from_utf8_lossy(&text).into_owned()),
            _ => None,
        });
    Trouble::Refused(text.unwrap_or_else(|| "unexpected reply".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &'static str) -> Value {
        Value::Error(Bytes::from_static(text.as_bytes()))
    }

    #[test]
    fn redirects_and_a_cluster_down_are_not_now_and_other_errors_refusals() {
        let queued = Value::Simple(Bytes::from_static(b"QUEUED"));
        for text in [
            "MOVED 3999 127.0.0.1:7001",
            "ASK 3999 127.0.0.1:7002",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
            "LOADING Redis is loading the dataset in memory",
        ] {
            // The first error decides, as in a transaction's replies (`EXECABORT` after the queued one's).
            let replies = [
                queued.clone(),
                error(text),
                error("EXECABORT Transaction discarded"),
            ];
            assert!(
                matches!(
                    rejected(Trouble::Secondary, &replies),
                    Trouble::Secondary(_)
                ),
                "{text}"
            );
            assert!(
                matches!(rejected(Trouble::Primary, &replies), Trouble::Primary(_)),
                "{text}"
            );
        }
        for text in [
            "OOM command not allowed",
            "READONLY You can't write",
            "NOPERM no",
        ] {
            let refused = rejected(Trouble::Secondary, &[error(text)]);
            assert!(
                matches!(refused, Trouble::Refused(t) if t == text),
                "{text}"
            );
        }
    }
}
