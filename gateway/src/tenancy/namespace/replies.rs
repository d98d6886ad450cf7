//! Replies that carry key names, shown to a namespaced tenant without its prefix (RESP2 and RESP3 alike).

use bytes::{Bytes, BytesMut};

use crate::cmd::{Command, CommandSpec};
use crate::resp;

/// Where a reply carries key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeysIn {
    /// Every element of an array (`KEYS`).
    Every,
    /// The first element of an array (`BLPOP`, `LMPOP`, `ZMPOP`, `BZPOPMIN`...: the key popped from).
    First,
    /// The second element of `[cursor, [keys...]]` (`SCAN`).
    ScanPage,
    /// `XREAD`/`XREADGROUP`: an array of `[key, entries]` (RESP2), or a map of key to entries (RESP3).
    Streams,
}

impl KeysIn {
    /// Where `spec`'s reply carries key names, if it does.
    pub(super) fn of(spec: &CommandSpec) -> Option<KeysIn> {
        Some(match spec.id {
            Command::Keys => KeysIn::Every,
            Command::Scan => KeysIn::ScanPage,
            Command::Blpop
            | Command::Brpop
            | Command::Bzpopmin
            | Command::Bzpopmax
            | Command::Blmpop
            | Command::Lmpop
            | Command::Zmpop
            | Command::Bzmpop => KeysIn::First,
            Command::Xread | Command::Xreadgroup => KeysIn::Streams,
            _ => return None,
        })
    }
}

/// `reply` with the prefix stripped from the key names at `keys`. Anything else (an error, a null) is returned as
/// it is.
pub(super) fn strip(prefix: &[u8], reply: &[u8], keys: KeysIn) -> Bytes {
    let mut out = BytesMut::with_capacity(reply.len());
    strip_into(prefix, reply, keys, &mut out);
    out.freeze()
}

fn strip_into(prefix: &[u8], reply: &[u8], keys: KeysIn, out: &mut BytesMut) {
    let header = match reply.first() {
        Some(b'*' | b'%') => reply.iter().position(|&b| b == b'\n').map(|i| i + 1),
        _ => None,
    };
    let Some(header) = header else {
        out.extend_from_slice(reply);
        return;
    };
    let map = reply[0] == b'%';
    out.extend_from_slice(&reply[..header]);
    for (i, element) in resp::each_reply(&reply[header..]).enumerate() {
        match keys {
            KeysIn::Every => strip_bulk(prefix, element, out),
            KeysIn::First if i == 0 => strip_bulk(prefix, element, out),
            KeysIn::ScanPage if i == 1 => strip_into(prefix, element, KeysIn::Every, out),
            KeysIn::Streams if map && i % 2 == 0 => strip_bulk(prefix, element, out),
            KeysIn::Streams if !map => strip_into(prefix, element, KeysIn::First, out),
            _ => out.extend_from_slice(element),
        }
    }
}

/// A bulk string reply without the prefix at the start of its content (copied as it is without one).
fn strip_bulk(prefix: &[u8], element: &[u8], out: &mut BytesMut) {
    match stripped_content(prefix, element) {
        Some(name) => resp::bulk(out, name),
        None => out.extend_from_slice(element),
    }
}

/// The content of a bulk string reply that starts with `prefix`, without it.
fn stripped_content<'a>(prefix: &[u8], element: &'a [u8]) -> Option<&'a [u8]> {
    super::super::bulk_content(element)?.strip_prefix(prefix)
}
