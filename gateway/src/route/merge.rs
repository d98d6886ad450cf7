//! Putting one reply together from the replies of a request's parts: the copies of a double-write, and the
//! per-shard pieces of a split multi-key command. A failed part makes the whole reply an error: a client never
//! gets a half-merged answer.

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use switchyard_schemas::AckMode;

use crate::reply::Combine;
use crate::resp::{self, ReplyScanner};

/// The parts of a request that one shard's write set (or read) produced: primary first.
pub struct Group {
    pub parts: Range<usize>,
    pub ack: AckMode,
}

/// How the shards' replies become the client's reply.
#[derive(Clone)]
pub enum Merge {
    /// One shard: its reply.
    Only,
    /// MGET: element `i` of the client's reply is element `positions[i].1` of shard group `positions[i].0`.
    Mget { positions: Vec<(usize, usize)> },
    /// DEL, UNLINK, EXISTS, TOUCH, DBSIZE: the sum of the integers.
    Sum,
    /// MSET: `+OK` when every shard said so.
    AllOk,
    /// Fan-out commands (FLUSHALL, SCRIPT LOAD, CONFIG SET...): the first reply, unless one failed.
    First,
    /// KEYS: every shard's elements, one array.
    Concat,
}

/// One group per part, each a single reply (shards without double-writes, the masters of a cluster fan-out).
pub fn one_each(parts: usize) -> Vec<Group> {
    (0..parts)
        .map(|i| Group {
            parts: i..i + 1,
            ack: AckMode::Primary,
        })
        .collect()
}

pub fn combiner(groups: Vec<Group>, merge: Merge) -> Combine {
    Box::new(move |parts: Vec<Bytes>| {
        let replies: Vec<Bytes> = groups.iter().map(|group| reduce(&parts, group)).collect();
        if let Some(error) = replies.iter().find(|r| is_error(r)) {
            return error.clone();
        }
        merge_replies(replies, &merge)
            .unwrap_or_else(|| error_reply("ERR unexpected reply from a backend"))
    })
}

/// One shard's reply by its ack mode: the primary's, or with `all_check_error` the first failure.
fn reduce(parts: &[Bytes], group: &Group) -> Bytes {
    let replies = parts.get(group.parts.clone()).unwrap_or_default();
    let primary = replies.first().cloned().unwrap_or_default();
    match group.ack {
        AckMode::AllCheckError => replies
            .iter()
            .find(|r| is_error(r))
            .cloned()
            .unwrap_or(primary),
        AckMode::Primary | AckMode::All => primary,
    }
}

fn merge_replies(replies: Vec<Bytes>, merge: &Merge) -> Option<Bytes> {
    let mut out = BytesMut::new();
    match merge {
        Merge::Only | Merge::First => return replies.into_iter().next(),
        Merge::AllOk => resp::simple(&mut out, b"OK"),
        Merge::Sum => {
            let mut total: i64 = 0;
            for reply in &replies {
                total = total.checked_add(integer(reply)?)?;
            }
            resp::integer(&mut out, total);
        }
        Merge::Concat => {
            let arrays = replies
                .iter()
                .map(array_elements)
                .collect::<Option<Vec<_>>>()?;
            resp::array_header(&mut out, arrays.iter().map(Vec::len).sum());
            for element in arrays.iter().flatten() {
                out.extend_from_slice(element);
            }
        }
        Merge::Mget { positions } => {
            let arrays = replies
                .iter()
                .map(array_elements)
                .collect::<Option<Vec<_>>>()?;
            resp::array_header(&mut out, positions.len());
            for &(group, index) in positions {
                out.extend_from_slice(arrays.get(group)?.get(index)?);
            }
        }
    }
    Some(out.freeze())
}

fn is_error(reply: &[u8]) -> bool {
    reply.first() == Some(&b'-')
}

fn error_reply(text: &str) -> Bytes {
    let mut out = BytesMut::new();
    resp::error(&mut out, text);
    out.freeze()
}

fn integer(reply: &[u8]) -> Option<i64> {
    let digits = reply.strip_prefix(b":")?.strip_suffix(b"\r\n")?;
    resp::parse_int(digits)
}

/// The raw elements of an array reply.
fn array_elements(reply: &Bytes) -> Option<Vec<Bytes>> {
    let header_end = reply.windows(2).position(|w| w == b"\r\n")?;
    let count = resp::parse_int(reply.strip_prefix(b"*")?.get(..header_end - 1)?)?;
    let mut elements = Vec::with_capacity(count.max(0) as usize);
    let mut offset = header_end + 2;
    let mut scanner = ReplyScanner::default();
    for _ in 0..count.max(0) {
        let len = scanner.scan(reply.get(offset..)?).ok()??;
        elements.push(reply.slice(offset..offset + len));
        offset += len;
    }
    Some(elements)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn combine(groups: Vec<Group>, merge: Merge, parts: &[&[u8]]) -> Bytes {
        combiner(groups, merge)(parts.iter().map(|p| Bytes::copy_from_slice(p)).collect())
    }

    #[test]
    fn mget_is_put_back_in_key_order() {
        // keys a b c a: a, c on shard 0 ("MGET a c a"), b on shard 1.
        let merged = combine(
            one_each(2),
            Merge::Mget {
                positions: vec![(0, 0), (1, 0), (0, 1), (0, 2)],
            },
            &[
                b"*3\r\n$2\r\nva\r\n$-1\r\n$2\r\nva\r\n",
                b"*1\r\n$2\r\nvb\r\n",
            ],
        );
        assert_eq!(
            &merged[..],
            b"*4\r\n$2\r\nva\r\n$2\r\nvb\r\n$-1\r\n$2\r\nva\r\n"
        );
    }

    #[test]
    fn sums_and_oks_and_errors() {
        assert_eq!(
            &combine(one_each(3), Merge::Sum, &[b":1\r\n", b":0\r\n", b":2\r\n"])[..],
            b":3\r\n"
        );
        assert_eq!(
            &combine(one_each(2), Merge::AllOk, &[b"+OK\r\n", b"+OK\r\n"])[..],
            b"+OK\r\n"
        );
        assert_eq!(
            &combine(one_each(2), Merge::AllOk, &[b"+OK\r\n", b"-ERR down\r\n"])[..],
            b"-ERR down\r\n"
        );
        assert_eq!(
            &combine(
                one_each(2),
                Merge::Concat,
                &[b"*1\r\n$1\r\na\r\n", b"*2\r\n$1\r\nb\r\n$1\r\nc\r\n"]
            )[..],
            b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
        );
        assert_eq!(
            &combine(one_each(2), Merge::Sum, &[b":1\r\n", b"+what\r\n"])[..],
            b"-ERR unexpected reply from a backend\r\n"
        );
    }

    #[test]
    fn ack_modes_reduce_a_double_write() {
        let both = |ack| vec![Group { parts: 0..2, ack }];
        let parts: &[&[u8]] = &[b"+OK\r\n", b"-ERR secondary down\r\n"];
        assert_eq!(
            &combine(both(AckMode::All), Merge::Only, parts)[..],
            b"+OK\r\n"
        );
        assert_eq!(
            &combine(both(AckMode::AllCheckError), Merge::Only, parts)[..],
            b"-ERR secondary down\r\n"
        );
    }
}
