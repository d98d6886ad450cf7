//! The reply boundary scanner: finds where one backend reply ends without decoding it, for RESP2 and RESP3.

use super::{ProtocolError, parse_int, short_length};

/// Finds the end of the reply at the front of a buffer. Resumable: a reply that arrives over many reads is
/// scanned once, the scanner remembering how far it got and how many elements each open aggregate still needs.
#[derive(Debug, Default)]
pub(crate) struct ReplyScanner {
    /// Bytes of the current reply already scanned.
    pos: usize,
    /// Elements still to come for each open aggregate, innermost last.
    open: Vec<u64>,
}

impl ReplyScanner {
    /// Returns the length of the complete reply at the front of `buf`, or `None` when more bytes are needed.
    /// The caller removes that many bytes before the next call.
    pub(crate) fn scan(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        loop {
            let Some(&kind) = buf.get(self.pos) else {
                return Ok(None);
            };
            // The common cases first, read without looking for the line's end: a bulk string or an array whose
            // length is plain digits (`short_length`), and a nil bulk string (a missing key).
            let rest = &buf[self.pos + 1..];
            let fast = match kind {
                b'$' if rest.starts_with(b"-1\r\n") => Some((-1, 4)),
                b'$' | b'*' => short_length(rest),
                _ => None,
            };
            if let Some((len, used)) = fast {
                let after_line = self.pos + 1 + used;
                match (kind, len) {
                    (b'*', 1..) => {
                        self.pos = after_line;
                        self.open.push(len as u64);
                        continue;
                    }
                    (b'*', _) | (_, -1) => self.pos = after_line,
                    _ => {
                        let end = after_line + len as usize + 2;
                        if buf.len() < end {
                            return Ok(None);
                        }
                        self.pos = end;
                    }
                }
                if let Some(len) = self.close_element() {
                    return Ok(Some(len));
                }
                continue;
            }
            let Some(line_end) = find_crlf(buf, self.pos + 1) else {
                return Ok(None);
            };
            let line = &buf[self.pos + 1..line_end];
            let after_line = line_end + 2;
            let children = match kind {
                b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {
                    self.pos = after_line;
                    0
                }
                b'$' | b'=' | b'!' => {
                    let len = parse_int(line).ok_or(ProtocolError::BadReply("bad bulk length"))?;
                    if len < -1 {
                        return Err(ProtocolError::BadReply("bad bulk length"));
                    }
                    let end = if len == -1 {
                        after_line
                    } else {
                        after_line + len as usize + 2
                    };
                    if buf.len() < end {
                        return Ok(None);
                    }
                    self.pos = end;
                    0
                }
                b'*' | b'~' | b'>' | b'%' | b'|' => {
                    let len =
                        parse_int(line).ok_or(ProtocolError::BadReply("bad aggregate length"))?;
                    self.pos = after_line;
                    match (kind, len) {
                        (_, -1) => 0,
                        (_, len) if len < -1 => {
                            return Err(ProtocolError::BadReply("bad aggregate length"));
                        }
                        (b'%', len) => 2 * len as u64,
                        // An attribute map is followed by the reply it describes.
                        (b'|', len) => 2 * len as u64 + 1,
                        (_, len) => len as u64,
                    }
                }
                _ => return Err(ProtocolError::BadReply("unknown reply type")),
            };
            if children > 0 {
                self.open.push(children);
                continue;
            }
            if let Some(len) = self.close_element() {
                return Ok(Some(len));
            }
        }
    }

    /// One element finished: closes every aggregate it completes, and returns the reply's length when that was
    /// the whole reply.
    fn close_element(&mut self) -> Option<usize> {
        loop {
            match self.open.last_mut() {
                None => {
                    let len = self.pos;
                    self.pos = 0;
                    return Some(len);
                }
                Some(remaining) => {
                    *remaining -= 1;
                    if *remaining > 0 {
                        return None;
                    }
                    self.open.pop();
                }
            }
        }
    }
}

/// The complete replies `buf` holds back to back (the replies to a run of requests, or the requests of a run,
/// which are RESP arrays too), in order; stops before anything incomplete or malformed.
pub(crate) fn each_reply(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let len = reply_len(rest)?;
        let (reply, after) = rest.split_at(len);
        rest = after;
        Some(reply)
    })
}

/// The length of the complete reply at the front of `buf`, if there is one. A bulk string, the most common reply
/// (and element of an MGET reply), is measured here without a call into the scanner.
#[inline]
pub(crate) fn reply_len(buf: &[u8]) -> Option<usize> {
    if let [b'$', line @ ..] = buf
        && let Some((len, used)) = short_length(line)
    {
        let end = 1 + used + len as usize + 2;
        return (buf.len() >= end).then_some(end);
    }
    ReplyScanner::default().scan(buf).ok()?
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let tail = buf.get(from..)?;
    let cr = tail.windows(2).position(|w| w == b"\r\n")?;
    Some(from + cr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const REPLIES: &[&[u8]] = &[
        b"+OK\r\n",
        b"-ERR x\r\n",
        b":12\r\n",
        b"$-1\r\n",
        b"$0\r\n\r\n",
        b"$5\r\nab\r\nc\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n*0\r\n+x\r\n",
        b"*12\r\n$12\r\nhello world!\r\n$-1\r\n*0\r\n$0\r\n\r\n*1\r\n$2\r\nab\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n",
        b"%2\r\n+a\r\n:1\r\n+b\r\n~2\r\n#t\r\n,1.5\r\n",
        b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n",
        b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n",
        b"_\r\n",
        b"(123456789012345678901234\r\n",
        b"=7\r\ntxt:abc\r\n",
        b"!3\r\nERR\r\n",
    ];

    #[test]
    fn finds_each_reply_boundary() {
        let all: Vec<u8> = REPLIES.concat();
        let mut scanner = ReplyScanner::default();
        let mut rest = &all[..];
        for reply in REPLIES {
            let len = scanner.scan(rest).unwrap().unwrap();
            assert_eq!(&rest[..len], *reply);
            rest = &rest[len..];
        }
        assert_eq!(scanner.scan(rest).unwrap(), None);
        let each: Vec<&[u8]> = each_reply(&all).collect();
        assert_eq!(each, REPLIES);
        assert_eq!(each_reply(&all[..all.len() - 1]).count(), REPLIES.len() - 1);
        assert_eq!(each_reply(b"+OK\r\n?\r\n+OK\r\n").count(), 1);
    }

    #[test]
    fn rejects_what_is_not_resp() {
        let mut scanner = ReplyScanner::default();
        assert!(scanner.scan(b"?\r\n").is_err());
        assert!(ReplyScanner::default().scan(b"$-2\r\n").is_err());
        assert!(ReplyScanner::default().scan(b"*x\r\n").is_err());
    }

    proptest! {
        #[test]
        fn every_split_finds_the_same_boundaries(picks in prop::collection::vec(0..REPLIES.len(), 1..6)) {
            let all: Vec<u8> = picks.iter().flat_map(|&i| REPLIES[i].iter().copied()).collect();
            for split in 0..=all.len() {
                let mut scanner = ReplyScanner::default();
                let mut found = Vec::new();
                let mut start = 0;
                let mut available = split;
                loop {
                    match scanner.scan(&all[start..available]).unwrap() {
                        Some(len) => {
                            found.push(len);
                            start += len;
                        }
                        None if available < all.len() => available = all.len(),
                        None => break,
                    }
                }
                let expected: Vec<usize> = picks.iter().map(|&i| REPLIES[i].len()).collect();
                prop_assert_eq!(found, expected);
            }
        }

        #[test]
        fn garbage_never_panics(input in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut scanner = ReplyScanner::default();
            let mut rest = &input[..];
            while let Ok(Some(len)) = scanner.scan(rest) {
                rest = &rest[len..];
            }
        }
    }
}
