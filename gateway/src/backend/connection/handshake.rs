//! The connect handshake: AUTH, the gateway's ACL users, SELECT, READONLY or ROLE, HELLO, each reply checked. It
//! is also the node's health check: a node is used again after a failure only once a handshake has passed, so it
//! always ends with a round trip (`PING` when nothing else is sent), and a node that accepts connections but
//! answers nothing (a stopped process) never passes it. On a data node it also reads what the gateway must know
//! of the node's configuration ([`NodeFacts`]).

use std::io;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use tokio::net::TcpStream;

use super::{NodeRole, NodeSpec};
use crate::backend::direct::Value;
use crate::backend::identity::{self, RunAs};
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
}

impl NodeFacts {
    /// Keeps what was read where the gateway looks for it; what could not be read leaves the last value read
    /// (another resource's user, on the same node, may read what this one may not).
    pub(crate) fn note(self, metrics: &BackendMetrics) {
        if let Some(maxclients) = self.maxclients {
            metrics.maxclients.store(maxclients, Ordering::Relaxed);
        }
    }
}

/// Connects and runs the handshake: AUTH with the resource's credentials, the gateway's ACL users (see
/// `identity`), SELECT, READONLY or ROLE, then AUTH as the gateway user, or `PING` when none of these is needed.
/// Every step must answer `+OK` (`PING`: `+PONG`), and ROLE must say `master`. A data node's configuration is
/// read too (`CONFIG GET`, whose refusal fails nothing). Callers bound it with the connect timeout.
pub(crate) async fn connect(node: &NodeSpec) -> io::Result<(Stream, NodeFacts)> {
    let stream = open(node).await?;
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
    // With provisioned users, the URL's user is the gateway's: it must not be able to run a script.
    let (creates_users, checks_scripts) = match &node.script_user {
        _ if !data_node => (false, false),
        None => (true, false),
        Some(_) => (false, true),
    };
    if creates_users {
        identity::setup_commands(node, &mut handshake);
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
    // Before HELLO 3, so that the reply is RESP2's array; any reply will do (see `NodeFacts`).
    let maxclients_at = data_node.then(|| {
        resp::command(&mut handshake, &[&b"CONFIG"[..], b"GET", b"maxclients"]);
        expected.push(b"");
        expected.len() - 1
    });
    if data_node && node.protocol == Protocol::Resp3 {
        resp::command(&mut handshake, &[&b"HELLO"[..], b"3"]);
        expected.push(RESP3_HELLO);
    }
    if expected.is_empty() {
        resp::command(&mut handshake, &[&b"PING"[..]]);
        expected.push(b"+PONG\r\n");
    }
    stream.write_all(&handshake).await?;
    let mut buf = BytesMut::with_capacity(256);
    let mut scanner = ReplyScanner::default();
    let mut facts = NodeFacts::default();
    let mut expected = expected.into_iter().enumerate();
    let mut wanted = expected.next();
    while let Some((at, prefix)) = wanted {
        match scanner.scan(&buf) {
            Ok(Some(len)) => {
                let reply = buf.split_to(len).freeze();
                if !reply.starts_with(prefix) {
                    return Err(io::Error::other(handshake_failure(prefix, &reply)));
                }
                if Some(at) == maxclients_at {
                    facts.maxclients = config_number(&reply);
                }
                wanted = expected.next();
            }
            Ok(None) => {
                if stream.read_buf(&mut buf).await? == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            Err(e) => return Err(io::Error::other(e.to_string())),
        }
    }
    Ok((stream, facts))
}

/// The number a `CONFIG GET` of one parameter answered (`*2`, its name, its value); `None` for an error or
/// anything else.
fn config_number(reply: &Bytes) -> Option<u64> {
    match Value::parse(reply)?.array()? {
        [_, value] => u64::try_from(value.int()?).ok(),
        _ => None,
    }
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
