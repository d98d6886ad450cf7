//! The commands the gateway answers itself (`PING`, `ECHO`, `QUIT`, `SELECT`, `COMMAND`, `CLIENT`, ...) or refuses
//! (`cmd::Policy::Local`).

mod client;
mod health;

use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::client::Replying;
use super::monitor::Monitoring;
use super::{CLUSTER_DISABLED, Session, client_tracking};
use crate::cmd::{self, Command, CommandSpec};
use crate::resp::{self, Protocol, Request};

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
                [_] | [_, _] if let Some(refusal) = self.client.ping_refusal() => {
                    self.client.local_error(started, &refusal)
                }
                [_] => self
                    .client
                    .local_reply(started, |out| resp::simple(out, b"PONG")),
                [_, message] => self
                    .client
                    .local_reply(started, |out| resp::bulk(out, message)),
                // PING's arity (-1) admits this; Redis' pingCommand refuses it itself.
                _ => self
                    .client
                    .local_error(started, "ERR wrong number of arguments for 'ping' command"),
            },
            Command::Echo => self
                .client
                .local_reply(started, |out| resp::bulk(out, &args[1])),
            Command::Quit => self.client.quit(started),
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
                cmd::command::reply(args, self.client.protocol, &mut out);
                self.client.replies.push_ready(out.freeze(), started);
            }
            // To its clients the gateway is one standalone Redis, whatever is behind it: cluster-aware clients must
            // not learn the backend nodes and go around it.
            Command::Readonly | Command::Readwrite | Command::Asking => {
                self.client.local_error(started, CLUSTER_DISABLED)
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
            Some(Command::Client) if client_tracking::is_tracking_command(spec.id) => {
                self.caching.command(&self.client, started, spec.id, args)
            }
            Some(Command::Client) => self.client.client_command(started, spec, args),
            Some(Command::Cluster) => self.client.local_error(started, CLUSTER_DISABLED),
            // The client's user is its tenant (as CLIENT LIST shows); users live in the control plane.
            Some(Command::Acl) => match spec.id {
                Command::AclWhoami => {
                    let tenant = self.client.info.tenant().unwrap_or_default();
                    self.client
                        .local_reply(started, |out| resp::bulk(out, tenant.as_bytes()));
                }
                Command::AclCat | Command::AclGenpass | Command::AclHelp => return false,
                _ => {
                    let text = format!(
                        "ERR {} is not supported by the gateway: tenants and their passwords are managed by \
                         the control plane",
                        spec.display_name()
                    );
                    self.client.local_error(started, &text);
                }
            },
            // The tenant's own slow log on this gateway.
            Some(Command::Slowlog) => {
                if let Some(view) = &self.client.tenant {
                    let mut out = BytesMut::new();
                    view.tenant.runtime.slowlog.answer(args, &mut out);
                    self.client.replies.push_ready(out.freeze(), started);
                }
            }
            Some(Command::Latency) => {
                let text = format!(
                    "ERR {} is not supported by the gateway: each backend keeps its own; the gateway's command \
                     latency is the switchyard_gateway_command_duration_seconds histogram on its admin port",
                    spec.display_name()
                );
                self.client.local_error(started, &text);
            }
            _ => return false,
        }
        true
    }

    /// `SELECT n`, within the databases the route offers (see `RoutePlan::databases`).
    pub(super) fn select(&mut self, started: Instant, index: &[u8]) {
        let Some(index) = resp::parse_int(index) else {
            return self
                .client
                .local_error(started, "ERR value is not an integer or out of range");
        };
        let databases = self
            .client
            .tenant
            .as_ref()
            .map_or(0..1, |v| v.tenant.databases());
        if !databases.contains(&index) {
            return self
                .client
                .local_error(started, "ERR DB index is out of range");
        }
        self.set_db(index as u32);
        self.client.local_ok(started);
    }

    /// `MONITOR`: `+OK`, then every command of the tenant's clients, as the gateway runs them.
    fn start_monitor(&mut self, started: Instant) {
        self.client.local_ok(started);
        self.monitor_tenant();
        self.client.info.set_monitor(true);
    }

    /// Monitors the session's tenant (see `Monitoring::start`).
    pub(super) fn monitor_tenant(&mut self) {
        if let Some(monitoring) = Monitoring::start(&self.client) {
            self.monitor = Some(monitoring);
        }
    }

    /// `RESET`: leaves every state (transaction, watches, subscriptions, monitor mode), back to database 0, RESP2,
    /// replies on and no client name.
    pub(super) fn reset(&mut self, started: Instant) {
        self.caching.off();
        self.stateful.transaction = None;
        self.stateful.watching = None;
        self.set_db(0);
        self.set_protocol(Protocol::Resp2);
        self.client.info.set_name(None);
        self.client.set_replying(Replying::On);
        self.monitor = None;
        self.client.info.set_monitor(false);
        // A subscribed client's RESET goes to the node, whose +RESET comes after every message before it.
        if !self.stateful.leave_subscriptions(&self.client, started) {
            let reset = Bytes::from_static(b"+RESET\r\n");
            self.client.replies.push_ready(reset, started);
        }
    }
}

/// Whether `name` may name a connection (`CLIENT SETNAME`, `HELLO ... SETNAME`), with Redis' error if not.
pub(super) fn valid_name(name: &[u8]) -> Result<(), &'static str> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err("ERR Client names cannot contain spaces, newlines or special characters.");
    }
    Ok(())
}
