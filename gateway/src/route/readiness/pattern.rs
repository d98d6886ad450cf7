//! Keys as readiness examples show them: a pattern, not the key. Each run of ASCII digits becomes `#`, so that
//! `user:1042:cart` and `user:7:cart` are one example (`user:#:cart`) and no id leaves the gateway; other bytes
//! are shown as tracking shows keys (`tracking::printable`), and a long key is cut.

use crate::tracking::printable;

/// Bytes of a key looked at: a longer pattern says little more and costs a report more.
const MAX_PATTERN_BYTES: usize = 128;

/// `key` as a pattern: runs of digits as `#`, at most `MAX_PATTERN_BYTES` of it, then `…` if it was cut.
pub(crate) fn key_pattern(key: &[u8]) -> String {
    let kept = &key[..key.len().min(MAX_PATTERN_BYTES)];
    let mut masked = Vec::with_capacity(kept.len());
    let mut in_digits = false;
    for &b in kept {
        let digit = b.is_ascii_digit();
        if !digit {
            masked.push(b);
        } else if !in_digits {
            masked.push(b'#');
        }
        in_digits = digit;
    }
    let mut pattern = printable(&masked);
    if key.len() > kept.len() {
        pattern.push('…');
    }
    pattern
}
