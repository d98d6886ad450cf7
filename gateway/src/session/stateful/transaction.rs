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

use super::Stateful;
use crate::cmd::{Command, CommandSpec, acl, flag};
use crate::reply::{Transform, chain};
use crate::resp::{self, Request};
use crate::route::{CROSSSLOT, Dedicated, Exec, Place};
use crate::session::client::Client;
use crate::session::readiness::Followed;

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// The commands queued since `MULTI`.
#[derive(Default)]
pub(in crate::session) struct Transaction {
    queued: Vec<(&'static CommandSpec, Request)>,
    /// How the replies of some queued commands (by index) are rewritten for the tenant, as they would be outside
    /// a transaction (key names without the key namespace, visible `CONFIG GET` parameters...).
    transforms: Vec<(usize, Transform)>,
    /// Where the transaction runs: the place of its first key (or of the watched keys).
    place: Option<Place>,
    /// A command was refused at queue time: `EXEC` answers `EXECABORT`.
    failed: bool,
    /// Its keys as the destination of a migration places them (see `readiness`).
    pub(in crate::session) followed: Followed,
}

impl Transaction {
    /// Commands queued.
    pub(in crate::session) fn len(&self) -> usize {
        self.queued.len()
    }

    /// Bytes of the commands queued.
    pub(in crate::session) fn bytes(&self) -> usize {
        self.queued
            .iter()
            .map(|(_, request)| request.raw().len())
            .sum()
    }
}

/// The connection holding the client's `WATCH`es, and where the watched keys live.
pub(in crate::session) struct Watching {
    connection: Dedicated,
    place: Place,
    /// The watched keys as the destination of a migration places them (see `readiness`).
    pub(in crate::session) followed: Followed,
}

impl Watching {
    fn new(connection: Dedicated, place: Place) -> Watching {
        Watching {
            connection,
            place,
            followed: Followed::default(),
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

impl Stateful {
    /// Serves the transaction commands, and every command while a transaction is open. Returns false for the
    /// commands that are served as usual (those outside a transaction, and `QUIT`).
    pub(in crate::session) fn transaction_command(
        &mut self,
        client: &mut Client,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) -> bool {
        if self.transaction.is_some() {
            match spec.id {
                Command::Exec => self.exec(client, started),
                Command::Discard => {
                    self.transaction = None;
                    self.watching = None;
                    client.local_ok(started);
                }
                Command::Multi => client.local_error(started, "ERR MULTI calls can not be nested"),
                Command::Watch => {
                    client.local_error(started, "ERR WATCH inside MULTI is not allowed")
                }
                Command::Quit | Command::Reset => return false,
                _ => self.queue(client, spec, request, started),
            }
            return true;
        }
        match spec.id {
            Command::Multi => {
                let watching = self.watching.as_ref();
                self.transaction = Some(Transaction {
                    place: watching.map(|w| w.place),
                    followed: watching.map(|w| w.followed.clone()).unwrap_or_default(),
                    ..Transaction::default()
                });
                client.local_ok(started);
            }
            Command::Exec => client.local_error(started, "ERR EXEC without MULTI"),
            Command::Discard => client.local_error(started, "ERR DISCARD without MULTI"),
            Command::Watch => self.watch(client, spec, request, started),
            Command::Unwatch => {
                self.watching = None;
                client.local_ok(started);
            }
            _ => return false,
        }
        true
    }

    /// What follows the keys of the open transaction, or of the watched keys for the next one (see `readiness`).
    fn followed(&mut self) -> Option<&mut Followed> {
        match (&mut self.transaction, &mut self.watching) {
            (Some(transaction), _) => Some(&mut transaction.followed),
            (None, Some(watching)) => Some(&mut watching.followed),
            (None, None) => None,
        }
    }

    /// Marks the open transaction (if any) failed: a command was refused at queue time.
    pub(in crate::session) fn fail_transaction(&mut self) {
        if let Some(transaction) = &mut self.transaction {
            transaction.failed = true;
        }
    }

    /// A command after `MULTI`: checked as Redis checks it at queue time, then held until `EXEC`.
    fn queue(
        &mut self,
        client: &mut Client,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) {
        let queued = self.queueable(client, spec, request);
        let (request, transform) = match queued {
            Ok(queued) => queued,
            Err(text) => {
                self.fail_transaction();
                return client.local_error(started, &text);
            }
        };
        if let Some(transaction) = &mut self.transaction {
            if let Some(transform) = transform {
                transaction
                    .transforms
                    .push((transaction.queued.len(), transform));
            }
            transaction.queued.push((spec, request));
        }
        client.local_reply(started, |out| resp::simple(out, b"QUEUED"));
    }

    /// The command as it joins the transaction (see `Client::narrow`) with how its element of `EXEC`'s reply is
    /// rewritten, or why it cannot join, in Redis' words where Redis has them.
    fn queueable(
        &mut self,
        client: &mut Client,
        spec: &'static CommandSpec,
        request: &Request,
    ) -> Result<(Request, Option<Transform>), String> {
        let (request, transform) = client.narrow(spec, request.clone())?;
        client.follow_keys(self.followed(), spec, request.args());
        if spec.has(flag::NO_MULTI) {
            return Err("ERR Command not allowed inside a transaction".to_string());
        }
        if gateway_state_in_multi(spec) {
            let name = spec.display_name();
            return Err(format!(
                "ERR {name} inside MULTI is not supported by the gateway"
            ));
        }
        let place = client.place_of(spec, request.args())?;
        let Some(transaction) = &mut self.transaction else {
            return Ok((request, transform));
        };
        match (transaction.place, place) {
            (None, Some(place)) => transaction.place = Some(place),
            (Some(first), Some(place)) if first != place => return Err(CROSSSLOT.to_string()),
            _ => {}
        }
        // Its writes will be replayed on the secondaries: a random effect would make them diverge.
        let shard = transaction.place.map_or(0, |(shard, _)| shard);
        match client.tenant.as_ref() {
            Some(view) if !spec.has(flag::READONLY) => view
                .route
                .double_write_refusal(shard, spec, request.args())
                .map_or(Ok((request, transform)), Err),
            _ => Ok((request, transform)),
        }
    }

    /// `WATCH key...`: on the dedicated connection of the watched keys' place (opened by the first WATCH), the
    /// keys under the tenant's namespace.
    fn watch(
        &mut self,
        client: &mut Client,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) {
        let request = match client.narrow(spec, request.clone()) {
            Ok((request, _)) => request,
            Err(text) => return client.local_error(started, &text),
        };
        client.check_readiness(spec, request.args());
        let place = match client.place_of(spec, request.args()) {
            Ok(place) => place.unwrap_or((0, None)),
            Err(text) => return client.local_error(started, &text),
        };
        let watching = match self.watching.take() {
            Some(watching) if watching.place != place => {
                self.watching = Some(watching);
                return client.local_error(started, CROSSSLOT);
            }
            Some(watching) => watching,
            None => match client.open_dedicated(place, false) {
                Ok(connection) => Watching::new(connection, place),
                Err(reply) => return client.local_error_reply(started, reply),
            },
        };
        let reply = client.replies.reserve(started);
        watching.connection.send(request.raw().clone(), vec![reply]);
        self.watching = Some(watching);
        self.barrier = true;
        client.follow_keys(self.followed(), spec, request.args());
    }

    /// `EXEC`: the transaction runs where its route says (see `ResolvedRoute::exec`), on the watching connection
    /// if keys are watched; a connection it takes is held until its reply is written.
    fn exec(&mut self, client: &Client, started: Instant) {
        let Some(transaction) = self.transaction.take() else {
            return;
        };
        // Counted whether it runs here or not: on the destination it would fail.
        client.count_exec(&transaction.followed);
        let watching = self.watching.take().map(|w| w.connection);
        if transaction.failed {
            return client.local_error(started, EXECABORT);
        }
        let Some(view) = &client.tenant else { return };
        let place = transaction.place.unwrap_or((0, None));
        let exec = Exec {
            tenant: &view.tenant,
            queued: &transaction.queued,
            place,
            affinity: client.info.id as usize,
        };
        let rewrite = exec_replies(transaction.transforms);
        let held = view.route.exec(
            exec,
            watching,
            || client.open_dedicated(place, false),
            |replicate| {
                client
                    .replies
                    .reserve_with(started, chain(rewrite, replicate))
            },
        );
        match held {
            Ok(None) => {}
            Ok(Some(connection)) => {
                self.held = Some(connection);
                self.barrier = true;
            }
            Err(reply) => client.local_error_reply(started, reply),
        }
    }

    /// Whether `EXEC` rides the shared connection, so that it need not wait for earlier replies.
    pub(in crate::session) fn exec_rides_shared(
        &self,
        client: &Client,
        transaction: &Transaction,
    ) -> bool {
        let place = transaction.place.unwrap_or((0, None));
        let watching = self.watching.is_some();
        client
            .tenant
            .as_ref()
            .is_some_and(|view| view.route.exec_rides_shared(place, watching))
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
