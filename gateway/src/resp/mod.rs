//! RESP on the wire: the client request decoder, the backend reply boundary scanner, and reply encoding.
//!
//! Requests are decoded into argument slices of the bytes the client sent (zero-copy), keeping the raw frame so
//! that single-key commands can be forwarded untouched. Replies are never decoded on the hot path: the scanner only
//! finds where each one ends, so it can be forwarded as raw bytes.

mod decoder;
mod encode;
mod error;
mod frames;
mod limits;
mod scanner;

pub(crate) use decoder::{Frame, Request, RequestDecoder};
pub(crate) use encode::*;
pub(crate) use error::ProtocolError;
pub(crate) use frames::{each_request, request_args};
pub use limits::Limits;
pub(crate) use scanner::{ReplyScanner, each_reply, reply_len};

/// The protocol a client connection speaks (`HELLO 2`, `HELLO 3`), and so the backend connections that serve it:
/// a RESP3 client's commands go to connections that said `HELLO 3`, so that replies pass through untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

/// Parses an integer the way Redis' `string2ll` does: optional `-`, digits, no `+`, no spaces, no leading zeros
/// (so `-0` is refused), the whole `i64` range.
pub(crate) fn parse_int(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'0'] => return Some(0),
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        // Accumulating towards the sign reaches i64::MIN, whose magnitude does not fit in an i64.
        value = if negative {
            value.checked_mul(10)?.checked_sub(d)?
        } else {
            value.checked_mul(10)?.checked_add(d)?
        };
    }
    Some(value)
}

/// The usual length line of RESP, read in one pass: 1 to 18 digits (no sign, no leading zero), then CRLF. Returns
/// the number and the length of the line with its CRLF, or `None` for anything else (a sign, a longer or
/// malformed number, a line not fully arrived), which callers then read the general way, with `parse_int`. Every
/// request argument and every bulk reply starts with such a line.
#[inline(always)]
pub(crate) fn short_length(line: &[u8]) -> Option<(i64, usize)> {
    let mut value: i64 = 0;
    let mut digits = 0;
    let end = loop {
        let byte = *line.get(digits)?;
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            break byte;
        }
        if digits == 18 {
            return None;
        }
        value = value * 10 + i64::from(digit);
        digits += 1;
    };
    let well_formed = end == b'\r' && digits > 0 && (digits == 1 || line[0] != b'0');
    (well_formed && *line.get(digits + 1)? == b'\n').then_some((value, digits + 2))
}

#[cfg(test)]
mod tests {
    use super::{parse_int, short_length};

    /// The fast path agrees with `parse_int` wherever it answers, and leaves every other line to it.
    #[test]
    fn short_lengths_read_like_parse_int() {
        let cases: &[(&[u8], Option<i64>)] = &[
            (b"0\r\n", Some(0)),
            (b"7\r\n", Some(7)),
            (b"30\r\n", Some(30)),
            (b"999999999999999999\r\n", Some(999_999_999_999_999_999)),
            (b"\r\n", None),
            (b"-1\r\n", None),
            (b"01\r\n", None),
            (b"00\r\n", None),
            (b"1x\r\n", None),
            (b"12\r", None),
            (b"12\rx", None),
            (b"12", None),
            (b"", None),
            (b"9999999999999999999\r\n", None),
            (b"+1\r\n", None),
        ];
        for &(line, number) in cases {
            let text = String::from_utf8_lossy(line);
            assert_eq!(
                short_length(line),
                number.map(|n| (n, line.len())),
                "{text:?}"
            );
            if let Some(n) = number {
                assert_eq!(parse_int(&line[..line.len() - 2]), Some(n), "{text:?}");
            }
        }
    }

    #[test]
    fn integers_parse_like_string2ll() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-12"), Some(-12));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b"01",
            b" 1",
            b"1 ",
            b"-0",
            b"1x",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_int(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
