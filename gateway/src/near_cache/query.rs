//! The reads a near cache answers (`GET`, `HGET`, `HMGET`, `HGETALL`, `SMEMBERS`, `STRLEN`, one-key `EXISTS`):
//! which request is one, the request a fill sends for it, and its reply in both protocols.
//!
//! Fills read over RESP3 (the tracking connections' protocol); a RESP2 client gets the same reply in RESP2's
//! forms: a map (`HGETALL`) or a set (`SMEMBERS`) as a flat array, a null as RESP2's null bulk string. Only the
//! types these commands answer with are converted; a reply with any other (an error, `WRONGTYPE`) is not
//! cached.

use bytes::{Bytes, BytesMut};

use crate::cmd::Command;
use crate::resp::{self, parse_int, short_length};

/// Which cached read a request is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Get,
    Hget,
    Hmget,
    Hgetall,
    Smembers,
    Strlen,
    Exists,
}

impl Kind {
    /// The command's name, as a fill sends it.
    fn name(self) -> &'static [u8] {
        match self {
            Kind::Get => b"GET",
            Kind::Hget => b"HGET",
            Kind::Hmget => b"HMGET",
            Kind::Hgetall => b"HGETALL",
            Kind::Smembers => b"SMEMBERS",
            Kind::Strlen => b"STRLEN",
            Kind::Exists => b"EXISTS",
        }
    }
}

/// A read the cache answers, as a client sent it: its kind, and its arguments after the key (`HGET`'s field,
/// `HMGET`'s fields; none for the others). Its key is its first argument.
#[derive(Clone, Copy)]
pub(crate) struct Query<'a> {
    pub(crate) kind: Kind,
    pub(crate) rest: &'a [Bytes],
}

impl Query<'static> {
    /// `GET key`.
    pub(crate) const GET: Query<'static> = Query {
        kind: Kind::Get,
        rest: &[],
    };

    /// Whether `command` is one the cache may answer (in some of its forms).
    pub(crate) fn cached(command: Command) -> bool {
        matches!(
            command,
            Command::Get
                | Command::Hget
                | Command::Hmget
                | Command::Hgetall
                | Command::Smembers
                | Command::Strlen
                | Command::Exists
        )
    }
}

impl<'a> Query<'a> {
    /// The read `args` (the command's name first) asks for, when it is one the cache answers: `None` for any
    /// other command, and for the forms the cache does not keep (`EXISTS` of several keys).
    #[inline]
    pub(crate) fn of(command: Command, args: &'a [Bytes]) -> Option<Query<'a>> {
        let kind = match (command, args.len()) {
            (Command::Get, 2) => Kind::Get,
            (Command::Hget, 3) => Kind::Hget,
            (Command::Hmget, 3..) => Kind::Hmget,
            (Command::Hgetall, 2) => Kind::Hgetall,
            (Command::Smembers, 2) => Kind::Smembers,
            (Command::Strlen, 2) => Kind::Strlen,
            (Command::Exists, 2) => Kind::Exists,
            _ => return None,
        };
        Some(Query {
            kind,
            rest: args.get(2..)?,
        })
    }

    /// The query kept apart from the request it came in (its arguments copied: a slice of the request would keep
    /// the client's whole read buffer alive).
    pub(super) fn keep(self) -> OwnedQuery {
        OwnedQuery {
            kind: self.kind,
            rest: self
                .rest
                .iter()
                .map(|a| Bytes::copy_from_slice(a))
                .collect(),
        }
    }
}

/// A [`Query`] as an entry keeps it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) struct OwnedQuery {
    pub(super) kind: Kind,
    pub(super) rest: Box<[Bytes]>,
}

impl OwnedQuery {
    pub(super) fn matches(&self, query: &Query<'_>) -> bool {
        self.kind == query.kind && *self.rest == *query.rest
    }

    /// Its bytes, counted in the entry's size.
    pub(super) fn size(&self) -> u64 {
        self.rest.iter().map(|a| a.len() as u64 + 16).sum()
    }

    /// Writes the request that reads it for `key`.
    pub(super) fn command(&self, out: &mut BytesMut, key: &[u8]) {
        let mut args: Vec<&[u8]> = Vec::with_capacity(2 + self.rest.len());
        args.push(self.kind.name());
        args.push(key);
        args.extend(self.rest.iter().map(|a| &a[..]));
        resp::command(out, &args);
    }
}

/// RESP2's null bulk string.
const NULL_BULK: &[u8] = b"$-1\r\n";

/// `reply` (a RESP3 reply of one of the cached reads, complete) in RESP2's forms: `reply` itself (shared, not
/// copied) when they are the same; `None` when it is not a reply of theirs (an error, another type, a nested
/// aggregate, a malformed one), which is not cached.
pub(super) fn to_resp2(reply: &Bytes) -> Option<Bytes> {
    let mut out = BytesMut::new();
    let mut differs = false;
    let used = convert(reply, &mut out, &mut differs, 0)?;
    if used != reply.len() {
        return None;
    }
    Some(match differs {
        true => out.freeze(),
        false => reply.clone(),
    })
}

/// How deep the cached reads' replies nest: an aggregate (of bulk strings, nulls, integers) holds no other.
const MAX_DEPTH: u8 = 1;

/// Converts the reply at the front of `buf` into `out`; returns its length in `buf`.
fn convert(buf: &[u8], out: &mut BytesMut, differs: &mut bool, depth: u8) -> Option<usize> {
    let (&kind, rest) = buf.split_first()?;
    let (len, used) = match kind {
        b'_' => {
            rest.starts_with(b"\r\n").then_some(())?;
            out.extend_from_slice(NULL_BULK);
            *differs = true;
            return Some(3);
        }
        b':' => {
            let end = rest.iter().position(|&b| b == b'\r')?;
            parse_int(&rest[..end])?;
            let whole = buf.get(..end + 3)?;
            out.extend_from_slice(whole);
            return Some(whole.len());
        }
        b'$' | b'*' | b'%' | b'~' => short_length(rest)?,
        _ => return None,
    };
    let len = usize::try_from(len).ok()?;
    let header = 1 + used;
    if kind == b'$' {
        let whole = buf.get(..header + len + 2)?;
        whole.ends_with(b"\r\n").then_some(())?;
        out.extend_from_slice(whole);
        return Some(whole.len());
    }
    if depth >= MAX_DEPTH {
        return None;
    }
    let elements = match kind {
        b'%' => len.checked_mul(2)?,
        _ => len,
    };
    if kind == b'*' {
        out.extend_from_slice(&buf[..header]);
    } else {
        *differs = true;
        resp::array_header(out, elements);
    }
    let mut at = header;
    for _ in 0..elements {
        at += convert(buf.get(at..)?, out, differs, depth + 1)?;
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_kept_in_both_protocols_and_other_types_refused() {
        let resp2 = |reply: &[u8]| to_resp2(&Bytes::copy_from_slice(reply));
        for same in [
            &b"$2\r\nab\r\n"[..],
            b":3\r\n",
            b"*2\r\n$1\r\na\r\n$0\r\n\r\n",
            b"*0\r\n",
        ] {
            let reply = Bytes::copy_from_slice(same);
            let converted = to_resp2(&reply).expect("a cached reply");
            assert_eq!(converted.as_ptr(), reply.as_ptr(), "{same:?} copied");
        }
        for (reply, expected) in [
            (&b"_\r\n"[..], &b"$-1\r\n"[..]),
            (
                b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n",
                b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
            ),
            (b"%0\r\n", b"*0\r\n"),
            (
                b"~2\r\n$1\r\na\r\n$1\r\nb\r\n",
                b"*2\r\n$1\r\na\r\n$1\r\nb\r\n",
            ),
            (b"*2\r\n$1\r\na\r\n_\r\n", b"*2\r\n$1\r\na\r\n$-1\r\n"),
        ] {
            assert_eq!(resp2(reply).as_deref(), Some(expected), "{reply:?}");
        }
        for refused in [
            &b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"[..],
            b"+OK\r\n",
            b",1.5\r\n",
            b"*1\r\n*0\r\n",
            b"*2\r\n$1\r\na\r\n",
            b"$3\r\nab\r\n",
            b"$1\r\nab\r\n",
            b":x\r\n",
            b"%1\r\n$1\r\nf\r\n",
            b"$1\r\na\r\n:1\r\n",
        ] {
            assert_eq!(resp2(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn only_the_cached_forms_are_queries() {
        let args = |list: &[&str]| -> Vec<Bytes> {
            list.iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect()
        };
        let get = args(&["GET", "k"]);
        assert_eq!(
            Query::of(Command::Get, &get).map(|q| q.kind),
            Some(Kind::Get)
        );
        let hmget = args(&["HMGET", "k", "a", "b"]);
        let query = Query::of(Command::Hmget, &hmget).expect("HMGET");
        assert_eq!(query.rest.len(), 2);
        let owned = query.keep();
        assert!(owned.matches(&query));
        let other = args(&["HMGET", "k", "a"]);
        assert!(!owned.matches(&Query::of(Command::Hmget, &other).expect("HMGET")));
        let mut out = BytesMut::new();
        owned.command(&mut out, b"ns:k");
        assert_eq!(
            &out[..],
            b"*4\r\n$5\r\nHMGET\r\n$4\r\nns:k\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert!(Query::of(Command::Exists, &args(&["EXISTS", "a", "b"])).is_none());
        assert!(Query::of(Command::Set, &args(&["SET", "k", "v"])).is_none());
    }
}
