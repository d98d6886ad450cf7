//! A non-admin tenant's pub/sub namespace (`Channels`): channel and pattern names renamed on the way to a
//! shared backend and back.

use bytes::{Bytes, BytesMut};

use super::{Namespace, aggregate_elements, bulk_content, resp_elements};
use crate::cmd::{Command, CommandSpec};
use crate::reply::Transform;
use crate::resp::{self, Protocol, Request};

/// A non-admin tenant's pub/sub namespace on a shared Redis. Its channels and patterns carry its prefix on the
/// backend (`alpha:news` for tenant `alpha`'s `news`), so tenants sharing a Redis never hear each other;
/// keyspace notification channels (`__keyspace@0__:k`, `__keyevent@0__:set`) name the tenant's own databases,
/// numbered as the backend numbers them, and carry no prefix. Clients see their own names in every reply and
/// message.
///
/// A tenant with a key namespace (admin or not) hears of its own keys only: the key in a `__keyspace@N__:<key>`
/// channel or pattern carries the namespace's prefix on the backend, and `__keyevent@N__:<event>` messages about
/// keys outside the namespace (other tenants') are dropped; clients see their keys without the prefix.
pub(crate) struct Channels {
    /// `tenant:`, and the same with glob characters escaped, for patterns.
    prefix: Bytes,
    pattern_prefix: Bytes,
    /// The tenant's databases on the backend: `base..base + databases`.
    base: u32,
    databases: u32,
    /// The key namespace's prefix, raw and as a pattern's literal start.
    keys: Option<(Bytes, Bytes)>,
}

/// The channels of keyspace notifications, which name a database.
const KEYSPACE: &[u8] = b"__keyspace@";
const KEYEVENT: &[u8] = b"__keyevent@";
const NOTIFICATIONS: [&[u8]; 2] = [KEYSPACE, KEYEVENT];

/// Whether `channel` is one Redis publishes keyspace notifications on.
pub(super) fn is_notification(channel: &[u8]) -> bool {
    NOTIFICATIONS.iter().any(|kind| channel.starts_with(kind))
}

impl Channels {
    pub(crate) fn new(tenant: &str, base: u32, databases: u32) -> Channels {
        let prefix = format!("{tenant}:");
        Channels {
            pattern_prefix: super::namespace::escape_glob(prefix.as_bytes()).into(),
            prefix: Bytes::from(prefix),
            base,
            databases,
            keys: None,
        }
    }

    /// An admin's channels, which are the backend's as they are (no prefix, databases as the backend numbers
    /// them): only its keys' notifications are narrowed, by [`Channels::with_keys`].
    pub(crate) fn unrenamed() -> Channels {
        Channels {
            prefix: Bytes::new(),
            pattern_prefix: Bytes::new(),
            base: 0,
            databases: u32::MAX,
            keys: None,
        }
    }

    /// The same channels, with keyspace notifications narrowed to `namespace`'s keys.
    pub(crate) fn with_keys(self, namespace: &Namespace) -> Channels {
        Channels {
            keys: Some((
                namespace.prefix().clone(),
                namespace.pattern_prefix().clone(),
            )),
            ..self
        }
    }

    /// The key (or key pattern) of a `__keyspace@N__:` channel as the backend knows it.
    fn outbound_key(&self, kind: &[u8], key: &[u8], pattern: bool) -> Vec<u8> {
        match &self.keys {
            Some((prefix, pattern_prefix)) if kind == KEYSPACE => {
                [if pattern { pattern_prefix } else { prefix }, key].concat()
            }
            _ => key.to_vec(),
        }
    }

    /// The key (or key pattern) of a backend's `__keyspace@N__:` channel as the tenant knows it.
    fn inbound_key<'a>(&self, kind: &[u8], key: &'a [u8], pattern: bool) -> &'a [u8] {
        match &self.keys {
            Some((prefix, pattern_prefix)) if kind == KEYSPACE => {
                let prefix = if pattern { pattern_prefix } else { prefix };
                key.strip_prefix(&prefix[..]).unwrap_or(key)
            }
            _ => key,
        }
    }

    /// A channel name, or a pattern, as the backend knows it.
    pub(crate) fn outbound(&self, name: &[u8], pattern: bool) -> Bytes {
        if let Some((kind, db, rest)) = notification(name)
            && db < self.databases
        {
            let key = self.outbound_key(kind, rest, pattern);
            return notification_channel(kind, self.base + db, &key);
        }
        let prefix = if pattern {
            &self.pattern_prefix
        } else {
            &self.prefix
        };
        [&prefix[..], name].concat().into()
    }

    /// A backend's channel name (or pattern) as the tenant knows it.
    pub(crate) fn inbound(&self, name: &[u8], pattern: bool) -> Bytes {
        if let Some((kind, db, rest)) = notification(name)
            && (self.base..self.base.saturating_add(self.databases)).contains(&db)
        {
            let key = self.inbound_key(kind, rest, pattern);
            return notification_channel(kind, db - self.base, key);
        }
        let prefix = if pattern {
            &self.pattern_prefix
        } else {
            &self.prefix
        };
        Bytes::copy_from_slice(name.strip_prefix(&prefix[..]).unwrap_or(name))
    }

    /// A request whose channel (or pattern) arguments in `names` are renamed for the backend.
    pub(crate) fn outbound_request(
        &self,
        request: &Request,
        names: std::ops::RangeFrom<usize>,
        pattern: bool,
    ) -> Request {
        let args = request
            .args()
            .iter()
            .enumerate()
            .map(|(i, arg)| match names.contains(&i) {
                true => self.outbound(arg, pattern),
                false => arg.clone(),
            })
            .collect();
        Request::from_args(args)
    }

    /// A publishing or introspecting command (`PUBLISH`, `SPUBLISH`, `PUBSUB ...`) as it goes to the backend, and
    /// how its reply is rewritten; `None` for every other command.
    pub(crate) fn outbound_command(
        self,
        spec: &CommandSpec,
        request: &Request,
    ) -> Option<(Request, Option<Transform>)> {
        let args = request.args();
        let (request, step) = match spec.id {
            Command::Publish | Command::Spublish => {
                let mut args = args.to_vec();
                args[1] = self.outbound(&args[1], false);
                return Some((Request::from_args(args), None));
            }
            Command::PubsubChannels | Command::PubsubShardchannels => {
                let mut args = args.to_vec();
                match args.get_mut(2) {
                    Some(pattern) => *pattern = self.outbound(pattern, true),
                    None => args.push(self.outbound(b"*", true)),
                }
                (Request::from_args(args), 1)
            }
            Command::PubsubNumsub | Command::PubsubShardnumsub => {
                (self.outbound_request(request, 2.., false), 2)
            }
            _ => return None,
        };
        let transform: Transform = Box::new(move |reply| self.inbound_list(reply, step));
        Some((request, Some(transform)))
    }

    /// A frame a subscribed connection receives (a message, or a (un)subscribe confirmation), with the channel
    /// and pattern names the tenant knows, and the key of a key event without the namespace's prefix; empty for
    /// a message the tenant must not see (an event about another tenant's key). Other frames are returned as they
    /// are.
    pub(crate) fn inbound_frame(&self, frame: Bytes) -> Bytes {
        // (kind, which elements are channel names, which are patterns)
        const KINDS: &[(&[u8], &[usize], &[usize])] = &[
            (b"message", &[1], &[]),
            (b"smessage", &[1], &[]),
            (b"pmessage", &[2], &[1]),
            (b"subscribe", &[1], &[]),
            (b"unsubscribe", &[1], &[]),
            (b"ssubscribe", &[1], &[]),
            (b"sunsubscribe", &[1], &[]),
            (b"psubscribe", &[], &[1]),
            (b"punsubscribe", &[], &[1]),
        ];
        // A RESP2 array, or a RESP3 push: the same elements.
        let elements = match frame.first() {
            Some(b'*' | b'>') => resp_elements(&frame),
            _ => None,
        };
        let Some(elements) = elements else {
            return frame;
        };
        let kind = elements.first().and_then(|e| bulk_content(e));
        let Some((_, channels, patterns)) = KINDS.iter().find(|(k, ..)| Some(*k) == kind) else {
            return frame;
        };
        let event_key = match self.event_key(kind, &elements) {
            Ok(key) => key,
            Err(()) => return Bytes::new(),
        };
        let mut out = BytesMut::with_capacity(frame.len());
        let protocol = if frame.starts_with(b">") {
            Protocol::Resp3
        } else {
            Protocol::Resp2
        };
        resp::push_header(&mut out, elements.len(), protocol);
        for (i, element) in elements.iter().enumerate() {
            let renamed = match bulk_content(element) {
                _ if event_key.as_ref().is_some_and(|(at, _)| *at == i) => {
                    event_key.as_ref().map(|(_, key)| key.clone())
                }
                Some(name) if channels.contains(&i) => Some(self.inbound(name, false)),
                Some(name) if patterns.contains(&i) => Some(self.inbound(name, true)),
                _ => None,
            };
            match renamed {
                Some(name) => resp::bulk(&mut out, &name),
                None => out.extend_from_slice(element),
            }
        }
        out.freeze()
    }

    /// For a message on a `__keyevent@N__:` channel to a tenant with a key namespace: the element holding the
    /// key and the key without the prefix, or Err for a key outside the namespace (on a `__keyspace@N__:`
    /// channel too). Ok(None) for other frames.
    fn event_key(
        &self,
        kind: Option<&[u8]>,
        elements: &[&[u8]],
    ) -> Result<Option<(usize, Bytes)>, ()> {
        let Some((prefix, _)) = &self.keys else {
            return Ok(None);
        };
        let (channel, payload) = match kind {
            Some(b"message") => (1, 2),
            Some(b"pmessage") => (2, 3),
            _ => return Ok(None),
        };
        let channel = elements.get(channel).and_then(|e| bulk_content(e));
        let key = match channel.and_then(notification) {
            Some((KEYEVENT, ..)) => elements.get(payload).and_then(|e| bulk_content(e)),
            // Through a pattern over every database (an admin's `__key*`), another tenant's key.
            Some((_, _, key)) if !key.starts_with(prefix) => return Err(()),
            _ => return Ok(None),
        };
        match key.and_then(|key| key.strip_prefix(&prefix[..])) {
            Some(key) => Ok(Some((payload, Bytes::copy_from_slice(key)))),
            None => Err(()),
        }
    }

    /// A `PUBSUB CHANNELS` / `SHARDCHANNELS` reply (names) or `NUMSUB` / `SHARDNUMSUB` reply (name, count...)
    /// with the names the tenant knows (`step`: elements per name).
    pub(crate) fn inbound_list(&self, reply: Bytes, step: usize) -> Bytes {
        let Some(elements) = array_elements(&reply) else {
            return reply;
        };
        let mut out = BytesMut::with_capacity(reply.len());
        resp::array_header(&mut out, elements.len());
        for (i, element) in elements.iter().enumerate() {
            match bulk_content(element) {
                Some(name) if i % step == 0 => resp::bulk(&mut out, &self.inbound(name, false)),
                _ => out.extend_from_slice(element),
            }
        }
        out.freeze()
    }
}

/// (`__keyspace@` or `__keyevent@`, database, the rest after `__:`) of a keyspace notification channel.
fn notification(name: &[u8]) -> Option<(&'static [u8], u32, &[u8])> {
    let kind = NOTIFICATIONS.into_iter().find(|k| name.starts_with(k))?;
    let after = &name[kind.len()..];
    let digits = after.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = after[digits..].strip_prefix(b"__:")?;
    let db = std::str::from_utf8(&after[..digits]).ok()?.parse().ok()?;
    Some((kind, db, rest))
}

fn notification_channel(kind: &[u8], db: u32, rest: &[u8]) -> Bytes {
    let mut digits = itoa::Buffer::new();
    [kind, digits.format(db).as_bytes(), b"__:", rest]
        .concat()
        .into()
}

/// The elements of an array reply, each a complete reply.
fn array_elements(reply: &[u8]) -> Option<Vec<&[u8]>> {
    if !reply.starts_with(b"*") {
        return None;
    }
    aggregate_elements(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_carry_the_tenants_prefix_and_notifications_its_databases() {
        let alpha = Channels::new("alpha", 2, 1);
        assert_eq!(&alpha.outbound(b"news", false)[..], b"alpha:news");
        assert_eq!(&alpha.inbound(b"alpha:news", false)[..], b"news");
        assert_eq!(
            &alpha.outbound(b"__keyspace@0__:k", false)[..],
            b"__keyspace@2__:k"
        );
        assert_eq!(
            &alpha.outbound(b"__keyevent@0__:*", true)[..],
            b"__keyevent@2__:*"
        );
        assert_eq!(
            &alpha.inbound(b"__keyspace@2__:k", false)[..],
            b"__keyspace@0__:k"
        );
        // Another database's notifications, or a pattern over every database: only the tenant's own channels.
        assert_eq!(
            &alpha.outbound(b"__keyspace@1__:k", false)[..],
            b"alpha:__keyspace@1__:k"
        );
        assert_eq!(
            &alpha.outbound(b"__key*__:*", true)[..],
            b"alpha:__key*__:*"
        );
        let odd = Channels::new("a*b", 0, 1);
        assert_eq!(&odd.outbound(b"*", true)[..], b"a\\*b:*");
        assert_eq!(&odd.inbound(b"a\\*b:x*", true)[..], b"x*");
    }

    #[test]
    fn a_key_namespace_narrows_keyspace_notifications_to_its_keys() {
        let namespace = Namespace::new("a*:");
        for channels in [
            Channels::new("alpha", 0, 1).with_keys(&namespace),
            Channels::unrenamed().with_keys(&namespace),
        ] {
            assert_eq!(
                &channels.outbound(b"__keyspace@0__:k", false)[..],
                b"__keyspace@0__:a*:k"
            );
            assert_eq!(
                &channels.outbound(b"__keyspace@0__:*", true)[..],
                b"__keyspace@0__:a\\*:*"
            );
            assert_eq!(
                &channels.outbound(b"__keyevent@0__:set", false)[..],
                b"__keyevent@0__:set"
            );
            let keyspace = Bytes::from_static(
                b"*4\r\n$8\r\npmessage\r\n$20\r\n__keyspace@0__:a\\*:*\r\n$19\r\n__keyspace@0__:a*:k\r\n$3\r\nset\r\n",
            );
            assert_eq!(
                &channels.inbound_frame(keyspace)[..],
                b"*4\r\n$8\r\npmessage\r\n$16\r\n__keyspace@0__:*\r\n$16\r\n__keyspace@0__:k\r\n$3\r\nset\r\n"
            );
            let own = Bytes::from_static(
                b">3\r\n$7\r\nmessage\r\n$18\r\n__keyevent@0__:set\r\n$4\r\na*:k\r\n",
            );
            assert_eq!(
                &channels.inbound_frame(own)[..],
                b">3\r\n$7\r\nmessage\r\n$18\r\n__keyevent@0__:set\r\n$1\r\nk\r\n"
            );
            let other = Bytes::from_static(
                b"*3\r\n$7\r\nmessage\r\n$18\r\n__keyevent@0__:set\r\n$3\r\nb:k\r\n",
            );
            assert!(channels.inbound_frame(other).is_empty());
            let wide = Bytes::from_static(
                b"*4\r\n$8\r\npmessage\r\n$10\r\n__key*__:*\r\n$18\r\n__keyspace@0__:b:k\r\n$3\r\nset\r\n",
            );
            assert!(channels.inbound_frame(wide).is_empty());
        }
        // Without a key namespace, a key event passes as it is.
        let plain = Channels::new("alpha", 0, 1);
        let event = Bytes::from_static(
            b"*3\r\n$7\r\nmessage\r\n$18\r\n__keyevent@0__:set\r\n$3\r\nb:k\r\n",
        );
        assert_eq!(plain.inbound_frame(event.clone()), event);
    }

    #[test]
    fn every_command_that_names_channels_is_in_the_pubsub_category() {
        // The session builds a tenant's namespace only for `@pubsub` commands.
        for name in [
            "publish",
            "spublish",
            "pubsub|channels",
            "pubsub|numsub",
            "pubsub|shardchannels",
            "pubsub|shardnumsub",
        ] {
            let spec = crate::cmd::lookup_by_name(name.as_bytes()).unwrap();
            assert!(spec.acl_categories & crate::cmd::acl::PUBSUB != 0, "{name}");
        }
    }

    #[test]
    fn subscribed_frames_show_the_tenants_names() {
        let alpha = Channels::new("alpha", 0, 1);
        let message =
            Bytes::from_static(b"*3\r\n$7\r\nmessage\r\n$10\r\nalpha:news\r\n$2\r\nhi\r\n");
        assert_eq!(
            &alpha.inbound_frame(message)[..],
            b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        let pmessage = Bytes::from_static(
            b"*4\r\n$8\r\npmessage\r\n$8\r\nalpha:n*\r\n$10\r\nalpha:news\r\n$2\r\nhi\r\n",
        );
        assert_eq!(
            &alpha.inbound_frame(pmessage)[..],
            b"*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        let push = Bytes::from_static(b">3\r\n$7\r\nmessage\r\n$10\r\nalpha:news\r\n$2\r\nhi\r\n");
        assert_eq!(
            &alpha.inbound_frame(push)[..],
            b">3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        let unsubscribed = Bytes::from_static(b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n");
        assert_eq!(alpha.inbound_frame(unsubscribed.clone()), unsubscribed);
        let pong = Bytes::from_static(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
        assert_eq!(alpha.inbound_frame(pong.clone()), pong);
        let numsub = Bytes::from_static(b"*2\r\n$10\r\nalpha:news\r\n:3\r\n");
        assert_eq!(
            &alpha.inbound_list(numsub, 2)[..],
            b"*2\r\n$4\r\nnews\r\n:3\r\n"
        );
    }
}
