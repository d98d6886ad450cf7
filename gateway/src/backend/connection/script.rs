//! Tenants' scripts on a shared connection: a script's own reply out of the `AUTH`s around it, and killing one
//! that runs too long.

use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{NodeSpec, describe};
use crate::backend::identity::{self, RunAs};
use crate::resp::{self, ReplyScanner};

/// How long killing a runaway script may take. Redis serves `SCRIPT KILL` only once a script has run for its
/// `busy-reply-threshold` (5 s by default; until then it serves nothing at all), so this must be longer.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(10);

/// Stops the script or function that keeps `node` busy, on a connection of its own (the shared ones queue
/// behind it): `AUTH` as the gateway (allowed while Redis is busy), `SCRIPT KILL`, `FUNCTION KILL` (one of them
/// answers `NOTBUSY`). A script that has written already cannot be killed (`UNKILLABLE`): the connection then
/// times out as any other, and Redis stays busy until an operator acts, as it would without the gateway.
pub(crate) async fn kill_scripts(node: NodeSpec) {
    let killed = tokio::time::timeout(KILL_GRACE, async {
        let mut stream = TcpStream::connect(&node.addr).await?;
        let mut request = BytesMut::new();
        request.extend_from_slice(&identity::auth_command(&node, RunAs::Gateway));
        resp::command(&mut request, &[&b"SCRIPT"[..], b"KILL"]);
        resp::command(&mut request, &[&b"FUNCTION"[..], b"KILL"]);
        stream.write_all(&request).await?;
        let (mut buf, mut scanner, mut replies) =
            (BytesMut::new(), ReplyScanner::default(), Vec::new());
        while replies.len() < 3 {
            match scanner.scan(&buf) {
                Ok(Some(len)) => replies.push(buf.split_to(len)),
                Ok(None) if stream.read_buf(&mut buf).await? > 0 => {}
                Ok(None) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        }
        Ok::<_, io::Error>(replies)
    })
    .await;
    match killed {
        Ok(Ok(replies)) => {
            let replies: Vec<String> = replies
                .iter()
                .map(|r| String::from_utf8_lossy(r).trim_end().to_string())
                .collect();
            tracing::info!(backend = %node.addr, ?replies, "SCRIPT KILL and FUNCTION KILL sent");
        }
        Ok(Err(e)) => {
            tracing::warn!(backend = %node.addr, "cannot kill a runaway script: {}", describe(&e))
        }
        Err(_) => tracing::warn!(backend = %node.addr, "cannot kill a runaway script: timed out"),
    }
}

/// `ASKING`, which a script redirected by `ASK` needs right before it, after its `AUTH`.
pub(super) const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// A script's own reply out of the replies to `AUTH`, [`ASKING`,] the script and `AUTH` (`lead`: how many come
/// before the script's), and whether the connection may go on (`Err`: it must reconnect). A script whose first
/// `AUTH` failed ran as the gateway user, which may not run scripts: it gets an error that says why, and the
/// connection reconnects, which sets the users up again (someone changed them). One whose last `AUTH` failed
/// left the connection as the script's user, which must not serve anything else.
pub(super) fn unwrap_script(replies: &Bytes, lead: u8, node: &str) -> (Bytes, Result<(), String>) {
    let parts: Vec<&[u8]> = resp::each_reply(replies).collect();
    let (Some(first), Some(script), Some(last)) = (
        parts.first(),
        parts.get(lead as usize),
        parts.get(lead as usize + 1),
    ) else {
        let error = "protocol error: a script's replies are missing".to_string();
        return (
            resp::error_reply(&format!("ERR backend {node} {error}")),
            Err(error),
        );
    };
    let text = |reply: &[u8]| {
        String::from_utf8_lossy(reply)
            .trim_start_matches('-')
            .trim_end()
            .to_string()
    };
    match (*first, *last) {
        (OK, OK) => (replies.slice_ref(script), Ok(())),
        (OK, last) => (
            replies.slice_ref(script),
            Err(format!(
                "could not switch back to the gateway's ACL user after a script: {}",
                text(last)
            )),
        ),
        (first, _) => {
            let why = format!(
                "cannot run scripts: AUTH as the script user failed ({})",
                text(first)
            );
            (
                resp::error_reply(&format!("ERR backend {node} {why}")),
                Err(why),
            )
        }
    }
}

const OK: &[u8] = b"+OK\r\n";
