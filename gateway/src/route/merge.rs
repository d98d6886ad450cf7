//! Putting one reply together from the replies of a request's parts: the copies of a double-write, and the
//! per-shard pieces of a split multi-key command. A failed part makes the whole reply an error: a client never
//! gets a half-merged answer.

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use switchyard_schemas::AckMode;

use crate::reply::Combine;
use crate::resp::{self, Protocol};

/// The parts of a request that one shard's write set (or read) produced: primary first.
pub(super) struct Group {
    pub parts: Range<usize>,
    pub ack: AckMode,
}

/// How the shards' replies become the client's reply.
#[derive(Clone)]
pub(crate) enum Merge {
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
    /// KEYS, PUBSUB SHARDCHANNELS: every shard's elements, one array.
    Concat,
    /// PUBSUB SHARDNUMSUB: `[name, count, ...]` from every node, for the same names in the same order; the counts
    /// are summed.
    Counts,
    /// RANDOMKEY: one of the non-nil replies (the `n`th, modulo their number), nil when every node is empty.
    Random(u64),
    /// INFO: the gateway's fields and sections (`local`) with the backends' fields combined from every backend's
    /// INFO reply (see `crate::info`). A failed backend adds nothing rather than failing INFO.
    Info {
        /// `None` for a partial combination (one cluster's masters), combined again with the other shards'.
        local: Option<Arc<crate::info::Local>>,
        /// The backend databases the tenant owns, shown numbered from 0 (none: every database, as it is).
        own: Option<std::ops::Range<u32>>,
        /// What the client speaks: the reply is a verbatim string in RESP3.
        protocol: Protocol,
    },
    /// SCRIPT EXISTS: arrays of 0/1, element by element; 1 only where every backend said 1 (a script is usable
    /// only if EVALSHA finds it wherever a key may land).
    AllOf,
}

/// One group per part, each a single reply (shards without double-writes, the masters of a cluster fan-out).
pub(super) fn one_each(parts: usize) -> Vec<Group> {
    (0..parts)
        .map(|i| Group {
            parts: i..i + 1,
            ack: AckMode::Primary,
        })
        .collect()
}

impl Merge {
    /// Whether every copy of a double-written target must answer (not only those its ack mode waits for).
    pub(crate) fn needs_every_copy(&self) -> bool {
        matches!(self, Merge::AllOf)
    }

    /// How the replies of one cluster's masters merge before they join the other shards' replies.
    pub(crate) fn per_node(&self) -> Merge {
        match self {
            // Summed once more with the other shards, where the gateway's sections go first.
            Merge::Info { protocol, .. } => Merge::Info {
                local: None,
                own: None,
                protocol: *protocol,
            },
            merge => merge.clone(),
        }
    }
}

pub(super) fn combiner(groups: Vec<Group>, merge: Merge) -> Combine {
    Box::new(move |parts: Vec<Bytes>| {
        let replies: Vec<&Bytes> = groups.iter().map(|group| reduce(&parts, group)).collect();
        if let Merge::Info {
            local,
            own,
            protocol,
        } = &merge
        {
            let replies: Vec<Bytes> = replies.into_iter().cloned().collect();
            return match local {
                Some(local) => local.reply(&replies, own.clone(), *protocol),
                None => crate::info::partial(&replies, *protocol),
            };
        }
        if let Some(error) = replies.iter().find(|r| is_error(r)) {
            return Bytes::clone(error);
        }
        merge_replies(&replies, &merge).unwrap_or_else(|| {
            // A reply that does not fit: an error further into a run's replies (looked for only now), or a reply
            // of the wrong kind.
            match replies
                .iter()
                .flat_map(|r| resp::each_reply(r))
                .find(|r| is_error(r))
            {
                Some(error) => Bytes::copy_from_slice(error),
                None => resp::error_reply("ERR unexpected reply from a backend"),
            }
        })
    })
}

/// One shard's reply by its ack mode: the primary's, or with `all_check_error` the first failure.
fn reduce<'a>(parts: &'a [Bytes], group: &Group) -> &'a Bytes {
    static NONE: Bytes = Bytes::new();
    let replies = parts.get(group.parts.clone()).unwrap_or_default();
    let primary = replies.first().unwrap_or(&NONE);
    match group.ack {
        AckMode::AllCheckError => replies.iter().find(|r| is_error(r)).unwrap_or(primary),
        AckMode::Primary | AckMode::All => primary,
    }
}

fn merge_replies(replies: &[&Bytes], merge: &Merge) -> Option<Bytes> {
    let mut out = BytesMut::new();
    match merge {
        Merge::Only | Merge::First | Merge::Info { .. } => {
            return replies.first().map(|r| Bytes::clone(r));
        }
        Merge::AllOk => {
            // Each part may be a run: every reply in it must be a success.
            if replies
                .iter()
                .flat_map(|r| resp::each_reply(r))
                .any(is_error)
            {
                return None;
            }
            resp::simple(&mut out, b"OK");
        }
        Merge::Sum => {
            let mut total: i64 = 0;
            for reply in replies.iter().flat_map(|r| resp::each_reply(r)) {
                total = total.checked_add(integer(reply)?)?;
            }
            resp::integer(&mut out, total);
        }
        Merge::Concat => {
            let mut elements = Vec::new();
            for reply in replies {
                push_elements(reply, &mut elements)?;
            }
            out.reserve(replies.iter().map(|r| r.len()).sum::<usize>() + 16);
            resp::array_header(&mut out, elements.len());
            for element in elements {
                out.extend_from_slice(element);
            }
        }
        Merge::Counts => {
            let mut totals: Vec<(&[u8], i64)> = Vec::new();
            let mut elements = Vec::new();
            for (node, reply) in replies.iter().enumerate() {
                elements.clear();
                push_elements(reply, &mut elements)?;
                if node == 0 {
                    totals = elements.chunks(2).map(|pair| (pair[0], 0)).collect();
                }
                if elements.len() != 2 * totals.len() {
                    return None;
                }
                for (total, pair) in totals.iter_mut().zip(elements.chunks(2)) {
                    total.1 = total.1.checked_add(integer(pair.get(1)?)?)?;
                }
            }
            resp::array_header(&mut out, 2 * totals.len());
            for (name, count) in totals {
                out.extend_from_slice(name);
                resp::integer(&mut out, count);
            }
        }
        Merge::Random(pick) => {
            let keys: Vec<&Bytes> = replies
                .iter()
                .copied()
                .filter(|r| &r[..] != b"$-1\r\n" && &r[..] != b"_\r\n")
                .collect();
            return match keys.len() {
                0 => replies.first().map(|r| Bytes::clone(r)),
                n => keys
                    .get((*pick % n as u64) as usize)
                    .map(|r| Bytes::clone(r)),
            };
        }
        Merge::AllOf => {
            let mut all: Option<Vec<i64>> = None;
            let mut elements = Vec::new();
            for reply in replies {
                elements.clear();
                push_elements(reply, &mut elements)?;
                let flags = elements
                    .iter()
                    .map(|e| integer(e))
                    .collect::<Option<Vec<i64>>>()?;
                all = Some(match all {
                    None => flags,
                    Some(all) if all.len() == flags.len() => {
                        all.iter().zip(&flags).map(|(a, b)| (*a).min(*b)).collect()
                    }
                    Some(_) => return None,
                });
            }
            let all = all?;
            resp::array_header(&mut out, all.len());
            for flag in all {
                resp::integer(&mut out, flag);
            }
        }
        Merge::Mget { positions } => {
            // Every group's elements in one list; group `g`'s are `elements[bounds[g]..bounds[g + 1]]`.
            let mut elements = Vec::with_capacity(positions.len());
            let mut bounds = Vec::with_capacity(replies.len() + 1);
            bounds.push(0);
            for reply in replies {
                bounds.push(bounds.last()? + push_elements(reply, &mut elements)?);
            }
            out.reserve(replies.iter().map(|r| r.len()).sum::<usize>() + 16);
            resp::array_header(&mut out, positions.len());
            for &(group, index) in positions {
                let (start, end) = (*bounds.get(group)?, *bounds.get(group + 1)?);
                out.extend_from_slice(
                    elements
                        .get(start + index)
                        .filter(|_| start + index < end)?,
                );
            }
        }
    }
    Some(out.freeze())
}

fn is_error(reply: &[u8]) -> bool {
    reply.first() == Some(&b'-')
}

fn integer(reply: &[u8]) -> Option<i64> {
    let digits = reply.strip_prefix(b":")?.strip_suffix(b"\r\n")?;
    resp::parse_int(digits)
}

/// The raw elements of an array reply.
pub(super) fn array_elements(reply: &Bytes) -> Option<Vec<Bytes>> {
    let mut elements = Vec::new();
    push_elements(reply, &mut elements)?;
    Some(elements.into_iter().map(|e| reply.slice_ref(e)).collect())
}

/// Appends the elements of `replies` to `elements` and returns how many there are: one complete array reply (as
/// the backend's scanner delimited it), or a run's array replies back to back.
fn push_elements<'a>(replies: &'a [u8], elements: &mut Vec<&'a [u8]>) -> Option<usize> {
    let mut offset = 0;
    let mut total = 0;
    while let Some(reply) = replies.get(offset..).filter(|rest| !rest.is_empty()) {
        let (count, header) = match reply.strip_prefix(b"*").and_then(resp::short_length) {
            Some((count, line)) => (count, 1 + line),
            None => {
                let header_end = reply.windows(2).position(|w| w == b"\r\n")?;
                let count = resp::parse_int(reply.strip_prefix(b"*")?.get(..header_end - 1)?)?;
                (count, header_end + 2)
            }
        };
        let count = usize::try_from(count).unwrap_or(0);
        offset += header;
        elements.reserve(count.min(reply.len() / 4)); // every element takes 4 bytes or more
        for _ in 0..count {
            let rest = replies.get(offset..)?;
            let len = resp::reply_len(rest)?;
            elements.push(rest.get(..len)?);
            offset += len;
        }
        total += count;
    }
    Some(total)
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

    /// A part may be a run: the replies of several sub-commands back to back, each looked at.
    #[test]
    fn runs_merge_reply_by_reply() {
        // keys a b c: a and c on one node (two sub-commands, one run), b on another.
        let merged = combine(
            one_each(2),
            Merge::Mget {
                positions: vec![(0, 0), (1, 0), (0, 1)],
            },
            &[b"*1\r\n$2\r\nva\r\n*1\r\n$-1\r\n", b"*1\r\n$2\r\nvb\r\n"],
        );
        assert_eq!(&merged[..], b"*3\r\n$2\r\nva\r\n$2\r\nvb\r\n$-1\r\n");
        let run: &[u8] = b":1\r\n:0\r\n:2\r\n";
        assert_eq!(
            &combine(one_each(2), Merge::Sum, &[run, b":4\r\n"])[..],
            b":7\r\n"
        );
        let failed: &[u8] = b"+OK\r\n-OOM no memory\r\n+OK\r\n";
        for merge in [Merge::AllOk, Merge::Sum] {
            assert_eq!(
                &combine(one_each(2), merge, &[b"+OK\r\n", failed])[..],
                b"-OOM no memory\r\n"
            );
        }
        let failed: &[u8] = b"*1\r\n$1\r\nx\r\n-ERR gone\r\n";
        let mget = Merge::Mget {
            positions: vec![(0, 0), (0, 1)],
        };
        assert_eq!(&combine(one_each(1), mget, &[failed])[..], b"-ERR gone\r\n");
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
            &combine(
                one_each(2),
                Merge::AllOf,
                &[b"*3\r\n:1\r\n:1\r\n:0\r\n", b"*3\r\n:0\r\n:1\r\n:0\r\n"]
            )[..],
            b"*3\r\n:0\r\n:1\r\n:0\r\n"
        );
        assert_eq!(
            &combine(
                one_each(3),
                Merge::Random(7),
                &[b"$-1\r\n", b"$1\r\na\r\n", b"$-1\r\n"]
            )[..],
            b"$1\r\na\r\n"
        );
        assert_eq!(
            &combine(one_each(2), Merge::Random(7), &[b"$-1\r\n", b"$-1\r\n"])[..],
            b"$-1\r\n"
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
