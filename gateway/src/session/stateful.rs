//! The commands a session serves on a dedicated backend connection instead of the shared, pipelined ones:
//! blocking commands (here), transactions (`transaction`) and subscriptions (`pubsub`).
//!
//! Ordering: a client's commands reach Redis in the order it sent them, although a dedicated connection and the
//! shared ones are different sockets. A command that opens or uses a dedicated connection waits ("parks") until
//! every earlier reply has been written, and nothing read after it is dispatched before its own reply has been
//! written: exactly what a blocked client sees from Redis, which does not run a blocked client's next command
//! either. A blocking command's connection is released once its reply is written; the client's timeout is left
//! to Redis (0 = forever), and no gateway timeout cuts it.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::client::Client;
use crate::clients::{Blocked, ClientInfo, ClientState, Unblock};
use crate::cmd::policy::may_be_stateful;
use crate::cmd::{Command, CommandSpec, flag};
use crate::resp::{self, Protocol, Request};
use crate::route::Dedicated;
use pubsub::Subscription;
use transaction::{Transaction, Watching};

mod pubsub;
mod transaction;

/// What a session holds beyond the shared connections.
#[derive(Default)]
pub(super) struct Stateful {
    /// A request that waits until every earlier reply has been written.
    pub(super) parked: Option<Request>,
    /// Set after a command served on a dedicated connection: nothing more is dispatched before its reply is
    /// written.
    pub(super) barrier: bool,
    /// The connection of a blocking command or an `EXEC` in flight, released once its reply is written.
    pub(super) held: Option<Dedicated>,
    /// Set while `held` serves a blocking command.
    waiting: Option<Waiting>,
    /// The commands queued since `MULTI`.
    pub(super) transaction: Option<Transaction>,
    /// The connection holding `WATCH`ed keys.
    pub(super) watching: Option<Watching>,
    /// A subscribed client's connection and subscriptions.
    pub(super) subscription: Option<Subscription>,
}

impl Stateful {
    /// Whether nothing here concerns the next command: no transaction, subscription, parked request or barrier.
    pub(super) fn is_idle(&self) -> bool {
        self.transaction.is_none()
            && self.subscription.is_none()
            && self.parked.is_none()
            && !self.barrier
    }
}

/// A blocking command in flight, as the session knows it (the node's side, and whether the client counts as
/// blocked, is the dedicated connection's: see `clients::Blocked`).
struct Waiting {
    /// The reply slot of the command, for CLIENT UNBLOCK.
    slot: Option<u64>,
    /// Bytes of its arguments (CLIENT LIST's `argv-mem`).
    argv_mem: usize,
}

/// Whether a command blocks: the blocking list and sorted-set pops, `XREAD`/`XREADGROUP` with `BLOCK`, `WAIT`.
pub(super) fn is_blocking(spec: &CommandSpec, args: &[Bytes]) -> bool {
    match spec.id {
        Command::Wait => true,
        Command::Xread | Command::Xreadgroup => args
            .iter()
            .skip(1)
            .take_while(|a| !a.eq_ignore_ascii_case(b"streams"))
            .any(|a| a.eq_ignore_ascii_case(b"block")),
        _ => spec.has(flag::BLOCKING),
    }
}

impl Stateful {
    /// Whether `request` must wait for every earlier reply to be written before it is dispatched.
    pub(super) fn must_park(&self, client: &Client, spec: &CommandSpec, args: &[Bytes]) -> bool {
        if self.subscription.as_ref().is_some_and(|s| s.pending() > 0) {
            return true; // what a command does reaches Redis after the subscription has
        }
        if client.replies.is_empty() {
            return false;
        }
        if self.barrier {
            return true;
        }
        if !may_be_stateful(spec) {
            return false;
        }
        match &self.transaction {
            // Inside a transaction commands are only queued; EXEC runs them, after the earlier commands unless
            // it rides the shared connection those took.
            Some(transaction) => match spec.id {
                Command::Exec => !self.exec_rides_shared(client, transaction),
                id => id == Command::Reset,
            },
            // A subscription sees what earlier commands published, and no more.
            None => {
                matches!(spec.id, Command::Watch | Command::Reset)
                    || is_blocking(spec, args)
                    || spec.is_subscription()
            }
        }
    }

    /// Called whenever every reply has been written: the barrier falls, a blocking command's connection goes.
    pub(super) fn settle(&mut self, client: &mut Client) {
        self.barrier = false;
        // CLIENT UNBLOCK drops the connection before the reply is written: the wait ends here all the same.
        let unblocked = self.waiting.take().is_some();
        let released = self.held.take().is_some();
        let subscribed = self.subscription.is_some();
        self.settle_subscription(client);
        if unblocked || released || (subscribed && self.subscription.is_none()) {
            self.publish_state(&client.info);
        }
    }

    /// Shows the client's state in CLIENT LIST.
    pub(super) fn publish_state(&self, info: &ClientInfo) {
        let (channels, patterns, shard_channels) = self
            .subscription
            .as_ref()
            .map_or((0, 0, 0), Subscription::counts);
        let transaction = self.transaction.as_ref();
        info.set_state(ClientState {
            channels,
            patterns,
            shard_channels,
            multi: transaction.map(Transaction::len),
            multi_mem: transaction.map_or(0, Transaction::bytes),
            blocking_argv: self.waiting.as_ref().map(|w| w.argv_mem),
        });
    }

    /// Answers the blocked command as CLIENT UNBLOCK from another connection asked, unless its reply came first:
    /// with its timeout's reply (a null: every command that can be unblocked so answers a timeout) or with
    /// `-UNBLOCKED`; its connection is dropped, so the node forgets the command.
    pub(super) fn unblock(&mut self, client: &Client) {
        let Some(how) = client.info.take_unblock() else {
            return;
        };
        let Some(slot) = self.waiting.as_ref().and_then(|w| w.slot) else {
            return;
        };
        let mut reply = bytes::BytesMut::new();
        match how {
            Unblock::Timeout => resp::null_array(&mut reply, client.protocol),
            Unblock::Error => {
                resp::error(&mut reply, "UNBLOCKED client unblocked via CLIENT UNBLOCK")
            }
        }
        if client.replies.answer(slot, reply.freeze()) {
            self.held = None;
        }
    }

    /// Serves the commands that need a dedicated connection, and every command while the connection is in a
    /// transaction or subscribed, but `RESET` (the session's: it resets more than this). Returns false for every
    /// other command.
    pub(super) fn command(
        &mut self,
        client: &mut Client,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) -> bool {
        let served = if self.subscribed() && client.protocol == Protocol::Resp2 {
            self.subscribed_command(client, spec, request, started)
        } else if self.transaction_command(client, spec, request, started)
            || self.subscription_command(client, spec, request, started)
        {
            true
        } else if is_blocking(spec, request.args()) {
            self.blocking(client, spec, request, started);
            true
        } else {
            false
        };
        if served {
            self.publish_state(&client.info);
        }
        served
    }

    /// A blocking command, on its own connection to the node of its keys (keyless `WAIT`: the first shard), its
    /// keys under the tenant's namespace and the key it answers with shown without it.
    fn blocking(
        &mut self,
        client: &mut Client,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) {
        let (request, transform) = match client.narrow(spec, request.clone()) {
            Ok(narrowed) => narrowed,
            Err(text) => return client.local_error(started, &text),
        };
        let request = &request;
        let place = match client.place_of(spec, request.args()) {
            Ok(place) => place.unwrap_or((0, None)),
            Err(text) => return client.local_error(started, &text),
        };
        if client.double_written(place) && !spec.has(flag::READONLY) {
            let name = spec.display_name();
            return client.local_error(
                started,
                &format!(
                    "ERR {name} is refused on a double-written route: what a blocking command takes depends on when it runs, so the copies would diverge"
                ),
            );
        }
        match client.open_dedicated(place, false) {
            Ok(connection) => {
                let reply = client.replies.reserve_with(started, transform);
                let waiting = Waiting {
                    slot: reply.slot(),
                    argv_mem: request.args().iter().map(Bytes::len).sum(),
                };
                let metrics = Arc::clone(&client.worker.gateway.metrics);
                let blocked = Blocked::new(Arc::clone(&client.info), metrics);
                connection.send_blocking(request.raw().clone(), reply, blocked);
                self.held = Some(connection);
                client.info.take_unblock(); // one meant for a command before this one
                self.waiting = Some(waiting);
                self.barrier = true;
            }
            Err(reply) => client.local_error_reply(started, reply),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocking(args: &[&str]) -> bool {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.to_string())).collect();
        let spec = crate::cmd::lookup(&args).unwrap();
        is_blocking(spec, &args)
    }

    #[test]
    fn tells_blocking_commands() {
        assert!(blocking(&["BLPOP", "a", "0"]));
        assert!(blocking(&["bzpopmin", "a", "1.5"]));
        assert!(blocking(&["WAIT", "1", "0"]));
        assert!(blocking(&[
            "XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", "$"
        ]));
        assert!(!blocking(&["XREAD", "STREAMS", "block", "0"]));
        assert!(!blocking(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "STREAMS",
            "s",
            ">"
        ]));
        assert!(!blocking(&["LPOP", "a"]));
    }
}
