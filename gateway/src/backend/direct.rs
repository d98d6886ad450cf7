//! A plain, one-request-at-a-time connection for control traffic: topology queries (`CLUSTER SLOTS`,
//! `SENTINEL ...`) and the sentinel `+switch-master` subscription. Never on the data path, so replies are decoded
//! into [`Value`]s; everything a node sends is treated as untrusted input (no panics, bounded nesting).

use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::NodeSpec;
use crate::net::Stream;
use crate::resp::{self, ReplyScanner};

/// A decoded RESP2 reply (RESP3 types the gateway never asks for are decoded as the nearest RESP2 type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    Simple(Bytes),
    Error(Bytes),
    Int(i64),
    Bulk(Bytes),
    Nil,
    Array(Vec<Value>),
}

impl Value {
    /// The text of a simple or bulk string.
    pub(super) fn text(&self) -> Option<&str> {
        match self {
            Value::Simple(b) | Value::Bulk(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    pub(super) fn int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            other => other.text()?.parse().ok(),
        }
    }

    pub(super) fn array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// Decodes one complete reply (as found by [`ReplyScanner`]).
    pub(super) fn parse(frame: &Bytes) -> Option<Value> {
        let (value, used) = parse_at(frame, 0, 0)?;
        (used == frame.len()).then_some(value)
    }
}

/// Deeper nesting than any control reply has is refused rather than recursed into.
const MAX_DEPTH: usize = 8;

fn parse_at(frame: &Bytes, offset: usize, depth: usize) -> Option<(Value, usize)> {
    if depth > MAX_DEPTH {
        return None;
    }
    let kind = *frame.get(offset)?;
    let line_end = offset
        + 1
        + frame
            .get(offset + 1..)?
            .windows(2)
            .position(|w| w == b"\r\n")?;
    let line = frame.slice(offset + 1..line_end);
    let next = line_end + 2;
    match kind {
        b'+' => Some((Value::Simple(line), next)),
        b'-' => Some((Value::Error(line), next)),
        b':' => Some((Value::Int(resp::parse_int(&line)?), next)),
        b'$' => {
            let len = resp::parse_int(&line)?;
            if len < 0 {
                return Some((Value::Nil, next));
            }
            let end = next.checked_add(usize::try_from(len).ok()?)?;
            let after = end.checked_add(2)?;
            frame.get(end..after)?;
            Some((Value::Bulk(frame.slice(next..end)), after))
        }
        b'*' | b'~' | b'%' => {
            let len = resp::parse_int(&line)?;
            if len < 0 {
                return Some((Value::Nil, next));
            }
            let count = if kind == b'%' { len * 2 } else { len };
            let mut items = Vec::with_capacity(usize::try_from(count).ok()?.min(1024));
            let mut at = next;
            for _ in 0..count {
                let (item, after) = parse_at(frame, at, depth + 1)?;
                items.push(item);
                at = after;
            }
            Some((Value::Array(items), at))
        }
        b'_' => Some((Value::Nil, next)),
        _ => None,
    }
}

/// A connection that sends one command and reads its reply (or reads pushed messages).
pub(super) struct DirectConnection {
    stream: Stream,
    buf: BytesMut,
    scanner: ReplyScanner,
    timeout: Duration,
}

impl DirectConnection {
    /// Connects with the node's handshake (AUTH...); `timeout` bounds the connect and every later call.
    pub(super) async fn open(node: &NodeSpec, timeout: Duration) -> io::Result<DirectConnection> {
        // What the handshake learns of the node is the data connections' to note (see `budget`).
        let (stream, _) = tokio::time::timeout(timeout, super::connection::connect(node))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
        Ok(DirectConnection {
            stream,
            buf: BytesMut::with_capacity(4096),
            scanner: ReplyScanner::default(),
            timeout,
        })
    }

    /// Sends a command and returns its reply; an error reply is an `Err`.
    pub(super) async fn call(&mut self, args: &[&[u8]]) -> io::Result<Value> {
        let mut out = BytesMut::new();
        resp::command(&mut out, args);
        tokio::time::timeout(self.timeout, self.stream.write_all(&out))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
        let reply = tokio::time::timeout(self.timeout, self.read())
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
        match reply {
            Value::Error(text) => Err(io::Error::other(
                String::from_utf8_lossy(&text).into_owned(),
            )),
            value => Ok(value),
        }
    }

    /// The next reply or pushed message, however long it takes.
    pub(super) async fn read(&mut self) -> io::Result<Value> {
        loop {
            match self.scanner.scan(&self.buf) {
                Ok(Some(len)) => {
                    let frame = self.buf.split_to(len).freeze();
                    return Value::parse(&frame)
                        .ok_or_else(|| io::Error::other("undecodable reply"));
                }
                Ok(None) => {
                    if self.buf.len() > 64 * 1024 * 1024 {
                        return Err(io::Error::other("control reply too large"));
                    }
                    if self.stream.read_buf(&mut self.buf).await? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_replies_and_refuses_garbage() {
        let frame = Bytes::from_static(
            b"*2\r\n*3\r\n:0\r\n:5460\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n$-1\r\n",
        );
        let value = Value::parse(&frame).unwrap();
        let items = value.array().unwrap();
        assert_eq!(items[0].array().unwrap()[1].int(), Some(5460));
        assert_eq!(items[1], Value::Nil);
        for bad in [
            &b"*2\r\n:1\r\n"[..],
            b"$5\r\nab\r\n",
            b"$3\r\nabcde\r\n",
            b"?\r\n",
            b":x\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            assert_eq!(Value::parse(&Bytes::from_static(bad)), None, "{bad:?}");
        }
    }
}
