//! Subscriptions: `SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE` and their `UNSUBSCRIBE`s, on one dedicated connection
//! per subscribed client.
//!
//! Where channels live: a tenant's channels and patterns (`SUBSCRIBE`, `PSUBSCRIBE`, `PUBLISH`, `PUBSUB`) all
//! live on its first shard, so a publisher and a subscriber always meet and a pattern sees every channel;
//! shard channels (`SSUBSCRIBE`, `SPUBLISH`) are placed by the channel's hash like keys (on a cluster, the master
//! of the channel's slot). A client's subscriptions share one connection, so they must all live on one node.
//!
//! The session mirrors the subscription sets, which tells it how many confirmations each command brings and when
//! the client leaves the subscribed state. Each confirmation has its slot in the reply queue, taken when the
//! command is sent, so it keeps its place among the client's replies; messages go to the reply queue as they
//! arrive, between replies (see `ReplyQueue::push_message`). While confirmations are pending, the client's next
//! command waits (see `stateful`): what it does reaches Redis after the subscription has.
//!
//! Protocols: in RESP2 the subscribed state accepts only what Redis accepts there, with Redis' error otherwise.
//! In RESP3 confirmations and messages are push frames, the node's own, and every command is served as usual
//! while subscribed. A RESP3 client's `PUBLISH` or `SPUBLISH` to the node of its subscriptions goes over the
//! subscription's connection, so that, as from Redis, the message the client receives from itself comes before
//! the reply (except on a double-written route, where it goes to every write resource as usual). The protocol
//! of a subscribed connection cannot change (`HELLO 2` is refused until unsubscribed): its node's connection
//! speaks the protocol it was opened with.

use std::collections::HashSet;
use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::Stateful;
use crate::cmd::{Command, CommandSpec};
use crate::reply::{ReplyHandle, ReplyQueue};
use crate::resp::{self, Protocol, Request};
use crate::route::{Dedicated, Place};
use crate::session::client::Client;

/// A subscribed client's connection and what it is subscribed to.
pub(in crate::session) struct Subscription {
    connection: Dedicated,
    channels: HashSet<Bytes>,
    patterns: HashSet<Bytes>,
    shard_channels: HashSet<Bytes>,
}

impl Subscription {
    /// Whether the client is in the subscribed state.
    fn active(&self) -> bool {
        !(self.channels.is_empty() && self.patterns.is_empty() && self.shard_channels.is_empty())
    }

    /// (channels, patterns, shard channels) subscribed to.
    pub(in crate::session) fn counts(&self) -> (usize, usize, usize) {
        (
            self.channels.len(),
            self.patterns.len(),
            self.shard_channels.len(),
        )
    }

    /// Confirmations still expected.
    pub(in crate::session) fn pending(&self) -> usize {
        self.connection.pending()
    }

    fn set(&mut self, command: Command) -> &mut HashSet<Bytes> {
        match command {
            Command::Psubscribe | Command::Punsubscribe => &mut self.patterns,
            Command::Ssubscribe | Command::Sunsubscribe => &mut self.shard_channels,
            _ => &mut self.channels,
        }
    }
}

impl Stateful {
    /// Whether the client is in the subscribed state.
    pub(in crate::session) fn subscribed(&self) -> bool {
        self.subscription.as_ref().is_some_and(Subscription::active)
    }

    /// A command in RESP2's subscribed state: the subscription commands, PING, QUIT and RESET; Redis' error for
    /// the rest. Returns false for QUIT, served as usual.
    pub(in crate::session) fn subscribed_command(
        &mut self,
        client: &mut Client,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) -> bool {
        let args = request.args();
        match spec.id {
            // RESET is the session's: it resets more than the subscriptions.
            Command::Quit | Command::Reset => return false,
            Command::Ping => {
                let message = args.get(1).map_or(&b""[..], |m| &m[..]);
                client.local_reply(started, |out| {
                    resp::array_header(out, 2);
                    resp::bulk(out, b"pong");
                    resp::bulk(out, message);
                });
            }
            _ if !self.subscription_command(client, spec, request, started) => {
                let text = format!(
                    "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                    spec.name
                );
                client.local_error(started, &text);
            }
            _ => {}
        }
        true
    }

    /// The (un)subscribe commands. Returns false for every other command.
    pub(in crate::session) fn subscription_command(
        &mut self,
        client: &mut Client,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) -> bool {
        if !spec.is_subscription() {
            return false;
        }
        // The channels as the backend knows them (the tenant's namespace, see `tenancy::Channels`).
        let channels = client.tenant.as_ref().and_then(|v| v.tenant.channels());
        let patterns = matches!(spec.id, Command::Psubscribe | Command::Punsubscribe);
        let renamed = channels.map(|c| c.outbound_request(request, 1.., patterns));
        let outbound = renamed.as_ref().unwrap_or(request);
        match spec.id {
            Command::Subscribe | Command::Psubscribe => {
                self.subscribe(client, spec, outbound, (0, None), started)
            }
            Command::Ssubscribe => match client.place_of(spec, outbound.args()) {
                Ok(place) => {
                    self.subscribe(client, spec, outbound, place.unwrap_or((0, None)), started)
                }
                Err(text) => client.local_error(started, &text),
            },
            _ => self.unsubscribe(client, spec, request, outbound, started),
        }
        true
    }

    fn subscribe(
        &mut self,
        client: &Client,
        spec: &'static CommandSpec,
        request: &Request,
        place: Place,
        started: Instant,
    ) {
        let mut subscription = match self.subscription.take() {
            Some(subscription) => subscription,
            None => match client.open_dedicated(place, true) {
                Ok(connection) => Subscription {
                    connection,
                    channels: HashSet::new(),
                    patterns: HashSet::new(),
                    shard_channels: HashSet::new(),
                },
                Err(reply) => return client.local_error_reply(started, reply),
            },
        };
        match client.serves(&subscription.connection, place) {
            Ok(true) => {}
            Ok(false) => {
                self.subscription = Some(subscription);
                return client.local_error(
                    started,
                    "ERR a client's subscriptions must all live on one backend node; subscribe to channels of another shard or slot on another connection",
                );
            }
            Err(reply) => {
                self.subscription = Some(subscription);
                return client.local_error_reply(started, reply);
            }
        }
        let channels = &request.args()[1..];
        subscription.set(spec.id).extend(channels.iter().cloned());
        let confirmations = confirmations(&client.replies, channels.len(), started);
        subscription
            .connection
            .send(request.raw().clone(), confirmations);
        self.subscription = Some(subscription);
    }

    /// An unsubscribe command, `request` as the client sent it and `outbound` as the backend knows its channels.
    fn unsubscribe(
        &mut self,
        client: &Client,
        spec: &'static CommandSpec,
        request: &Request,
        outbound: &Request,
        started: Instant,
    ) {
        let Some(subscription) = &mut self.subscription else {
            // Not subscribed: what Redis answers, one confirmation per channel (or one for none), count 0.
            let channels = &request.args()[1..];
            let (name, protocol) = (spec.name.as_bytes(), client.protocol);
            // Written even with replies off, as every confirmation (see `confirmations`).
            return client.replies.pushing(|| {
                client.local_reply(started, |out| {
                    if channels.is_empty() {
                        unsubscribed(out, name, None, protocol);
                    }
                    for channel in channels {
                        unsubscribed(out, name, Some(channel), protocol);
                    }
                })
            });
        };
        let channels = &outbound.args()[1..];
        let set = subscription.set(spec.id);
        let replies = if channels.is_empty() {
            let count = set.len().max(1);
            set.clear();
            count
        } else {
            for channel in channels {
                set.remove(channel);
            }
            channels.len()
        };
        let confirmations = confirmations(&client.replies, replies, started);
        subscription
            .connection
            .send(outbound.raw().clone(), confirmations);
    }

    /// A RESP3 client's `PUBLISH` or `SPUBLISH` (`request` as the backend knows its channel) while subscribed on
    /// the node it goes to: sent over the subscription's connection (see the module's doc). Returns false when
    /// it goes the usual way.
    pub(in crate::session) fn publish_in_order(
        &mut self,
        client: &mut Client,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) -> bool {
        if client.protocol != Protocol::Resp3
            || !matches!(spec.id, Command::Publish | Command::Spublish)
        {
            return false;
        }
        if !self.subscribed() {
            return false;
        }
        let place = match client.place_of(spec, request.args()) {
            Ok(place) => place.unwrap_or((0, None)),
            Err(_) => return false, // the usual way, which gives the error
        };
        if client.double_written(place) {
            return false; // every write resource gets it, the usual way
        }
        let Some(subscription) = &self.subscription else {
            return false;
        };
        if !matches!(client.serves(&subscription.connection, place), Ok(true)) {
            return false;
        }
        let reply = client.replies.reserve(started);
        subscription
            .connection
            .send(request.raw().clone(), vec![reply]);
        true
    }

    /// Leaves the subscribed state at once (RESET): the node is told, and its reply is the client's; the
    /// connection goes when that has come. Returns false when the client was not subscribed.
    pub(in crate::session) fn leave_subscriptions(
        &mut self,
        client: &Client,
        started: Instant,
    ) -> bool {
        let Some(subscription) = self.subscription.as_mut().filter(|s| s.active()) else {
            return false;
        };
        let reply = client.replies.reserve(started);
        subscription.channels.clear();
        subscription.patterns.clear();
        subscription.shard_channels.clear();
        let mut raw = BytesMut::new();
        resp::command(&mut raw, &[b"RESET"]);
        subscription.connection.send(raw.freeze(), vec![reply]);
        true
    }

    /// Called with every reply written: a subscription left and answered lets its connection go; one whose
    /// connection failed closes the client, whose messages would otherwise silently stop.
    pub(in crate::session) fn settle_subscription(&mut self, client: &mut Client) {
        let Some(subscription) = &self.subscription else {
            return;
        };
        if subscription.connection.failed() {
            self.subscription = None;
            client.closing = true;
        } else if !subscription.active() && subscription.pending() == 0 {
            self.subscription = None;
        }
    }
}

/// The reply slots of `count` confirmations, taken when their command is sent. They are written even to a client
/// that turned its replies off (`CLIENT REPLY OFF` or `SKIP`), as Redis 7.0 writes them.
fn confirmations(replies: &Rc<ReplyQueue>, count: usize, started: Instant) -> Vec<ReplyHandle> {
    replies.pushing(|| (0..count).map(|_| replies.reserve(started)).collect())
}

/// One `unsubscribe`-style confirmation with count 0: an array in RESP2, a push in RESP3.
fn unsubscribed(out: &mut BytesMut, name: &[u8], channel: Option<&Bytes>, protocol: Protocol) {
    resp::push_header(out, 3, protocol);
    resp::bulk(out, name);
    match channel {
        Some(channel) => resp::bulk(out, channel),
        None => resp::null(out, protocol),
    }
    resp::integer(out, 0);
}
