//! RESP on the wire: the client request decoder, the backend reply boundary scanner, and reply encoding.
//!
//! Requests are decoded into argument slices of the bytes the client sent (zero-copy), keeping the raw frame so
//! that single-key commands can be forwarded untouched. Replies are never decoded on the hot path: the scanner only
//! finds where each one ends, so it can be forwarded as raw bytes.

mod decoder;
mod encode;
mod error;
mod scanner;

pub use decoder::{Limits, Request, RequestDecoder};
pub use encode::*;
pub use error::ProtocolError;
pub use scanner::ReplyScanner;

/// Parses a RESP integer line the way Redis' `string2ll` does: optional `-`, digits, no `+`, no spaces, no
/// leading zeros.
pub(crate) fn parse_int(digits: &[u8]) -> Option<i64> {
    let (negative, digits) = match digits {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() || digits.len() > 19 || (digits[0] == b'0' && digits.len() > 1) {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    if negative {
        if value == 0 {
            return None;
        }
        value = -value;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::parse_int;

    #[test]
    fn integers_parse_like_string2ll() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-12"), Some(-12));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
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
