//! The connect handshake: AUTH, the gateway's ACL users, SELECT, READONLY or ROLE, HELLO, each reply checked. It
//! is also the node's health check: a node is used again after a failure only once a handshake has passed, so it
//! always ends with a round trip (`PING` when nothing else is sent), and a node that accepts connections but
//! answers nothing (a stopped process) never passes it. On a data node it also reads what the gateway must know
//! of the node's configuration ([`NodeFacts`]).

use std::io;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use tokio::net::TcpStream;

use crate::backend::identity::{self, RunAs};
use crate::backend::{NodeRole, NodeSpec};
use crate::metrics::BackendMetrics;
use crate::net::Stream;
use crate::resp::{self, Protocol, ReplyScanner};

/// Opens a connection to the node: TCP, then TLS when its resource asks for it. Nothing is sent yet.
pub(crate) async fn open(node: &NodeSpec) -> io::Result<Stream> {
    let tcp = TcpStream::connect(&node.addr).await?;
    tcp.set_nodelay(true)?;
    Ok(match &node.tls {
        None => Stream::Plain(tcp),
        Some(tls) => Stream::Tls(Box::new(tls.connect(tcp, &node.addr).await?)),
    })
}

/// What the handshake read of a data node's configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeFacts {
    /// Its `maxclients`, for the dedicated connections' budget (`backend::budget`); `None` where the user may
    /// not run `CONFIG GET` (or the command is renamed away), which the budget then assumes.
    pub maxclients: Option<u64>,
    /// Whether it checks a `RESTORE` payload before it loads it (`sanitize-dump-payload` `yes` or `clients`).
    /// Without it, a crafted payload crashes the server (Redis 7.0's default is `no`), so the gateway's users
    /// may not run `RESTORE` there (`identity`); unknown (not readable) counts as no.
    pub sanitizes_payloads: bool,
    /// Its `busy-reply-threshold` in milliseconds: how long a script runs before the node answers `BUSY`
    /// (see `health`); `None` where it cannot be read.
    pub busy_reply_threshold: Option<u64>,
}

impl NodeFacts {
    /// Keeps what was read where the gateway looks for it; what could not be read leaves the last value read
    /// (another resource's user, on the same node, may read what this one may not).
    pub(crate) fn note(self, metrics: &BackendMetrics) {
        if let Some(maxclients) = self.maxclients {
            metrics.maxclients.store(maxclients, Ordering::Relaxed);
        }
        if let Some(threshold) = self.busy_reply_threshold {
            metrics.scripts.set_threshold(threshold);
        }
    }
}

/// Connects and runs the handshake: AUTH with the resource's credentials and a read of the node's
/// configuration (`CONFIG GET`, whose refusal fails nothing: see [`NodeFacts`]), then the gateway's ACL users
/// (see `identity`, which depend on that configuration), SELECT, READONLY or ROLE, then AUTH as the gateway user,
/// or `PING` when none of these is needed. Every step must answer `+OK` (`PING`: `+PONG`), and ROLE must say
/// `master`. Callers bound it with the connect timeout.
pub(crate) async fn connect(node: &NodeSpec) -> io::Result<(Stream, NodeFacts)> {
    let stream = open(node).await?;
    let mut reader = Reader::default();
    let mut handshake = BytesMut::new();
    let mut expected: Vec<&'static [u8]> = Vec::new();
    if let Some(password) = &node.password {
        match &node.username {
            Some(user) => resp::command(
                &mut handshake,
                &[&b"AUTH"[..], user.as_bytes(), password.as_bytes()],
            ),
            None => resp::command(&mut handshake, &[&b"AUTH"[..], password.as_bytes()]),
        }
        expected.push(b"+OK\r\n");
    }
    let data_node = node.role != NodeRole::Sentinel;
    let mut facts = NodeFacts::default();
    if data_node {
        // Any reply will do (see `NodeFacts`); RESP2's array, before any HELLO 3.
        for parameter in [
            &b"maxclients"[..],
            b"sanitize-dump-payload",
            b"busy-reply-threshold",
        ] {
            resp::command(&mut handshake, &[&b"CONFIG"[..], b"GET", parameter]);
            expected.push(b"");
        }
        let replies = reader.exchange(&stream, &handshake, &expected).await?;
        if let [.., maxclients, sanitize, threshold] = &replies[..] {
            facts.maxclients = config_number(maxclients);
            facts.sanitizes_payloads = matches!(config_value(sanitize), Some(b"yes" | b"clients"));
            facts.busy_reply_threshold = config_number(threshold);
        }
        handshake.clear();
        expected.clear();
    }
    // With provisioned users, the URL's user is the gateway's: it must not be able to run a script.
    let (creates_users, checks_scripts) = match &node.script_user {
        _ if !data_node => (false, false),
        None => (true, false),
        Some(_) => (false, true),
    };
    if creates_users {
        identity::setup_commands(node, facts.sanitizes_payloads, &mut handshake);
        expected.extend([&b"+OK\r\n"[..]; 2]);
    }
    if checks_scripts {
        resp::command(&mut handshake, &[&b"EVAL"[..], b"return 1", b"0"]);
        expected.push(NOPERM);
    }
    if node.db != 0 {
        resp::command(
            &mut handshake,
            &[&b"SELECT"[..], node.db.to_string().as_bytes()],
        );
        expected.push(b"+OK\r\n");
    }
    match node.role {
        NodeRole::Any | NodeRole::Sentinel => {}
        NodeRole::ClusterReplica => {
            resp::command(&mut handshake, &[&b"READONLY"[..]]);
            expected.push(b"+OK\r\n");
        }
        NodeRole::Master => {
            resp::command(&mut handshake, &[&b"ROLE"[..]]);
            expected.push(ROLE_MASTER);
        }
    }
    if creates_users {
        handshake.extend_from_slice(&identity::auth_command(node, &RunAs::Gateway));
        expected.push(b"+OK\r\n");
    }
    if data_node && node.protocol == Protocol::Resp3 {
        resp::command(&mut handshake, &[&b"HELLO"[..], b"3"]);
        expected.push(RESP3_HELLO);
    }
    if expected.is_empty() && !data_node {
        resp::command(&mut handshake, &[&b"PING"[..]]);
        expected.push(b"+PONG\r\n");
    }
    reader.exchange(&stream, &handshake, &expected).await?;
    Ok((stream, facts))
}

/// The replies of a handshake's exchanges, read as they come.
#[derive(Default)]
pub(super) struct Reader {
    buf: BytesMut,
    scanner: ReplyScanner,
}

impl Reader {
    /// Writes `commands` and reads one reply for each of `expected`, which must start with it (an empty
    /// prefix takes any reply); returns the replies.
    pub(super) async fn exchange(
        &mut self,
        stream: &Stream,
        commands: &[u8],
        expected: &[&'static [u8]],
    ) -> io::Result<Vec<Bytes>> {
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        stream.write_all(commands).await?;
        let mut replies = Vec::with_capacity(expected.len());
        while let Some(prefix) = expected.get(replies.len()) {
            match self.scanner.scan(&self.buf) {
                Ok(Some(len)) => {
                    let reply = self.buf.split_to(len).freeze();
                    if !reply.starts_with(prefix) {
                        return Err(io::Error::other(handshake_failure(prefix, &reply)));
                    }
                    replies.push(reply);
                }
                Ok(None) => {
                    if stream.read_buf(&mut self.buf).await? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        }
        Ok(replies)
    }
}

/// The value a `CONFIG GET` of one parameter answered (`*2`, its name, its value); `None` for an error or
/// anything else.
fn config_value(reply: &Bytes) -> Option<&[u8]> {
    let mut lines = reply.split(|&b| b == b'\n');
    match (lines.next(), lines.nth(3)) {
        (Some(b"*2\r"), Some(value)) => value.strip_suffix(b"\r"),
        _ => None,
    }
}

/// The number a `CONFIG GET` of one parameter answered (see [`config_value`]).
fn config_number(reply: &Bytes) -> Option<u64> {
    std::str::from_utf8(config_value(reply)?).ok()?.parse().ok()
}

/// How a refusal for want of ACL permissions starts.
const NOPERM: &[u8] = b"-NOPERM";

/// How a master's `ROLE` reply starts.
const ROLE_MASTER: &[u8] = b"*3\r\n$6\r\nmaster\r\n";

/// How `HELLO 3`'s reply starts: a map.
const RESP3_HELLO: &[u8] = b"%";

fn handshake_failure(expected: &[u8], reply: &[u8]) -> String {
    if expected == ROLE_MASTER {
        // `*5\r\n$5\r\nslave\r\n...`: name the role the node reports.
        let role = reply
            .split(|&b| b == b'\n')
            .nth(2)
            .map(|line| String::from_utf8_lossy(line).trim_end().to_string())
            .unwrap_or_default();
        return format!("handshake failed: the node is not a master (ROLE {role})");
    }
    if expected == NOPERM {
        return "handshake failed: the resource's user may run scripts, so tenants' scripts would not be \
                restricted; with scriptUserName, the URL's user must be denied EVAL, EVALSHA, EVAL_RO, \
                EVALSHA_RO, FCALL and FCALL_RO"
            .to_string();
    }
    let text = String::from_utf8_lossy(reply);
    let text = text.trim_start_matches(['-', '+']).trim_end();
    if expected == RESP3_HELLO {
        return format!(
            "handshake failed: the node does not speak RESP3, which RESP3 clients need (Redis 6 or later): {text}"
        );
    }
    format!("handshake failed: {text}")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    #[test]
    fn reads_a_value_from_config_get() {
        let value =
            |reply: &'static [u8]| config_value(&Bytes::from_static(reply)).map(<[u8]>::to_vec);
        let sanitize = b"*2\r\n$21\r\nsanitize-dump-payload\r\n$3\r\nyes\r\n";
        assert_eq!(value(sanitize), Some(b"yes".to_vec()));
        assert_eq!(value(b"-NOPERM this user has no permissions\r\n"), None);
        assert_eq!(value(b"*0\r\n"), None);
    }

    #[test]
    fn reads_a_number_from_config_get() {
        let number = |reply: &'static [u8]| config_number(&Bytes::from_static(reply));
        assert_eq!(number(b"*2\r\n$10\r\nmaxclients\r\n$2\r\n40\r\n"), Some(40));
        assert_eq!(number(b"-NOPERM this user has no permissions\r\n"), None);
        assert_eq!(number(b"*0\r\n"), None);
        assert_eq!(number(b"*2\r\n$10\r\nmaxclients\r\n$2\r\n-1\r\n"), None);
    }

    #[tokio::test]
    async fn a_node_that_accepts_but_never_answers_fails_the_handshake() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let node = NodeSpec::bare_sentinel(listener.local_addr().unwrap().to_string());
        let stopped = async {
            // Accepted, as the kernel does for a stopped process, and never answered.
            let (socket, _) = listener.accept().await.unwrap();
            std::future::pending::<()>().await;
            drop(socket);
        };
        tokio::select! {
            connected = tokio::time::timeout(Duration::from_millis(300), connect(&node)) => {
                assert!(connected.is_err(), "the handshake waits for an answer");
            }
            () = stopped => unreachable!(),
        }
    }

    #[tokio::test]
    async fn a_node_that_answers_ping_passes_the_handshake() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let node = NodeSpec::bare_sentinel(listener.local_addr().unwrap().to_string());
        let answering = async {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = BytesMut::new();
            while !request.ends_with(b"PING\r\n") {
                assert!(socket.read_buf(&mut request).await.unwrap() > 0);
            }
            socket.write_all(b"+PONG\r\n").await.unwrap();
            socket
        };
        let (connected, _socket) = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::join!(connect(&node), answering)
        })
        .await
        .expect("the handshake sends PING");
        assert!(connected.is_ok());
    }
}
