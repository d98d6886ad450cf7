//! RESP on the wire: the client request decoder, the backend reply boundary scanner, and reply encoding.
//!
//! Requests are decoded into argument slices of the bytes the client sent (zero-copy), keeping the raw frame so
//! that single-key commands can be forwarded untouched. Replies are never decoded on the hot path: the scanner only
//! finds where each one ends, so it can be forwarded as raw bytes.

mod decoder;
mod encode;
mod error;
mod scanner;

pub use decoder::{Frame, Limits, Request, RequestDecoder};
pub use encode::*;
pub use error::ProtocolError;
pub use scanner::ReplyScanner;

/// Parses an integer the way Redis' `string2ll` does: optional `-`, digits, no `+`, no spaces, no leading zeros
/// (so `-0` is refused), the whole `i64` range.
pub fn parse_int(bytes: &[u8]) -> Option<i64> {
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

#[cfg(test)]
mod tests {
    use super::parse_int;

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
