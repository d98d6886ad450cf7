//! Subscriptions: `SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE` and their `UNSUBSCRIBE`s, on one dedicated connection
//! per subscribed client.
//!
//! Where channels live: a tenant's channels and patterns (`SUBSCRIBE`, `PSUBSCRIBE`, `PUBLISH`, `PUBSUB`) all
//! live on its first shard, so a publisher and a subscriber always meet and a pattern sees every channel;
//! shard channels (`SSUBSCRIBE`, `SPUBLISH`) are placed by the channel's hash like keys (on a cluster, the master
//! of the channel's slot). A client's subscriptions share one connection, so they must all live on one node.
//!
//! The connection sends every frame it receives to the session's reply queue in arrival order (confirmations and
//! messages interleave as the node sent them) and counts the confirmations it still expects. The session mirrors
//! the subscription sets, which tells it how many confirmations each command brings and when the client leaves
//! the subscribed state. While anything is pending on the connection, the client's next command waits (see
//! `stateful`), so replies made by the gateway (PING, errors) never overtake a confirmation. In the subscribed
//! state only what Redis allows in RESP2 is accepted, with Redis' error otherwise.

use std::collections::HashSet;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::Session;
use crate::backend::dedicated::Dedicated;
use crate::cmd::CommandSpec;
use crate::resp::{self, Protocol, Request};
use crate::route::Place;

/// A subscribed client's connection and what it is subscribed to.
pub(super) struct Subscription {
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
    pub(super) fn counts(&self) -> (usize, usize, usize) {
        (
            self.channels.len(),
            self.patterns.len(),
            self.shard_channels.len(),
        )
    }

    /// Confirmations still expected.
    pub(super) fn pending(&self) -> usize {
        self.connection.pending()
    }

    fn set(&mut self, name: &str) -> &mut HashSet<Bytes> {
        match name {
            "psubscribe" | "punsubscribe" => &mut self.patterns,
            "ssubscribe" | "sunsubscribe" => &mut self.shard_channels,
            _ => &mut self.channels,
        }
    }
}

impl Session {
    /// Whether the client is in the subscribed state.
    pub(super) fn subscribed(&self) -> bool {
        self.stateful
            .subscription
            .as_ref()
            .is_some_and(Subscription::active)
    }

    /// A command while subscribed: the subscription commands, PING, QUIT and RESET; Redis' error for the rest.
    /// Returns false for QUIT, served as usual.
    pub(super) fn subscribed_command(
        &mut self,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) -> bool {
        let args = request.args();
        match spec.name {
            "quit" => return false,
            "reset" => self.reset(started),
            "ping" => {
                let message = args.get(1).map_or(&b""[..], |m| &m[..]);
                self.local_reply(started, |out| {
                    resp::array_header(out, 2);
                    resp::bulk(out, b"pong");
                    resp::bulk(out, message);
                });
            }
            _ if !self.subscription_command(spec, request, started) => {
                let text = format!(
                    "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                    spec.name
                );
                self.local_error(started, &text);
            }
            _ => {}
        }
        true
    }

    /// The (un)subscribe commands. Returns false for every other command.
    pub(super) fn subscription_command(
        &mut self,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) -> bool {
        if !matches!(
            spec.name,
            "subscribe"
                | "psubscribe"
                | "ssubscribe"
                | "unsubscribe"
                | "punsubscribe"
                | "sunsubscribe"
        ) {
            return false;
        }
        if self.protocol == Protocol::Resp3 {
            // Pushes on the client's connection are not built yet: refused, never half-served.
            let text = format!(
                "ERR {} over RESP3 is not supported by the gateway yet; use a RESP2 connection (HELLO 2) for pub/sub",
                spec.display_name()
            );
            self.local_error(started, &text);
            return true;
        }
        // The channels as the backend knows them (the tenant's namespace, see `cmd::tenancy::Channels`).
        let channels = self.tenant.as_ref().and_then(|v| v.tenant.channels());
        let patterns = matches!(spec.name, "psubscribe" | "punsubscribe");
        let renamed = channels.map(|c| c.outbound_request(request, 1.., patterns));
        let outbound = renamed.as_ref().unwrap_or(request);
        match spec.name {
            "subscribe" | "psubscribe" => self.subscribe(spec, outbound, (0, None), started),
            "ssubscribe" => match self.place_of(spec, outbound.args()) {
                Ok(place) => self.subscribe(spec, outbound, place.unwrap_or((0, None)), started),
                Err(text) => self.local_error(started, &text),
            },
            _ => self.unsubscribe(spec, request, outbound, started),
        }
        true
    }

    fn subscribe(
        &mut self,
        spec: &'static CommandSpec,
        request: &Request,
        place: Place,
        started: Instant,
    ) {
        let mut subscription = match self.stateful.subscription.take() {
            Some(subscription) => subscription,
            None => match self.open_dedicated(place, true) {
                Ok(connection) => Subscription {
                    connection,
                    channels: HashSet::new(),
                    patterns: HashSet::new(),
                    shard_channels: HashSet::new(),
                },
                Err(reply) => return self.local_error_reply(started, reply),
            },
        };
        match self.dedicated_node(place) {
            Ok(node) if node.addr == subscription.connection.addr() => {}
            Ok(_) => {
                self.stateful.subscription = Some(subscription);
                return self.local_error(
                    started,
                    "ERR a client's subscriptions must all live on one backend node; subscribe to channels of another shard or slot on another connection",
                );
            }
            Err(reply) => {
                self.stateful.subscription = Some(subscription);
                return self.local_error_reply(started, reply);
            }
        }
        let channels = &request.args()[1..];
        subscription.set(spec.name).extend(channels.iter().cloned());
        subscription
            .connection
            .send_pushed(request.raw().clone(), channels.len());
        self.stateful.subscription = Some(subscription);
    }

    /// An unsubscribe command, `request` as the client sent it and `outbound` as the backend knows its channels.
    fn unsubscribe(
        &mut self,
        spec: &'static CommandSpec,
        request: &Request,
        outbound: &Request,
        started: Instant,
    ) {
        let Some(subscription) = &mut self.stateful.subscription else {
            // Not subscribed: what Redis answers, one confirmation per channel (or one for none), count 0.
            let channels = &request.args()[1..];
            let name = spec.name.as_bytes();
            return self.local_reply(started, |out| {
                if channels.is_empty() {
                    unsubscribed(out, name, None);
                }
                for channel in channels {
                    unsubscribed(out, name, Some(channel));
                }
            });
        };
        let channels = &outbound.args()[1..];
        let set = subscription.set(spec.name);
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
        subscription
            .connection
            .send_pushed(outbound.raw().clone(), replies);
    }

    /// Leaves the subscribed state at once (RESET): the node is told, and the connection goes when its reply
    /// has come. Returns false when the client was not subscribed.
    pub(super) fn leave_subscriptions(&mut self) -> bool {
        let Some(subscription) = self.stateful.subscription.as_mut().filter(|s| s.active()) else {
            return false;
        };
        subscription.channels.clear();
        subscription.patterns.clear();
        subscription.shard_channels.clear();
        let mut raw = BytesMut::new();
        resp::command(&mut raw, &[b"RESET"]);
        subscription.connection.send_pushed(raw.freeze(), 1);
        true
    }

    /// Called with every reply written: a subscription left and answered lets its connection go; one whose
    /// connection failed closes the client, whose messages would otherwise silently stop.
    pub(super) fn settle_subscription(&mut self) {
        let Some(subscription) = &self.stateful.subscription else {
            return;
        };
        if subscription.connection.failed() {
            self.stateful.subscription = None;
            self.closing = true;
        } else if !subscription.active() && subscription.pending() == 0 {
            self.stateful.subscription = None;
        }
    }
}

/// One `unsubscribe`-style confirmation with count 0.
fn unsubscribed(out: &mut BytesMut, name: &[u8], channel: Option<&Bytes>) {
    resp::array_header(out, 3);
    resp::bulk(out, name);
    match channel {
        Some(channel) => resp::bulk(out, channel),
        None => resp::null_bulk(out),
    }
    resp::integer(out, 0);
}
