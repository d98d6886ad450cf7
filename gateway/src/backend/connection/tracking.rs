//! Connections that track keys (`CLIENT TRACKING on`, over RESP3): Redis pushes an `invalidate` message on the
//! same connection, in order with its replies, whenever a tracked key changes (by any client, a script, expiry,
//! eviction), or every key at once (`FLUSHDB`, `FLUSHALL`). Two kinds ([`Tracks`]): a connection that tracks
//! what it reads itself (the near cache, `near_cache`), and one in broadcasting mode (`BCAST`) that is told of
//! every change under a prefix, whoever read it (the gateway's clients that track, `client_tracking`). What the
//! connection is told goes to its [`TrackingSink`].

use std::io;

use bytes::{Bytes, BytesMut};

use super::handshake::{NodeFacts, Reader, connect};
use crate::backend::NodeSpec;
use crate::net::Stream;
use crate::resp::{self, short_length};

/// Where a tracking connection reports what Redis tells it, on the worker's thread, as it reads it.
pub(crate) trait TrackingSink {
    /// The connection is up, tracking on: the keys it reads from now on are tracked.
    fn up(&self);
    /// Redis says these keys changed; `None`: every key (a flush).
    fn invalidated(&self, keys: Option<Vec<Bytes>>);
    /// The connection is down: what it read is no longer tracked, and changes to it will not be told.
    fn lost(&self);
}

/// What a tracking connection tracks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tracks {
    /// Every key the connection reads (not `OPTIN`: the connection only reads to fill a cache).
    Reads,
    /// Every key under the prefix (`BCAST`, with `PREFIX` unless it is empty), read or not.
    Prefix(Bytes),
}

impl Tracks {
    /// The `CLIENT TRACKING on` that turns it on.
    fn command(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(64);
        match self {
            Tracks::Reads => resp::command(&mut out, &[&b"CLIENT"[..], b"TRACKING", b"on"]),
            Tracks::Prefix(prefix) if prefix.is_empty() => {
                resp::command(&mut out, &[&b"CLIENT"[..], b"TRACKING", b"on", b"BCAST"])
            }
            Tracks::Prefix(prefix) => resp::command(
                &mut out,
                &[
                    &b"CLIENT"[..],
                    b"TRACKING",
                    b"on",
                    b"BCAST",
                    b"PREFIX",
                    prefix,
                ],
            ),
        }
        out.freeze()
    }
}

/// Connects as [`connect`] does (the node spoken to in RESP3), then turns tracking on. A broadcasting
/// connection may be told of a change right after its `+OK`, in the bytes this handshake reads and drops: such a
/// change was executed before the sink hears `up`, which its users account for (see `client_tracking`: a read
/// sent before every watch is up is followed by a flush).
pub(super) async fn connect_tracking(
    node: &NodeSpec,
    tracks: &Tracks,
) -> io::Result<(Stream, NodeFacts)> {
    let (stream, facts) = connect(node).await?;
    Reader::default()
        .exchange(&stream, &tracks.command(), &[b"+OK\r\n"])
        .await?;
    Ok((stream, facts))
}

/// What a push from Redis says, for a tracking connection: `Some(keys)` for an `invalidate` message (`None`
/// inside: every key); `None` for any other push, which is dropped.
pub(super) fn invalidation(push: &[u8]) -> Option<Option<Vec<Bytes>>> {
    let rest = push.strip_prefix(b">2\r\n")?;
    let (kind, rest) = bulk(rest)?;
    if kind != b"invalidate" {
        return None;
    }
    if rest.starts_with(b"_\r\n") || rest.starts_with(b"*-1\r\n") {
        return Some(None);
    }
    let (count, used) = short_length(rest.strip_prefix(b"*")?)?;
    let mut rest = &rest[1 + used..];
    let mut keys = Vec::with_capacity(usize::try_from(count).ok()?.min(1024));
    for _ in 0..count {
        let (key, after) = bulk(rest)?;
        keys.push(Bytes::copy_from_slice(key));
        rest = after;
    }
    Some(Some(keys))
}

/// The bulk string at the front of `buf`, and what follows it.
fn bulk(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let line = buf.strip_prefix(b"$")?;
    let (len, used) = short_length(line).or_else(|| {
        // A length line `short_length` does not read (0 is read; this is only a guard).
        let end = line.iter().position(|&b| b == b'\r')?;
        Some((resp::parse_int(&line[..end])?, end + 2))
    })?;
    let start = used;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    let value = line.get(start..end)?;
    let after = line.get(end.checked_add(2)?..)?;
    Some((value, after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracking_is_turned_on_as_asked() {
        assert_eq!(
            &Tracks::Reads.command()[..],
            b"*3\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\non\r\n"
        );
        assert_eq!(
            &Tracks::Prefix(Bytes::new()).command()[..],
            b"*4\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\non\r\n$5\r\nBCAST\r\n"
        );
        assert!(
            Tracks::Prefix(Bytes::from_static(b"t:"))
                .command()
                .ends_with(b"$6\r\nPREFIX\r\n$2\r\nt:\r\n")
        );
    }

    #[test]
    fn invalidations_are_read_and_other_pushes_dropped() {
        let keys = |push: &[u8]| invalidation(push);
        assert_eq!(
            keys(b">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\na\r\n$3\r\nb:c\r\n"),
            Some(Some(vec![
                Bytes::from_static(b"a"),
                Bytes::from_static(b"b:c")
            ]))
        );
        assert_eq!(keys(b">2\r\n$10\r\ninvalidate\r\n_\r\n"), Some(None));
        assert_eq!(keys(b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n"), None);
        assert_eq!(keys(b">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\na\r\n"), None);
    }
}
