//! Writing RESP replies into an output buffer.

use bytes::{BufMut, Bytes, BytesMut};

use super::Protocol;

pub(crate) fn simple(out: &mut BytesMut, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.put_u8(b'+');
    out.put_slice(text);
    out.put_slice(b"\r\n");
}

/// An error reply; `text` starts with its code (`ERR ...`, `NOAUTH ...`) and has no leading `-`.
/// An error reply on its own, for a reply slot.
pub(crate) fn error_reply(text: &str) -> Bytes {
    let mut out = BytesMut::new();
    error(&mut out, text);
    out.freeze()
}

pub(crate) fn error(out: &mut BytesMut, text: &str) {
    out.reserve(text.len() + 3);
    out.put_u8(b'-');
    // An error is one line: a stray newline from anywhere would desynchronise the client.
    for &b in text.as_bytes() {
        out.put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
    }
    out.put_slice(b"\r\n");
}

pub(crate) fn integer(out: &mut BytesMut, value: i64) {
    out.put_u8(b':');
    out.put_slice(itoa::Buffer::new().format(value).as_bytes());
    out.put_slice(b"\r\n");
}

pub(crate) fn bulk(out: &mut BytesMut, value: &[u8]) {
    out.reserve(value.len() + 16);
    header(out, b'$', value.len());
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

pub(crate) fn null_bulk(out: &mut BytesMut) {
    out.put_slice(b"$-1\r\n");
}

/// Nil: RESP2's nil bulk string, RESP3's null.
pub(crate) fn null(out: &mut BytesMut, protocol: Protocol) {
    match protocol {
        Protocol::Resp2 => null_bulk(out),
        Protocol::Resp3 => out.put_slice(b"_\r\n"),
    }
}

/// Null array: RESP2's nil multibulk (`*-1`), RESP3's null.
pub(crate) fn null_array(out: &mut BytesMut, protocol: Protocol) {
    match protocol {
        Protocol::Resp2 => out.put_slice(b"*-1\r\n"),
        Protocol::Resp3 => out.put_slice(b"_\r\n"),
    }
}

/// Text as Redis sends `INFO` and `CLIENT LIST`: a bulk string, or in RESP3 a verbatim string of format `txt`.
pub(crate) fn verbatim(out: &mut BytesMut, text: &[u8], protocol: Protocol) {
    match protocol {
        Protocol::Resp2 => bulk(out, text),
        Protocol::Resp3 => {
            out.reserve(text.len() + 20);
            header(out, b'=', text.len() + 4);
            out.put_slice(b"txt:");
            out.put_slice(text);
            out.put_slice(b"\r\n");
        }
    }
}

/// The header of a set of `len` elements: RESP2's array, RESP3's set.
pub(crate) fn set_header(out: &mut BytesMut, len: usize, protocol: Protocol) {
    match protocol {
        Protocol::Resp2 => array_header(out, len),
        Protocol::Resp3 => header(out, b'~', len),
    }
}

/// The header of a map of `pairs` entries: RESP2's array of twice as many elements, RESP3's map.
pub(crate) fn map_header(out: &mut BytesMut, pairs: usize, protocol: Protocol) {
    match protocol {
        Protocol::Resp2 => array_header(out, 2 * pairs),
        Protocol::Resp3 => header(out, b'%', pairs),
    }
}

/// The header of a pub/sub frame of `len` elements: RESP2's array, RESP3's push.
pub(crate) fn push_header(out: &mut BytesMut, len: usize, protocol: Protocol) {
    match protocol {
        Protocol::Resp2 => array_header(out, len),
        Protocol::Resp3 => header(out, b'>', len),
    }
}

pub(crate) fn array_header(out: &mut BytesMut, len: usize) {
    header(out, b'*', len);
}

/// A request as a multibulk array of bulk strings.
pub(crate) fn command<A: AsRef<[u8]>>(out: &mut BytesMut, args: &[A]) {
    array_header(out, args.len());
    for arg in args {
        bulk(out, arg.as_ref());
    }
}

/// A request of `count` arguments as a multibulk array of bulk strings, each argument the concatenation of its
/// two parts (a key namespace's prefix and the key the client sent, or an empty prefix and the argument).
/// `placed` is told where each argument's bytes are in `out`.
pub(crate) fn command_prefixed<'a>(
    out: &mut BytesMut,
    count: usize,
    parts: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    mut placed: impl FnMut(usize, usize),
) {
    array_header(out, count);
    for (prefix, arg) in parts {
        header(out, b'$', prefix.len() + arg.len());
        let start = out.len();
        out.extend_from_slice(prefix);
        out.extend_from_slice(arg);
        placed(start, out.len());
        out.extend_from_slice(b"\r\n");
    }
}

fn header(out: &mut BytesMut, kind: u8, len: usize) {
    // Assembled on the stack and appended at once: one capacity check instead of three.
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(len).as_bytes();
    let mut line = [0u8; 24];
    line[0] = kind;
    line[1..=digits.len()].copy_from_slice(digits);
    line[digits.len() + 1..digits.len() + 3].copy_from_slice(b"\r\n");
    out.extend_from_slice(&line[..digits.len() + 3]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_each_type() {
        let mut out = BytesMut::new();
        simple(&mut out, b"OK");
        error(&mut out, "ERR bad\r\nthing");
        integer(&mut out, -7);
        bulk(&mut out, b"hi");
        null_bulk(&mut out);
        command(&mut out, &["GET", "k"]);
        assert_eq!(
            &out[..],
            b"+OK\r\n-ERR bad  thing\r\n:-7\r\n$2\r\nhi\r\n$-1\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
        );
    }

    #[test]
    fn replies_that_differ_between_protocols() {
        let mut resp2 = BytesMut::new();
        let mut resp3 = BytesMut::new();
        for (out, protocol) in [(&mut resp2, Protocol::Resp2), (&mut resp3, Protocol::Resp3)] {
            null(out, protocol);
            null_array(out, protocol);
            verbatim(out, b"a:1", protocol);
            map_header(out, 2, protocol);
            set_header(out, 3, protocol);
        }
        assert_eq!(&resp2[..], b"$-1\r\n*-1\r\n$3\r\na:1\r\n*4\r\n*3\r\n");
        assert_eq!(&resp3[..], b"_\r\n_\r\n=7\r\ntxt:a:1\r\n%2\r\n~3\r\n");
    }
}
