//! SCAN over every node of a route (each shard, and each master of a cluster shard), with one cursor.
//!
//! The client's cursor encodes where the walk is: `node cursor × nodes + node position`. One client call scans
//! at the node the cursor names and, when that node is finished, goes on with the next ones at cursor 0 while
//! fewer keys than `COUNT` (10 by default, as in Redis) were found, so a small keyspace comes back in one call
//! with cursor 0, as from one Redis. The calls for one client request run one after the other in a task of the
//! worker; its reply slot keeps its place in the client's reply order.

use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::merge::array_elements;
use crate::backend::{Keyspace, Upstream};
use crate::reply::{ReplyHandle, ReplyQueue};
use crate::resp;

/// Redis' default `COUNT`.
const DEFAULT_COUNT: usize = 10;

/// A client cursor: a number, as Redis requires.
pub(super) fn parse_cursor(cursor: &[u8]) -> Option<u64> {
    std::str::from_utf8(cursor).ok()?.parse().ok()
}

/// Where a client cursor points among `nodes` nodes: the node's position and that node's own cursor.
fn decode_cursor(cursor: u64, nodes: usize) -> (usize, u64) {
    let nodes = nodes.max(1) as u64;
    ((cursor % nodes) as usize, cursor / nodes)
}

/// The client cursor for node `position`'s cursor `next` (`None` when it does not fit in 64 bits).
fn encode_cursor(position: usize, next: u64, nodes: usize) -> Option<u64> {
    next.checked_mul(nodes as u64)?.checked_add(position as u64)
}

/// Scans the `shards` (the read upstream of each, in route order) from the client's `cursor` on, with the
/// client's other arguments (`args[2..]`: MATCH, COUNT, TYPE), and delivers one SCAN reply to `reply`.
pub(super) fn start(
    shards: Vec<Result<Upstream, Bytes>>,
    cursor: u64,
    args: Vec<Bytes>,
    reply: ReplyHandle,
    affinity: usize,
) {
    tokio::task::spawn_local(async move {
        // A cluster's masters are known once its first slot map has arrived.
        for upstream in shards.iter().flatten() {
            upstream.wait_for_nodes().await;
        }
        let nodes: Vec<(&Result<Upstream, Bytes>, usize)> = shards
            .iter()
            .flat_map(|shard| {
                let count = shard.as_ref().map_or(1, Upstream::nodes);
                (0..count).map(move |index| (shard, index))
            })
            .collect();
        let (position, cursor) = decode_cursor(cursor, nodes.len());
        let answer = walk(&nodes, position, cursor, &args, affinity).await;
        reply.deliver(answer);
    });
}

async fn walk(
    nodes: &[(&Result<Upstream, Bytes>, usize)],
    mut position: usize,
    mut cursor: u64,
    args: &[Bytes],
    affinity: usize,
) -> Bytes {
    let count = count_option(args).unwrap_or(DEFAULT_COUNT);
    let mut keys: Vec<Bytes> = Vec::new();
    loop {
        let Some(&(upstream, index)) = nodes.get(position) else {
            return resp::error_reply("ERR invalid cursor");
        };
        let upstream = match upstream {
            Ok(upstream) => upstream,
            Err(error) => return error.clone(),
        };
        let reply = ask(upstream, &scan_request(cursor, args), index, affinity).await;
        if reply.first() == Some(&b'-') {
            return reply;
        }
        let Some((next, page)) = parse_reply(&reply) else {
            return resp::error_reply("ERR unexpected reply from a backend");
        };
        keys.extend(page);
        let client_cursor = match next {
            0 if position + 1 < nodes.len() && keys.len() < count => {
                position += 1;
                cursor = 0;
                continue;
            }
            0 if position + 1 < nodes.len() => Some((position + 1) as u64),
            0 => Some(0),
            next => encode_cursor(position, next, nodes.len()),
        };
        let Some(client_cursor) = client_cursor else {
            return resp::error_reply(
                "ERR a backend's SCAN cursor is too large to share among the route's nodes",
            );
        };
        return scan_reply(client_cursor, &keys);
    }
}

/// Sends one request to one node and waits for its reply, through a reply queue of its own.
async fn ask(upstream: &Upstream, raw: &Bytes, node: usize, affinity: usize) -> Bytes {
    let queue = Rc::new(ReplyQueue::default());
    upstream.send_to(
        raw.clone(),
        Keyspace::Node(node),
        queue.reserve(Instant::now()),
        affinity,
    );
    let mut out = BytesMut::new();
    loop {
        queue.drain_ready(&mut out, |_| {});
        if !out.is_empty() {
            return out.freeze();
        }
        queue.wait_ready().await;
    }
}

/// `SCAN cursor <the client's options>`.
fn scan_request(cursor: u64, args: &[Bytes]) -> Bytes {
    let cursor = itoa::Buffer::new().format(cursor).as_bytes().to_vec();
    let mut parts: Vec<&[u8]> = vec![b"SCAN", &cursor];
    parts.extend(args.iter().map(|a| &a[..]));
    let mut raw = BytesMut::new();
    resp::command(&mut raw, &parts);
    raw.freeze()
}

/// The `COUNT` option, when it is a positive integer (anything else is the backend's to refuse).
fn count_option(args: &[Bytes]) -> Option<usize> {
    args.chunks(2).find_map(|pair| match pair {
        [name, value] if name.eq_ignore_ascii_case(b"count") => resp::parse_int(value)
            .filter(|&n| n > 0)
            .map(|n| n as usize),
        _ => None,
    })
}

/// A node's `[cursor, [keys...]]`: the cursor, and each key's raw bulk string.
fn parse_reply(reply: &Bytes) -> Option<(u64, Vec<Bytes>)> {
    let [cursor, keys] = <[Bytes; 2]>::try_from(array_elements(reply)?).ok()?;
    let body = cursor.strip_prefix(b"$")?;
    let digits = &body[body.iter().position(|&b| b == b'\n')? + 1..body.len().checked_sub(2)?];
    let next = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some((next, array_elements(&keys)?))
}

fn scan_reply(cursor: u64, keys: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity(32 + keys.iter().map(Bytes::len).sum::<usize>());
    resp::array_header(&mut out, 2);
    resp::bulk(&mut out, itoa::Buffer::new().format(cursor).as_bytes());
    resp::array_header(&mut out, keys.len());
    for key in keys {
        out.extend_from_slice(key);
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_encode_the_node() {
        assert_eq!(decode_cursor(0, 3), (0, 0));
        assert_eq!(decode_cursor(52, 3), (1, 17));
        assert_eq!(parse_cursor(b"52"), Some(52));
        assert_eq!(parse_cursor(b"x"), None);
        assert_eq!(parse_cursor(b"-1"), None);
        assert_eq!(encode_cursor(1, 17, 3), Some(52));
        assert_eq!(encode_cursor(1, u64::MAX, 3), None);
    }

    #[test]
    fn replies_are_parsed_and_rebuilt() {
        let reply = Bytes::from_static(b"*2\r\n$2\r\n17\r\n*2\r\n$1\r\na\r\n$2\r\nbc\r\n");
        let (next, keys) = parse_reply(&reply).expect("a SCAN reply");
        assert_eq!(next, 17);
        assert_eq!(
            &scan_reply(52, &keys)[..],
            b"*2\r\n$2\r\n52\r\n*2\r\n$1\r\na\r\n$2\r\nbc\r\n"
        );
        assert_eq!(parse_reply(&Bytes::from_static(b"*1\r\n$1\r\n0\r\n")), None);
    }

    #[test]
    fn count_is_read_from_the_options() {
        let args = |list: &[&'static str]| -> Vec<Bytes> {
            list.iter()
                .map(|a| Bytes::from_static(a.as_bytes()))
                .collect()
        };
        assert_eq!(
            count_option(&args(&["MATCH", "a*", "count", "50"])),
            Some(50)
        );
        assert_eq!(count_option(&args(&["COUNT", "0"])), None);
        assert_eq!(count_option(&args(&["TYPE", "hash"])), None);
    }
}
