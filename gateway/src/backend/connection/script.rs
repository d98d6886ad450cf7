//! Scripts on a shared connection: a script's own reply out of the `AUTH`s around it, what waits behind one
//! that keeps its node busy, and killing one (a tenant's that runs past its limit, or a client's `SCRIPT KILL`
//! or `FUNCTION KILL`) on a connection of its own.

use std::io;
use std::time::Duration;

use super::{describe, open};
use crate::backend::NodeSpec;
use crate::backend::identity::{self, RunAs, ScriptUser};
use crate::failure::Failure;
use crate::resp::{self, ReplyScanner};
use bytes::{Bytes, BytesMut};

/// How long killing a runaway script may take. Redis serves `SCRIPT KILL` only once a script has run for its
/// `busy-reply-threshold` (5 s by default; until then it serves nothing at all), so this must be longer.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(10);

/// Stops the script or function that keeps `node` busy (see [`past_the_script`]): `SCRIPT KILL`, then
/// `FUNCTION KILL` (one of them answers `BUSY`, the other kills). A script that has written already cannot be
/// killed (`UNKILLABLE`): the connection then times out as any other, and Redis stays busy until an operator
/// acts, as it would without the gateway.
pub(crate) async fn kill_scripts(node: NodeSpec) {
    let mut request = BytesMut::new();
    resp::command(&mut request, &[&b"SCRIPT"[..], b"KILL"]);
    resp::command(&mut request, &[&b"FUNCTION"[..], b"KILL"]);
    match past_the_script(&node, &request, 2).await {
        Ok(replies) => {
            let replies: Vec<String> = replies
                .iter()
                .map(|r| String::from_utf8_lossy(r).trim_end().to_string())
                .collect();
            tracing::info!(backend = %node.addr, ?replies, "SCRIPT KILL and FUNCTION KILL sent");
        }
        Err(e) => tracing::warn!(backend = %node.addr, "cannot kill a runaway script: {e}"),
    }
}

/// A client's `SCRIPT KILL` or `FUNCTION KILL` (`request`), sent to each of `nodes` (see [`past_the_script`])
/// at once, or the error reply of a node that is not known: `+OK` when one of them killed a script, else the
/// first error other than `NOTBUSY` (a script that cannot be killed, a node that cannot be reached), else
/// `NOTBUSY`.
pub(crate) async fn kill_on(nodes: Vec<Result<NodeSpec, Bytes>>, request: Bytes) -> Bytes {
    let sent: Vec<_> = nodes
        .into_iter()
        .map(|node| {
            let request = request.clone();
            tokio::task::spawn_local(async move {
                let node = match node {
                    Ok(node) => node,
                    Err(reply) => return reply,
                };
                let reply = past_the_script(&node, &request, 1)
                    .await
                    .and_then(|mut replies| {
                        replies.pop().ok_or_else(|| "sent no reply".to_string())
                    });
                reply.unwrap_or_else(|e| {
                    let failure = Failure::lost(&node.addr, e);
                    failure.count(1);
                    failure.reply()
                })
            })
        })
        .collect();
    let mut replies = Vec::with_capacity(sent.len());
    for task in sent {
        replies
            .push(task.await.unwrap_or_else(|_| {
                resp::error_reply("ERR internal: the kill of a script failed")
            }));
    }
    let rank = |reply: &Bytes| match reply.first() {
        Some(b'-') if reply.starts_with(b"-NOTBUSY") => 2,
        Some(b'-') => 1,
        _ => 0,
    };
    replies
        .iter()
        .min_by_key(|reply| rank(reply))
        .cloned()
        .unwrap_or_else(|| resp::error_reply(NOTBUSY))
}

/// Redis' own reply to a kill with no script running, for a route without nodes.
const NOTBUSY: &str = "NOTBUSY No scripts in execution right now.";

/// Sends `requests` (`count` of them) to `node` on a connection of its own, after an `AUTH` as the gateway, and
/// returns their replies, within [`KILL_GRACE`]. The shared connections queue behind a script that keeps a node
/// busy; Redis serves `AUTH` and the kills on another connection meanwhile.
async fn past_the_script(
    node: &NodeSpec,
    requests: &[u8],
    count: usize,
) -> Result<Vec<Bytes>, String> {
    let exchange = async {
        let stream = open(node).await?;
        let mut out = BytesMut::new();
        out.extend_from_slice(&identity::auth_command(node, &RunAs::Gateway));
        out.extend_from_slice(requests);
        stream.write_all(&out).await?;
        let (mut buf, mut scanner, mut replies) =
            (BytesMut::new(), ReplyScanner::default(), Vec::new());
        while replies.len() <= count {
            match scanner.scan(&buf) {
                Ok(Some(len)) => replies.push(buf.split_to(len).freeze()),
                Ok(None) if stream.read_buf(&mut buf).await? > 0 => {}
                Ok(None) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        }
        Ok::<_, io::Error>(replies)
    };
    let mut replies = match tokio::time::timeout(KILL_GRACE, exchange).await {
        Ok(Ok(replies)) => replies.into_iter(),
        Ok(Err(e)) => return Err(format!("unavailable: {}", describe(&e))),
        Err(_) => return Err(format!("timed out after {} ms", KILL_GRACE.as_millis())),
    };
    match replies.next() {
        Some(auth) if auth.first() == Some(&b'-') => Err(format!(
            "refused the gateway's AUTH: {}",
            String::from_utf8_lossy(&auth[1..]).trim_end()
        )),
        _ => Ok(replies.collect()),
    }
}

/// Redis' reply to a request that waits behind a script (`function`: a function) that keeps the node busy.
pub(super) fn busy(function: bool) -> Bytes {
    resp::error_reply(&crate::health::busy_text(function))
}

/// Whether a script request calls a function (`FCALL`, `FCALL_RO`) rather than a script (`EVAL`, `EVALSHA`
/// and their `_RO`): of those names, only a function's starts with an F. `raw` is a multibulk request, its
/// name on the third line.
pub(super) fn calls_function(raw: &[u8]) -> bool {
    raw.split(|&b| b == b'\n')
        .nth(2)
        .and_then(|name| name.first())
        .is_some_and(|c| c.eq_ignore_ascii_case(&b'f'))
}

/// `ASKING`, which a script redirected by `ASK` needs right before it, after its `AUTH`.
pub(super) const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// The tenants' restricted users one connected socket has created (see `identity`), each with its `AUTH`. A new
/// socket starts with none: a node that restarted or failed over lost them, and gets each again before its first
/// use.
pub(super) struct RestrictedUsers {
    /// By user name.
    auths: fnv::FnvHashMap<String, Bytes>,
    /// The node checks `RESTORE` payloads (`NodeFacts`): otherwise the users may not run it.
    sanitizes_payloads: bool,
}

impl RestrictedUsers {
    pub(super) fn new(sanitizes_payloads: bool) -> RestrictedUsers {
        RestrictedUsers {
            auths: fnv::FnvHashMap::default(),
            sanitizes_payloads,
        }
    }

    /// Writes to `out` what switches the connection to `run_as` for a script: the user's creation the first time
    /// (a failed one fails its script, and the connection reconnects), then its `AUTH`. Answers how many
    /// replies that is.
    pub(super) fn switch(&mut self, node: &NodeSpec, run_as: &RunAs, out: &mut BytesMut) -> u8 {
        let Some(ScriptUser::Restricted(user)) = run_as.script_user() else {
            return identity::switch_to(node, run_as, true, self.sanitizes_payloads, out);
        };
        if let Some(auth) = self.auths.get(&user.name) {
            out.extend_from_slice(auth);
            return 1;
        }
        let mut switch = BytesMut::new();
        let count = identity::switch_to(node, run_as, false, self.sanitizes_payloads, &mut switch);
        out.extend_from_slice(&switch);
        self.auths
            .insert(user.name.clone(), identity::auth_command(node, run_as));
        count
    }
}

/// The error reply of a script that `node` did not serve, for `reason`, counted (`ran`: it may have run).
fn failed_script(node: &str, reason: &str, ran: bool) -> Bytes {
    let failure = Failure::backend(node, reason, ran);
    failure.count(1);
    failure.reply()
}

/// A script's own reply out of the replies to what switched to its user (`ACL SETUSER`, `AUTH`), [`ASKING`,]
/// the script and `AUTH` (`lead`: how many come before the script's), and whether the connection may go on
/// (`Err`: it must reconnect). A script one of whose leading commands failed ran as the gateway user, which may
/// not run scripts: it gets an error that says why, and the connection reconnects, which sets the users up again
/// (someone changed them). One whose last `AUTH` failed left the connection as the script's user, which must not
/// serve anything else.
pub(super) fn unwrap_script(replies: &Bytes, lead: u8, node: &str) -> (Bytes, Result<(), String>) {
    let parts: Vec<&[u8]> = resp::each_reply(replies).collect();
    let first = parts.get(..lead as usize).and_then(|leading| {
        leading
            .iter()
            .find(|&&reply| reply != OK)
            .or(leading.first())
    });
    let (Some(first), Some(script), Some(last)) = (
        first,
        parts.get(lead as usize),
        parts.get(lead as usize + 1),
    ) else {
        let error = "protocol error: a script's replies are missing";
        return (failed_script(node, error, true), Err(error.to_string()));
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
                "cannot run scripts: switching to the script user failed ({})",
                text(first)
            );
            // Refused as the gateway user: the script did not run.
            (failed_script(node, &why, false), Err(why))
        }
    }
}

const OK: &[u8] = b"+OK\r\n";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::identity::scripts_run_as;

    /// What the users are made for: the script of a namespace is never sent to a sentinel, but its spec is as
    /// good as any data node's here.
    fn node() -> NodeSpec {
        NodeSpec::bare_sentinel("127.0.0.1:6379".to_string())
    }

    #[test]
    fn a_namespace_user_is_created_before_its_first_use_on_a_socket_only() {
        let (node, mut users) = (node(), RestrictedUsers::new(true));
        let (a, b) = (
            scripts_run_as(false, Some(b"a:"), Vec::new()),
            scripts_run_as(false, Some(b"b:"), Vec::new()),
        );
        let mut out = BytesMut::new();
        assert_eq!(users.switch(&node, &a, &mut out), 2);
        assert!(out.starts_with(b"*"), "ACL SETUSER first");
        assert!(String::from_utf8_lossy(&out).contains("SETUSER"));
        for _ in 0..2 {
            let mut again = BytesMut::new();
            assert_eq!(users.switch(&node, &a, &mut again), 1);
            assert_eq!(again, identity::auth_command(&node, &a));
        }
        assert_eq!(users.switch(&node, &b, &mut BytesMut::new()), 2);
        // A new socket (a reconnect) knows none.
        assert_eq!(
            RestrictedUsers::new(true).switch(&node, &a, &mut BytesMut::new()),
            2
        );
        let mut other = BytesMut::new();
        assert_eq!(
            users.switch(&node, &RunAs::script(ScriptUser::Tenant), &mut other),
            1
        );
    }

    #[test]
    fn a_script_whose_user_could_not_be_created_fails_and_reconnects() {
        let replies = |parts: &[&str]| Bytes::from(parts.concat());
        let ok = "+OK\r\n";
        let (reply, next) = unwrap_script(&replies(&[ok, ok, ":1\r\n", ok]), 2, "n:1");
        assert_eq!((&reply[..], next), (&b":1\r\n"[..], Ok(())));
        let refused = "-ERR Error in ACL SETUSER modifier 'x'\r\n";
        let wrongpass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
        let noperm = "-NOPERM this user has no permissions to run the 'eval' command\r\n";
        for lead in [[refused, wrongpass], [ok, wrongpass]] {
            let all = replies(&[lead[0], lead[1], noperm, ok]);
            let (reply, next) = unwrap_script(&all, 2, "n:1");
            let first_error = lead.iter().find(|r| r.starts_with('-')).unwrap();
            let why = first_error[1..].trim_end();
            assert_eq!(
                String::from_utf8_lossy(&reply),
                format!(
                    "-ERR backend n:1 cannot run scripts: switching to the script user failed ({why})\r\n"
                )
            );
            assert!(next.is_err());
        }
    }
}
