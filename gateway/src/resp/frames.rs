//! Request frames read again after the decoder handed them on (a run's requests, back to back, as `tracking` and
//! cluster redirects look into them): arrays of bulk strings whose length lines are short (see `short_length`),
//! as the decoder passes them. Read here, not with the request decoder, which stays inlined where clients'
//! requests are decoded. The decoder checked them: only the length lines are read again (the CRLF after each
//! argument is stepped over, not checked), within bounds; anything else ends what is read.

use super::short_length;

/// The request frames `raw` holds back to back.
pub(crate) fn each_request(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = raw;
    std::iter::from_fn(move || {
        let len = request_len(rest)?;
        let (frame, after) = rest.split_at(len);
        rest = after;
        Some(frame)
    })
}

/// The arguments of the request `frame`, up to the first that is not a complete bulk string.
pub(crate) fn request_args(frame: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    let (count, mut at) = header(frame).unwrap_or((0, 0));
    (0..count).map_while(move |_| {
        let (arg, next) = bulk_at(frame, at)?;
        at = next;
        Some(arg)
    })
}

/// The length of the request frame at the front of `buf`, if one is there. A run is walked through to its
/// sampled request with this, so it reads each length line in one tight loop (digits until the CR), trusting
/// the decoder's check of them.
fn request_len(buf: &[u8]) -> Option<usize> {
    let (count, mut at) = number_line(buf, 0)?;
    for _ in 0..count {
        let (len, after) = number_line(buf, at)?;
        at = after.checked_add(len)?.checked_add(2)?;
    }
    (at <= buf.len()).then_some(at)
}

/// The number on the line at `at` (after its type byte), and where the line after it starts.
#[inline(always)]
fn number_line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
    let mut i = at + 1;
    let mut n: usize = 0;
    loop {
        let byte = *buf.get(i)?;
        if byte == b'\r' {
            return Some((n, i + 2));
        }
        n = n
            .wrapping_mul(10)
            .wrapping_add(usize::from(byte.wrapping_sub(b'0')));
        i += 1;
    }
}

/// A frame's argument count, and where its first argument starts.
fn header(frame: &[u8]) -> Option<(i64, usize)> {
    let [b'*', line @ ..] = frame else {
        return None;
    };
    let (count, used) = short_length(line)?;
    Some((count, 1 + used))
}

/// The bulk string at `at` in `buf`, and where the element after it starts.
fn bulk_at(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let [b'$', line @ ..] = buf.get(at..)? else {
        return None;
    };
    let (len, used) = short_length(line)?;
    let start = at + 1 + used;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    let next = end.checked_add(2)?;
    (next <= buf.len()).then(|| (&buf[start..end], next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_their_arguments_are_found_back_to_back() {
        let raw = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*3\r\n$3\r\nSET\r\n$2\r\nk2\r\n$0\r\n\r\n*1\r\n$4\r\nPI";
        let frames: Vec<_> = each_request(raw).collect();
        assert_eq!(
            frames,
            [
                &b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"[..],
                b"*3\r\n$3\r\nSET\r\n$2\r\nk2\r\n$0\r\n\r\n"
            ]
        );
        let args: Vec<_> = request_args(frames[1]).collect();
        assert_eq!(args, [&b"SET"[..], b"k2", b""]);
        // A cut or malformed argument ends them.
        assert_eq!(request_args(b"*2\r\n$3\r\nGET\r\n$5\r\nk").count(), 1);
        assert_eq!(request_args(b"*2\r\n$3\r\nGET\r\n$1\r\n").count(), 1);
        assert_eq!(request_args(b"+OK\r\n").count(), 0);
    }
}
