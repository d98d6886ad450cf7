//! Redis' glob (`stringmatchlen`): the patterns of `KEYS`, `SCAN ... MATCH` and `COMMAND LIST FILTERBY PATTERN`
//! (without case), and of a tenant's blocked keys (with case, as Redis matches key patterns).

/// Whether letters of the pattern match letters of the other case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Sensitive,
    Insensitive,
}

/// Whether `string` matches the glob `pattern`, as Redis' `stringmatchlen` answers.
pub fn matches(pattern: &[u8], string: &[u8], case: Case) -> bool {
    match_from(pattern, string, case, &mut false)
}

/// `stringmatchlen_impl`. `skip_longer` is Redis' guard against exponential backtracking on patterns like
/// `*a*a*a*b`.
fn match_from(mut pattern: &[u8], mut string: &[u8], case: Case, skip_longer: &mut bool) -> bool {
    // C compares `char`, signed on the platforms Redis runs on, and lowercases with `tolower` when case does not
    // matter.
    let fold = |byte: u8| -> i32 {
        let byte = match case {
            Case::Sensitive => byte,
            Case::Insensitive => byte.to_ascii_lowercase(),
        };
        i32::from(byte as i8)
    };
    while let (Some(&p), Some(&s)) = (pattern.first(), string.first()) {
        match p {
            b'*' => {
                while pattern.get(1) == Some(&b'*') {
                    pattern = &pattern[1..];
                }
                if pattern.len() == 1 {
                    return true;
                }
                while !string.is_empty() {
                    if match_from(&pattern[1..], string, case, skip_longer) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    string = &string[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => pattern = &pattern[1..],
            b'[' => {
                pattern = &pattern[1..];
                let negate = pattern.first() == Some(&b'^');
                if negate {
                    pattern = &pattern[1..];
                }
                let mut matched = false;
                loop {
                    match *pattern {
                        // Redis compares an escaped character exactly, whatever the case rule.
                        [b'\\', escaped, ..] => {
                            matched |= escaped == s;
                            pattern = &pattern[2..];
                        }
                        [b']', ..] => {
                            pattern = &pattern[1..];
                            break;
                        }
                        // An unterminated class ends the pattern.
                        [] => break,
                        [start, b'-', end, ..] => {
                            let (start, end) = (fold(start), fold(end));
                            let (low, high) = if start > end {
                                (end, start)
                            } else {
                                (start, end)
                            };
                            matched |= (low..=high).contains(&fold(s));
                            pattern = &pattern[3..];
                        }
                        [c, ..] => {
                            matched |= fold(c) == fold(s);
                            pattern = &pattern[1..];
                        }
                    }
                }
                if matched == negate {
                    return false;
                }
            }
            _ => {
                if p == b'\\' && pattern.len() >= 2 {
                    pattern = &pattern[1..];
                }
                if pattern.first().map(|&c| fold(c)) != Some(fold(s)) {
                    return false;
                }
                pattern = &pattern[1..];
            }
        }
        string = &string[1..];
        if string.is_empty() {
            while pattern.first() == Some(&b'*') {
                pattern = &pattern[1..];
            }
            break;
        }
    }
    pattern.is_empty() && string.is_empty()
}

/// Whether `pattern` holds a glob character, so that only a key equal to it matches it.
pub fn is_literal(pattern: &[u8]) -> bool {
    !pattern
        .iter()
        .any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_case() {
        let m = |p: &str, s: &str| matches(p.as_bytes(), s.as_bytes(), Case::Insensitive);
        assert!(m("*", "get"));
        assert!(m("G?T", "get"));
        assert!(m("config|*", "config|get"));
        assert!(m("[a-h]et", "get"));
        assert!(m("[A-H]et", "get"));
        assert!(!m("[^a-h]et", "get"));
        assert!(m("g\\et", "get"));
        assert!(!m("get*x", "get"));
        assert!(m("get**", "get"));
        assert!(!m("[abc", "g"));
        assert!(m("*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaab"));
    }

    /// Each case checked against redis-server 7.0: `SET <key> 1`, then `KEYS <pattern>`.
    #[test]
    fn with_case() {
        let m = |p: &[u8], s: &[u8]| matches(p, s, Case::Sensitive);
        assert!(m(b"user:*", b"user:1"));
        assert!(!m(b"user:*", b"USER:1"));
        assert!(!m(b"User", b"user"));
        assert!(!m(b"[A-Z]x", b"ax"));
        assert!(m(b"[a-z]x", b"ax"));
        assert!(m(b"[z-a]x", b"mx")); // a reversed range is the same range
        assert!(!m(b"[^a-z]x", b"mx"));
        assert!(m(b"a\\*b", b"a*b"));
        assert!(!m(b"a\\*b", b"axb"));
        assert!(m(b"[\\]]", b"]"));
        assert!(m(b"h?llo", b"hello"));
        assert!(!m(b"h?llo", b"hllo"));
        // Redis' own answer (`KEYS *` lists the empty key through a shortcut of its own, not the glob).
        assert!(!m(b"*", b""));
        assert!(!m(b"?", b""));
        assert!(m(b"", b""));
        assert!(!m(b"", b"a"));
        // A trailing backslash is a character of its own.
        assert!(m(b"a\\", b"a\\"));
        // Bytes above 0x7f compare as C's signed char: a range across 0x7f/0x80 is empty of them.
        assert!(m(b"\xff*", b"\xff\x00rest"));
        assert!(!m(b"[a-\xff]", b"b"));
        assert!(!m(b"*a*a*a*a*a*a*a*a*a*a*a*a*b", &[b'a'; 60]));
        assert!(is_literal(b"user:1"));
        assert!(!is_literal(b"user:*"));
        assert!(!is_literal(b"a\\b"));
    }
}
