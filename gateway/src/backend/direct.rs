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
pub(crate) enum Value {
    Simple(Bytes),
    Error(Bytes),
    Int(i64),
    Bulk(Bytes),
    Nil,
    Array(Vec<Value>),
}

impl Value {
    /// The text of a simple or bulk string.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Value::Simple(b) | Value::Bulk(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    pub(crate) fn int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            other => other.text()?.parse().ok(),
        }
    }

    pub(crate) fn array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// Decodes one complete reply (as found by [`ReplyScanner`]).
    pub(crate) fn parse(frame: &Bytes) -> Option<Value> {
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
pub(crate) struct DirectConnection {
    stream: Stream,
    buf: BytesMut,
    scanner: ReplyScanner,
    timeout: Duration,
}

impl DirectConnection {
    /// Connects with the node's handshake (AUTH...); `timeout` bounds the connect and every later call.
    pub(crate) async fn open(node: &NodeSpec, timeout: Duration) -> io::Result<DirectConnection> {
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

    /// Connects as the resource's own user (its URL's credentials), in its database, and checks the node answers
    /// (`PING`): none of the gateway's ACL users (see `identity`), which may be denied `RESTORE`. For the repair
    /// of double-write secondaries, which copies keys with `DUMP` and `RESTORE` inside transactions.
    pub(crate) async fn open_as_owner(
        node: &NodeSpec,
        timeout: Duration,
    ) -> io::Result<DirectConnection> {
        let stream = tokio::time::timeout(timeout, super::connection::open(node))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
        let mut connection = DirectConnection {
            stream,
            buf: BytesMut::with_capacity(4096),
            scanner: ReplyScanner::default(),
            timeout,
        };
        if let Some(password) = &node.password {
            let auth: Vec<&[u8]> = match &node.username {
                Some(user) => vec![b"AUTH", user.as_bytes(), password.as_bytes()],
                None => vec![b"AUTH", password.as_bytes()],
            };
            connection.call(&auth).await?;
        }
        if node.db != 0 {
            let db = node.db.to_string();
            connection.call(&[b"SELECT", db.as_bytes()]).await?;
        }
        connection.call(&[b"PING"]).await?;
        Ok(connection)
    }

    /// Sends `commands` in one write and returns their replies in order, error replies among them.
    pub(crate) async fn pipeline(&mut self, commands: &[&[&[u8]]]) -> io::Result<Vec<Value>> {
        let mut out = BytesMut::new();
        for args in commands {
            resp::command(&mut out, args);
        }
        let timeout = self.timeout;
        let exchange = async {
            self.stream.write_all(&out).await?;
            let mut replies = Vec::with_capacity(commands.len());
            while replies.len() < commands.len() {
                replies.push(self.read().await?);
            }
            Ok::<_, io::Error>(replies)
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
    }

    /// Sends a command and returns its reply; an error reply is an `Err`.
    pub(crate) async fn call(&mut self, args: &[&[u8]]) -> io::Result<Value> {
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
    pub(crate) async fn read(&mut self) -> io::Result<Value> {
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
