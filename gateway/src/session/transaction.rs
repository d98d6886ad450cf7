//! Transactions: `MULTI`/`EXEC`/`DISCARD`/`WATCH`/`UNWATCH`.
//!
//! Commands queued after `MULTI` are held in the gateway, each answered `+QUEUED` once the checks Redis makes at
//! queue time have passed (unknown command and arity, commands refused here, keys on another shard or slot than
//! the transaction's: `-CROSSSLOT`); a failed check answers Redis' error and marks the transaction failed, so
//! `EXEC` answers `-EXECABORT`, as Redis does. The first key decides where the transaction runs, so a transaction
//! whose first commands are keyless still finds its shard. `EXEC` sends `MULTI`, the queued commands and `EXEC`
//! in one write on a dedicated connection to that shard's primary (for a cluster, the slot's master), and the
//! client gets `EXEC`'s reply. `WATCH` opens that connection early, at the watched keys' place, and the
//! transaction must then stay there.
//!
//! Under double-write the transaction runs on the primary; once its `EXEC` succeeded, its write commands are sent
//! to each secondary in order, in the background, as other double-writes with ack `primary` are.

use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::{Replying, Session};
use crate::cmd::{Command, CommandSpec, acl, flag};
use crate::reply::{Transform, chain};
use crate::resp::{self, Protocol, Request};
use crate::route::{CROSSSLOT, Dedicated, Exec, Place};

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// The commands queued since `MULTI`.
#[derive(Default)]
pub(super) struct Transaction {
    queued: Vec<(&'static CommandSpec, Request)>,
    /// How the replies of some queued commands (by index) are rewritten for the tenant, as they would be outside
    /// a transaction (key names without the key namespace, visible `CONFIG GET` parameters...).
    transforms: Vec<(usize, Transform)>,
    /// Where the transaction runs: the place of its first key (or of the watched keys).
    place: Option<Place>,
    /// A command was refused at queue time: `EXEC` answers `EXECABORT`.
    failed: bool,
    /// Its keys as the destination of a migration places them (see `readiness`).
    pub(super) followed: super::readiness::Followed,
}

impl Transaction {
    /// Commands queued.
    pub(super) fn len(&self) -> usize {
        self.queued.len()
    }

    /// Bytes of the commands queued.
    pub(super) fn bytes(&self) -> usize {
        self.queued
            .iter()
            .map(|(_, request)| request.raw().len())
            .sum()
    }
}

/// The connection holding the client's `WATCH`es, and where the watched keys live.
pub(super) struct Watching {
    connection: Dedicated,
    place: Place,
    /// The watched keys as the destination of a migration places them (see `readiness`).
    pub(super) followed: super::readiness::Followed,
}

impl Watching {
    fn new(connection: Dedicated, place: Place) -> Watching {
        Watching {
            connection,
            place,
            followed: super::readiness::Followed::default(),
        }
    }
}

/// `EXEC`'s reply with the elements of the commands in `transforms` rewritten by theirs; a transaction that did
/// not run (a null: WATCH aborted it; an error) as it is.
fn exec_replies(transforms: Vec<(usize, Transform)>) -> Option<Transform> {
    if transforms.is_empty() {
        return None;
    }
    Some(Box::new(move |reply: Bytes| {
        let header = match reply.first() {
            Some(b'*') if !reply.starts_with(b"*-") => reply.iter().position(|&b| b == b'\n'),
            _ => None,
        };
        let Some(header) = header.map(|i| i + 1) else {
            return reply;
        };
        let mut out = BytesMut::with_capacity(reply.len());
        out.extend_from_slice(&reply[..header]);
        let mut transforms = transforms.into_iter().peekable();
        for (i, element) in resp::each_reply(&reply[header..]).enumerate() {
            match transforms.next_if(|(at, _)| *at == i) {
                Some((_, transform)) => out.extend_from_slice(&transform(reply.slice_ref(element))),
                None => out.extend_from_slice(element),
            }
        }
        out.freeze()
    }))
}

/// Connection commands (which the gateway answers itself) and subscriptions would act on the backend's
/// connection inside a transaction, not on the client's: refused there, except those that mean the same.
fn gateway_state_in_multi(spec: &CommandSpec) -> bool {
    let connection = spec.acl_categories & acl::CONNECTION != 0;
    let subscription = spec.is_subscription();
    // INFO and CONFIG RESETSTAT are the gateway's figures (a backend's INFO shows every tenant's databases).
    let figures = matches!(spec.id, Command::Info | Command::ConfigResetstat);
    ((connection || subscription) && !matches!(spec.id, Command::Ping | Command::Echo)) || figures
}

impl Session {
    /// Serves the transaction commands, and every command while a transaction is open. Returns false for the
    /// commands that are served as usual (those outside a transaction, and `QUIT`).
    pub(super) fn transaction_command(
        &mut self,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) -> bool {
        if self.stateful.transaction.is_some() {
            match spec.id {
                Command::Exec => self.exec(started),
                Command::Discard => {
                    self.stateful.transaction = None;
                    self.stateful.watching = None;
                    self.local_ok(started);
                }
                Command::Multi => self.local_error(started, "ERR MULTI calls can not be nested"),
                Command::Watch => {
                    self.local_error(started, "ERR WATCH inside MULTI is not allowed")
                }
                Command::Quit | Command::Reset => return false,
                _ => self.queue(spec, request, started),
            }
            return true;
        }
        match spec.id {
            Command::Multi => {
                let watching = self.stateful.watching.as_ref();
                self.stateful.transaction = Some(Transaction {
                    place: watching.map(|w| w.place),
                    followed: watching.map(|w| w.followed.clone()).unwrap_or_default(),
                    ..Transaction::default()
                });
                self.local_ok(started);
            }
            Command::Exec => self.local_error(started, "ERR EXEC without MULTI"),
            Command::Discard => self.local_error(started, "ERR DISCARD without MULTI"),
            Command::Watch => self.watch(spec, request, started),
            Command::Unwatch => {
                self.stateful.watching = None;
                self.local_ok(started);
            }
            _ => return false,
        }
        true
    }

    /// Marks the open transaction (if any) failed: a command was refused at queue time.
    pub(super) fn fail_transaction(&mut self) {
        if let Some(transaction) = &mut self.stateful.transaction {
            transaction.failed = true;
        }
    }

    fn local_ok(&self, started: Instant) {
        self.local_reply(started, |out| resp::simple(out, b"OK"));
    }

    /// A command after `MULTI`: checked as Redis checks it at queue time, then held until `EXEC`.
    fn queue(&mut self, spec: &'static CommandSpec, request: &Request, started: Instant) {
        let queued = self.queueable(spec, request);
        let (request, transform) = match queued {
            Ok(queued) => queued,
            Err(text) => {
                self.fail_transaction();
                return self.local_error(started, &text);
            }
        };
        if let Some(transaction) = &mut self.stateful.transaction {
            if let Some(transform) = transform {
                transaction
                    .transforms
                    .push((transaction.queued.len(), transform));
            }
            transaction.queued.push((spec, request));
        }
        self.local_reply(started, |out| resp::simple(out, b"QUEUED"));
    }

    /// The command as it joins the transaction (see `Session::narrow`) with how its element of `EXEC`'s reply is
    /// rewritten, or why it cannot join, in Redis' words where Redis has them.
    fn queueable(
        &mut self,
        spec: &'static CommandSpec,
        request: &Request,
    ) -> Result<(Request, Option<Transform>), String> {
        let (request, transform) = self.narrow(spec, request.clone())?;
        self.follow_keys(spec, request.args());
        if spec.has(flag::NO_MULTI) {
            return Err("ERR Command not allowed inside a transaction".to_string());
        }
        if gateway_state_in_multi(spec) {
            let name = spec.display_name();
            return Err(format!(
                "ERR {name} inside MULTI is not supported by the gateway"
            ));
        }
        let place = self.place_of(spec, request.args())?;
        let Some(transaction) = &mut self.stateful.transaction else {
            return Ok((request, transform));
        };
        match (transaction.place, place) {
            (None, Some(place)) => transaction.place = Some(place),
            (Some(first), Some(place)) if first != place => return Err(CROSSSLOT.to_string()),
            _ => {}
        }
        // Its writes will be replayed on the secondaries: a random effect would make them diverge.
        let shard = transaction.place.map_or(0, |(shard, _)| shard);
        match self.tenant.as_ref() {
            Some(view) if !spec.has(flag::READONLY) => view
                .route
                .double_write_refusal(shard, spec, request.args())
                .map_or(Ok((request, transform)), Err),
            _ => Ok((request, transform)),
        }
    }

    /// `WATCH key...`: on the dedicated connection of the watched keys' place (opened by the first WATCH), the
    /// keys under the tenant's namespace.
    fn watch(&mut self, spec: &'static CommandSpec, request: &Request, started: Instant) {
        let request = match self.narrow(spec, request.clone()) {
            Ok((request, _)) => request,
            Err(text) => return self.local_error(started, &text),
        };
        self.check_readiness(spec, request.args());
        let place = match self.place_of(spec, request.args()) {
            Ok(place) => place.unwrap_or((0, None)),
            Err(text) => return self.local_error(started, &text),
        };
        let watching = match self.stateful.watching.take() {
            Some(watching) if watching.place != place => {
                self.stateful.watching = Some(watching);
                return self.local_error(started, CROSSSLOT);
            }
            Some(watching) => watching,
            None => match self.open_dedicated(place, false) {
                Ok(connection) => Watching::new(connection, place),
                Err(reply) => return self.local_error_reply(started, reply),
            },
        };
        let reply = self.replies.reserve(started);
        watching.connection.send(request.raw().clone(), vec![reply]);
        self.stateful.watching = Some(watching);
        self.stateful.barrier = true;
        self.follow_keys(spec, request.args());
    }

    /// `EXEC`: the transaction runs where its route says (see `ResolvedRoute::exec`), on the watching connection
    /// if keys are watched; a connection it takes is held until its reply is written.
    fn exec(&mut self, started: Instant) {
        let Some(transaction) = self.stateful.transaction.take() else {
            return;
        };
        // Counted whether it runs here or not: on the destination it would fail.
        self.count_exec(&transaction.followed);
        let watching = self.stateful.watching.take().map(|w| w.connection);
        if transaction.failed {
            return self.local_error(started, EXECABORT);
        }
        let Some(view) = &self.tenant else { return };
        let place = transaction.place.unwrap_or((0, None));
        let exec = Exec {
            tenant: &view.tenant,
            queued: &transaction.queued,
            place,
            affinity: self.info.id as usize,
        };
        let rewrite = exec_replies(transaction.transforms);
        let held = view.route.exec(
            exec,
            watching,
            || self.open_dedicated(place, false),
            |replicate| {
                self.replies
                    .reserve_with(started, chain(rewrite, replicate))
            },
        );
        match held {
            Ok(None) => {}
            Ok(Some(connection)) => {
                self.stateful.held = Some(connection);
                self.stateful.barrier = true;
            }
            Err(reply) => self.local_error_reply(started, reply),
        }
    }

    /// Whether `EXEC` rides the shared connection, so that it need not wait for earlier replies.
    pub(super) fn exec_rides_shared(&self, transaction: &Transaction) -> bool {
        let place = transaction.place.unwrap_or((0, None));
        let watching = self.stateful.watching.is_some();
        self.tenant
            .as_ref()
            .is_some_and(|view| view.route.exec_rides_shared(place, watching))
    }

    /// `RESET`: leaves every state (transaction, watches, subscriptions), back to database 0, RESP2 and no client
    /// name.
    pub(super) fn reset(&mut self, started: Instant) {
        self.stateful.transaction = None;
        self.stateful.watching = None;
        self.set_db(0);
        self.set_protocol(Protocol::Resp2);
        self.info.set_name(None);
        self.set_replying(Replying::On);
        self.stop_monitor();
        // A subscribed client's RESET goes to the node, whose +RESET comes after every message before it.
        if !self.leave_subscriptions(started) {
            self.replies
                .push_ready(Bytes::from_static(b"+RESET\r\n"), started);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_rewrites_only_the_elements_of_commands_with_a_transform() {
        let upper: Transform = Box::new(|reply: Bytes| Bytes::from(reply.to_ascii_uppercase()));
        let tagged: Transform =
            Box::new(|reply: Bytes| Bytes::from([&b"+t"[..], &reply[1..]].concat()));
        let rewrite = exec_replies(vec![(1, upper), (2, tagged)]).unwrap();
        assert_eq!(
            &rewrite(Bytes::from_static(b"*3\r\n+OK\r\n$1\r\nk\r\n+x\r\n"))[..],
            b"*3\r\n+OK\r\n$1\r\nK\r\n+tx\r\n"
        );
        // A transaction that did not run: as it is.
        let rewrite = exec_replies(vec![(0, Box::new(|_| Bytes::new()))]).unwrap();
        assert_eq!(&rewrite(Bytes::from_static(b"*-1\r\n"))[..], b"*-1\r\n");
        assert!(exec_replies(Vec::new()).is_none());
    }
}
