//! The commands the gateway answers itself (`PING`, `ECHO`, `QUIT`, `SELECT`, `COMMAND`, `CLIENT`, ...) or refuses
//! (`cmd::Policy::Local`).

mod health;

use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::{CLUSTER_DISABLED, Session};
use crate::cmd::{self, Command, CommandSpec};
use crate::resp::{self, Request};

impl Session {
    /// Answers a command the gateway owns. Returns false for everything that goes to a backend.
    pub(super) fn local_command(
        &mut self,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) -> bool {
        let args = request.args();
        match spec.id {
            // A Redis that would not serve does not say PONG (see `health`).
            Command::Ping => match args {
                [_] | [_, _] if let Some(refusal) = self.ping_refusal() => {
                    self.local_error(started, &refusal)
                }
                [_] => self.local_reply(started, |out| resp::simple(out, b"PONG")),
                [_, message] => self.local_reply(started, |out| resp::bulk(out, message)),
                // PING's arity (-1) admits this; Redis' pingCommand refuses it itself.
                _ => self.local_error(started, "ERR wrong number of arguments for 'ping' command"),
            },
            Command::Echo => self.local_reply(started, |out| resp::bulk(out, &args[1])),
            Command::Quit => self.quit(started),
            Command::Monitor => self.start_monitor(started),
            Command::Auth => self.auth(started, args),
            Command::Hello => self.hello(started, args),
            Command::Select => self.select(started, &args[1]),
            Command::Command
            | Command::CommandCount
            | Command::CommandInfo
            | Command::CommandDocs
            | Command::CommandList
            | Command::CommandGetkeys
            | Command::CommandGetkeysandflags => {
                let mut out = BytesMut::new();
                cmd::command::reply(args, self.protocol, &mut out);
                self.replies.push_ready(out.freeze(), started);
            }
            // To its clients the gateway is one standalone Redis, whatever is behind it: cluster-aware clients must
            // not learn the backend nodes and go around it.
            Command::Readonly | Command::Readwrite | Command::Asking => {
                self.local_error(started, CLUSTER_DISABLED)
            }
            // One test for every subcommand: plain commands (the hot path) pay only that.
            _ if spec.id.container().is_some() => {
                return self.local_subcommand(spec, args, started);
            }
            _ => return false,
        }
        true
    }

    /// The container commands' subcommands the gateway answers or refuses itself (see `local_command`).
    pub(super) fn local_subcommand(
        &mut self,
        spec: &'static CommandSpec,
        args: &[Bytes],
        started: Instant,
    ) -> bool {
        match spec.id.container() {
            Some(Command::Client) => self.client(started, spec, args),
            Some(Command::Cluster) => self.local_error(started, CLUSTER_DISABLED),
            // The client's user is its tenant (as CLIENT LIST shows); users live in the control plane.
            Some(Command::Acl) => match spec.id {
                Command::AclWhoami => {
                    let tenant = self.info.tenant().unwrap_or_default();
                    self.local_reply(started, |out| resp::bulk(out, tenant.as_bytes()));
                }
                Command::AclCat | Command::AclGenpass | Command::AclHelp => return false,
                _ => {
                    let text = format!(
                        "ERR {} is not supported by the gateway: tenants and their passwords are managed by \
                         the control plane",
                        spec.display_name()
                    );
                    self.local_error(started, &text);
                }
            },
            Some(Command::Slowlog) => self.slowlog(args, started),
            Some(Command::Latency) => {
                let text = format!(
                    "ERR {} is not supported by the gateway: each backend keeps its own; the gateway's command \
                     latency is the switchyard_gateway_command_duration_seconds histogram on its admin port",
                    spec.display_name()
                );
                self.local_error(started, &text);
            }
            _ => return false,
        }
        true
    }

    pub(super) fn local_reply(&self, started: Instant, write: impl FnOnce(&mut BytesMut)) {
        let mut out = BytesMut::new();
        write(&mut out);
        self.replies.push_ready(out.freeze(), started);
    }

    pub(super) fn local_error(&self, started: Instant, text: &str) {
        self.local_reply(started, |out| resp::error(out, text));
    }

    /// Refuses `spec` before running it (INFO's `rejected_calls`): a limit, a refusal of the tenant's rules, a
    /// route that cannot serve it as asked.
    pub(super) fn reject(&self, spec: &CommandSpec, started: Instant, text: &str) {
        if let Some(view) = &self.tenant {
            view.tenant.runtime.counters.commands.reject(spec.id);
        }
        self.local_error(started, text);
    }

    pub(super) fn quit(&mut self, started: Instant) {
        self.local_reply(started, |out| resp::simple(out, b"OK"));
        self.closing = true;
    }

    /// `SELECT n`, within the databases the route offers (see `RoutePlan::databases`).
    pub(super) fn select(&mut self, started: Instant, index: &[u8]) {
        let Some(index) = resp::parse_int(index) else {
            return self.local_error(started, "ERR value is not an integer or out of range");
        };
        let databases = self.tenant.as_ref().map_or(0..1, |v| v.tenant.databases());
        if !databases.contains(&index) {
            return self.local_error(started, "ERR DB index is out of range");
        }
        self.set_db(index as u32);
        self.local_reply(started, |out| resp::simple(out, b"OK"));
    }

    /// Sets the connection's name, checked with `valid_name` (an empty one removes it).
    pub(super) fn set_name(&self, name: &[u8]) {
        let name = (!name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned());
        self.info.set_name(name);
    }
}

/// Whether `name` may name a connection (`CLIENT SETNAME`, `HELLO ... SETNAME`), with Redis' error if not.
pub(super) fn valid_name(name: &[u8]) -> Result<(), &'static str> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err("ERR Client names cannot contain spaces, newlines or special characters.");
    }
    Ok(())
}
