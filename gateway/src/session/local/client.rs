//! CLIENT: the gateway's own clients, as each tenant sees them (only its own), and the subcommands that cannot
//! mean anything on connections shared by many clients, refused with the reason.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::valid_name;
use crate::clients::{ClientInfo, LibAttribute, Unblock};
use crate::cmd::spec::c_str;
use crate::cmd::{Command, CommandSpec};
use crate::resp;
use crate::session::client::Client;
use crate::session::client::Replying;

/// What CLIENT KILL answers: `+OK` for the old `CLIENT KILL addr` form, the number killed for filters.
enum Kill {
    Old,
    Filtered(i64),
}

/// The filters of `CLIENT KILL <filter> <value> ...` (Redis 7.0's).
#[derive(Default)]
struct KillFilter {
    id: Option<u64>,
    addr: Option<SocketAddr>,
    laddr: Option<SocketAddr>,
    user: Option<String>,
    /// `TYPE`: every gateway client is a normal one.
    normal: Option<bool>,
    skip_me: bool,
}

impl KillFilter {
    /// Parses the filters; `tenant` is the caller's: other tenants' names are unknown users to it.
    fn parse(args: &[Bytes], tenant: &str) -> Result<KillFilter, String> {
        const SYNTAX: &str = "ERR syntax error";
        let mut filter = KillFilter {
            skip_me: true,
            ..KillFilter::default()
        };
        for pair in args.chunks(2) {
            let [name, value] = pair else {
                return Err(SYNTAX.into());
            };
            let text = String::from_utf8_lossy(value);
            match &name.to_ascii_lowercase()[..] {
                b"id" => match resp::parse_int(value) {
                    Some(id) if id > 0 => filter.id = Some(id as u64),
                    _ => return Err("ERR client-id should be greater than 0".into()),
                },
                // An address that cannot be parsed matches no client, as in Redis.
                b"addr" => filter.addr = Some(text.parse().unwrap_or(UNMATCHED)),
                b"laddr" => filter.laddr = Some(text.parse().unwrap_or(UNMATCHED)),
                b"user" if text == tenant => filter.user = Some(text.into_owned()),
                b"user" => return Err(format!("ERR No such user '{text}'")),
                b"skipme" => match &value.to_ascii_lowercase()[..] {
                    b"yes" => filter.skip_me = true,
                    b"no" => filter.skip_me = false,
                    _ => return Err(SYNTAX.into()),
                },
                b"type" => match &value.to_ascii_lowercase()[..] {
                    b"normal" => filter.normal = Some(true),
                    b"master" | b"replica" | b"slave" | b"pubsub" => filter.normal = Some(false),
                    _ => return Err(format!("ERR Unknown client type '{text}'")),
                },
                _ => return Err(SYNTAX.into()),
            }
        }
        Ok(filter)
    }

    fn matches(&self, client: &ClientInfo, me: u64) -> bool {
        !(self.skip_me && client.id == me)
            && self.id.is_none_or(|id| id == client.id)
            && self.addr.is_none_or(|addr| addr == client.addr)
            && self.laddr.is_none_or(|laddr| laddr == client.local_addr)
            && self
                .user
                .as_ref()
                .is_none_or(|user| client.tenant().as_ref() == Some(user))
            && self.normal.unwrap_or(true)
    }
}

/// An address no client has.
const UNMATCHED: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));

impl Client {
    /// `CLIENT <subcommand>`: answered here, or refused with the reason.
    pub(in crate::session) fn client_command(
        &mut self,
        started: Instant,
        spec: &'static CommandSpec,
        args: &[Bytes],
    ) {
        match spec.id {
            Command::ClientSetname => match valid_name(&args[2]) {
                Ok(()) => {
                    self.set_name(&args[2]);
                    self.local_reply(started, |out| resp::simple(out, b"OK"));
                }
                Err(e) => self.local_error(started, e),
            },
            Command::ClientReply => self.client_reply(started, &args[2]),
            Command::ClientGetname => match self.info.name() {
                Some(name) => self.local_reply(started, |out| resp::bulk(out, name.as_bytes())),
                None => self.local_reply(started, |out| resp::null(out, self.protocol)),
            },
            Command::ClientSetinfo => match lib_info(args) {
                Ok((attribute, value)) => {
                    self.info.set_lib(attribute, value);
                    self.local_reply(started, |out| resp::simple(out, b"OK"));
                }
                Err(e) => self.local_error(started, &e),
            },
            Command::ClientId => {
                self.local_reply(started, |out| resp::integer(out, self.info.id as i64))
            }
            Command::ClientInfo => {
                let line = self.info.describe(Some(args)) + "\n";
                self.local_reply(started, |out| {
                    resp::verbatim(out, line.as_bytes(), self.protocol)
                });
            }
            Command::ClientList => match list_filter(&args[2..]) {
                Ok(wanted) => {
                    let mut text = String::new();
                    for client in self.tenant_clients().iter().filter(|c| wanted(c.id)) {
                        let running = (client.id == self.info.id).then_some(args);
                        text.push_str(&client.describe(running));
                        text.push('\n');
                    }
                    self.local_reply(started, |out| {
                        resp::verbatim(out, text.as_bytes(), self.protocol)
                    });
                }
                Err(text) => self.local_error(started, &text),
            },
            Command::ClientKill => match self.client_kill(&args[2..]) {
                Ok(Kill::Old) => self.local_reply(started, |out| resp::simple(out, b"OK")),
                Ok(Kill::Filtered(count)) => {
                    self.local_reply(started, |out| resp::integer(out, count))
                }
                Err(text) => self.local_error(started, &text),
            },
            Command::ClientUnblock => match self.client_unblock(args) {
                Ok(unblocked) => self.local_reply(started, |out| resp::integer(out, unblocked)),
                Err(text) => self.local_error(started, &text),
            },
            // The gateway evicts no client for memory (it has no `maxmemory-clients`): the flag only shows.
            Command::ClientNoEvict => match &args[2].to_ascii_lowercase()[..] {
                switch @ (b"on" | b"off") => {
                    self.info.set_no_evict(switch == b"on");
                    self.local_reply(started, |out| resp::simple(out, b"OK"));
                }
                _ => self.local_error(started, "ERR syntax error"),
            },
            _ => {
                let name = spec.display_name();
                let why = client_refusal(spec.id);
                self.local_error(
                    started,
                    &format!("ERR {name} is not supported by the gateway{why}"),
                )
            }
        }
    }

    /// `CLIENT REPLY ON|OFF|SKIP`: which of the client's replies are written. `OFF` and `SKIP` answer nothing
    /// (their own reply is the first one not written); `ON` always answers `+OK`, even as the command a `SKIP`
    /// skips, as Redis does.
    fn client_reply(&mut self, started: Instant, mode: &[u8]) {
        match mode.to_ascii_lowercase().as_slice() {
            b"on" => {
                self.set_replying(Replying::On);
                self.local_reply(started, |out| resp::simple(out, b"OK"));
            }
            b"off" => self.set_replying(Replying::Off),
            b"skip" if self.replying == Replying::On => self.replying = Replying::SkipNext,
            b"skip" => {}
            _ => self.local_error(started, "ERR syntax error"),
        }
    }

    /// Every client of the session's tenant (a tenant never sees another's).
    fn tenant_clients(&self) -> Vec<Arc<ClientInfo>> {
        let tenant = self
            .tenant
            .as_ref()
            .map(|v| v.tenant.name.as_str())
            .unwrap_or_default();
        self.worker.gateway.clients.of_tenant(tenant)
    }

    /// `CLIENT KILL addr` or `CLIENT KILL <filter> <value> ...`, among the tenant's clients. Killing itself, a
    /// client gets its reply first, as from Redis.
    fn client_kill(&mut self, args: &[Bytes]) -> Result<Kill, String> {
        let (filter, old) = match args {
            [addr] => {
                let addr = std::str::from_utf8(addr).ok().and_then(|a| a.parse().ok());
                let filter = KillFilter {
                    addr: Some(addr.unwrap_or(UNMATCHED)),
                    ..KillFilter::default()
                };
                (filter, true)
            }
            _ => (
                KillFilter::parse(args, &self.info.tenant().unwrap_or_default())?,
                false,
            ),
        };
        let mut killed = 0;
        let mut others = false;
        for client in self.tenant_clients() {
            if !filter.matches(&client, self.info.id) {
                continue;
            }
            if client.id == self.info.id {
                killed += 1;
                self.closing = true;
            } else if self.worker.gateway.clients.kill(&client) {
                killed += 1;
                others = true;
            }
        }
        if others {
            self.worker.gateway.wake_sessions();
        }
        match (old, killed) {
            (true, 0) => Err("ERR No such client".into()),
            (true, _) => Ok(Kill::Old),
            (false, count) => Ok(Kill::Filtered(count)),
        }
    }
}

impl Client {
    /// `CLIENT UNBLOCK id [TIMEOUT|ERROR]` among the tenant's clients, checked in Redis 7.0's order: 1 when the
    /// client waits in a blocking command (its session answers it when woken, unless its reply comes first), else
    /// 0. A client in `WAIT` is not unblocked with `TIMEOUT`, whose reply would be the count of replicas that
    /// acknowledged, which only the node knows.
    fn client_unblock(&self, args: &[Bytes]) -> Result<i64, String> {
        let how = match args {
            [_, _, _] => Unblock::Timeout,
            [_, _, _, reason] if reason.eq_ignore_ascii_case(b"timeout") => Unblock::Timeout,
            [_, _, _, reason] if reason.eq_ignore_ascii_case(b"error") => Unblock::Error,
            [_, _, _, _] => {
                return Err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR".into());
            }
            _ => {
                return Err(format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
                    String::from_utf8_lossy(&args[1])
                ));
            }
        };
        let id = resp::parse_int(&args[2]).ok_or("ERR value is not an integer or out of range")?;
        let target = self
            .tenant_clients()
            .into_iter()
            .find(|c| i64::try_from(c.id) == Ok(id))
            .filter(|c| c.is_blocked())
            .filter(|c| {
                how == Unblock::Error || c.command().is_none_or(|spec| spec.id != Command::Wait)
            });
        let Some(target) = target else {
            return Ok(0);
        };
        target.unblock(how);
        self.worker.gateway.wake_sessions();
        Ok(1)
    }
}

/// `CLIENT SETINFO attribute value` as Redis 7.2 reads it (`clientSetinfoCommand`): which attribute, and its new
/// value (`None`: an empty value clears it), or Redis' error. Both are C strings there, so a NUL ends them; the
/// value must be printable ASCII without spaces, or it would break CLIENT LIST's format.
fn lib_info(args: &[Bytes]) -> Result<(LibAttribute, Option<String>), String> {
    let [_, _, attribute, value] = args else {
        return Err("ERR wrong number of arguments for 'client|setinfo' command".into());
    };
    let attribute_text = String::from_utf8_lossy(c_str(attribute));
    let attribute = if attribute_text.eq_ignore_ascii_case("lib-name") {
        LibAttribute::Name
    } else if attribute_text.eq_ignore_ascii_case("lib-ver") {
        LibAttribute::Version
    } else {
        return Err(format!("ERR Unrecognized option '{attribute_text}'"));
    };
    let value = c_str(value);
    if value.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(format!(
            "ERR {attribute_text} cannot contain spaces, newlines or special characters."
        ));
    }
    let value = (!value.is_empty()).then(|| String::from_utf8_lossy(value).into_owned());
    Ok((attribute, value))
}

/// `CLIENT LIST [TYPE type | ID id ...]`: which client ids to list.
fn list_filter(args: &[Bytes]) -> Result<Box<dyn Fn(u64) -> bool>, String> {
    match args {
        [] => Ok(Box::new(|_| true)),
        [name, kind] if name.eq_ignore_ascii_case(b"type") => {
            match &kind.to_ascii_lowercase()[..] {
                // Every gateway client is a normal one.
                b"normal" => Ok(Box::new(|_| true)),
                b"master" | b"replica" | b"slave" | b"pubsub" => Ok(Box::new(|_| false)),
                _ => Err(format!(
                    "ERR Unknown client type '{}'",
                    String::from_utf8_lossy(kind)
                )),
            }
        }
        [name, ids @ ..] if name.eq_ignore_ascii_case(b"id") && !ids.is_empty() => {
            let ids = ids
                .iter()
                .map(|id| resp::parse_int(id).map(|id| id as u64))
                .collect::<Option<Vec<u64>>>()
                .ok_or("ERR Invalid client ID")?;
            Ok(Box::new(move |id| ids.contains(&id)))
        }
        _ => Err("ERR syntax error".to_string()),
    }
}

/// Why a CLIENT subcommand is refused, for its error text.
fn client_refusal(command: Command) -> &'static str {
    match command {
        Command::ClientPause | Command::ClientUnpause => {
            ": it would pause the backend for every tenant and every gateway"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setinfo(attribute: &[u8], value: &[u8]) -> Result<(LibAttribute, Option<String>), String> {
        let args = [&b"CLIENT"[..], b"SETINFO", attribute, value].map(Bytes::copy_from_slice);
        lib_info(&args)
    }

    #[test]
    fn setinfo_reads_its_arguments_as_redis_7_2_does() {
        assert_eq!(
            setinfo(b"LIB-NAME", b"redis-py(x_y)"),
            Ok((LibAttribute::Name, Some("redis-py(x_y)".into())))
        );
        assert_eq!(
            setinfo(b"lib-ver", b"8.0.0"),
            Ok((LibAttribute::Version, Some("8.0.0".into())))
        );
        assert_eq!(setinfo(b"Lib-Ver", b""), Ok((LibAttribute::Version, None)));
        // C strings: a NUL ends the attribute and the value.
        assert_eq!(
            setinfo(b"lib-name\0x", b"a\0 b"),
            Ok((LibAttribute::Name, Some("a".into())))
        );
        assert_eq!(
            setinfo(b"badger", b"hamster").unwrap_err(),
            "ERR Unrecognized option 'badger'"
        );
        for bad in [
            &b"redis py"[..],
            b"v\n",
            b"v\r",
            b"\x7f",
            b"caf\xc3\xa9",
            b"\t",
        ] {
            assert_eq!(
                setinfo(b"LIB-name", bad).unwrap_err(),
                "ERR LIB-name cannot contain spaces, newlines or special characters.",
                "{bad:?}"
            );
        }
        let short = [&b"CLIENT"[..], b"SETINFO", b"lib-name"].map(Bytes::copy_from_slice);
        assert_eq!(
            lib_info(&short).unwrap_err(),
            "ERR wrong number of arguments for 'client|setinfo' command"
        );
    }
}
