//! The session's side of `tracking`: the hot-key sample's countdown, the checks of a request's and a reply's
//! size and of a reply's latency, and what is noted when one trips. Everything past the checks is out of line:
//! the common request pays a decrement, a compare of its frame's length, and two compares per reply slot.

use std::cell::Cell;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::Session;
use crate::cmd::{self, CommandSpec};
use crate::reply::Answered;
use crate::resp::{self, Frame, Request, RequestDecoder};
use crate::tracking::{self, BigKey, Direction, SlowEntry, TrackingConfig, lock, slowlog_args};

/// A session's copy of the thresholds (one load each on the path, not a walk to the gateway's), and its
/// countdown to the next hot-key sample.
pub(super) struct SessionTracking {
    config: TrackingConfig,
    sample: Cell<u32>,
}

impl SessionTracking {
    pub(super) fn new(config: TrackingConfig) -> SessionTracking {
        SessionTracking {
            config,
            sample: Cell::new(config.hot_key_sample),
        }
    }

    /// Counts a request down towards the next hot-key sample; true for the one sampled.
    #[inline]
    fn sampled(&self) -> bool {
        let left = self.sample.get();
        if left > 1 {
            self.sample.set(left - 1);
            return false;
        }
        let every = self.config.hot_key_sample;
        self.sample.set(every);
        every != u32::MAX
    }
}

impl Session {
    /// The direct path's checks of a request about to join a run, as the client sent it (only a command with
    /// its key first is sampled: the frame then says where the key is without a look at the key specs).
    #[inline]
    pub(super) fn track_direct(&self, spec: &CommandSpec, decoder: &RequestDecoder, frame: &Frame) {
        let sampled = self.tracking.sampled();
        if sampled || frame.0.len() >= self.tracking.config.big_key_bytes {
            self.direct_tripped(sampled, spec, decoder, frame);
        }
    }

    /// The rest of `track_direct`, out of the direct path's loop.
    #[cold]
    #[inline(never)]
    fn direct_tripped(
        &self,
        sampled: bool,
        spec: &CommandSpec,
        decoder: &RequestDecoder,
        frame: &Frame,
    ) {
        if sampled
            && spec.key_is_first_argument()
            && let Some(key) = decoder.arg(frame, 1)
        {
            self.note_hot(key);
        }
        if frame.0.len() >= self.tracking.config.big_key_bytes {
            self.note_big(&frame.0, frame.0.len(), Direction::Request, false);
        }
    }

    /// The dispatch path's checks of a request about to be forwarded (its keys under the tenant's namespace, if
    /// it has one); its slot keeps the request, to be told from if its reply is slow or big.
    pub(super) fn track_dispatched(&mut self, spec: &CommandSpec, request: &Request) {
        self.replies.tag(Some(request.raw()));
        if self.tracking.sampled() && spec.key_indices(request.args(), &mut self.keys).is_ok() {
            let prefix = self.prefix();
            if let Some(key) = self.keys.first().and_then(|&i| request.args().get(i)) {
                let key = match prefix {
                    Some(prefix) if key.starts_with(&prefix) => &key[prefix.len()..],
                    _ => &key[..],
                };
                self.note_hot(key);
            }
        }
        let raw = request.raw();
        if raw.len() >= self.tracking.config.big_key_bytes {
            self.note_big(raw, raw.len(), Direction::Request, true);
        }
    }

    /// Checks a reply the session is about to write: slow, or big?
    #[inline]
    pub(super) fn track_answered(&self, elapsed: Duration, answered: &Answered<'_>) {
        let config = &self.tracking.config;
        if elapsed >= config.slower_than || answered.reply.len() >= config.big_key_bytes {
            self.noticed(elapsed, answered);
        }
    }

    /// The tenant's namespace prefix, which reports take off its keys.
    fn prefix(&self) -> Option<Bytes> {
        let view = self.tenant.as_ref()?;
        Some(view.tenant.namespace()?.prefix().clone())
    }

    #[cold]
    #[inline(never)]
    fn note_hot(&self, key: &[u8]) {
        let Some(view) = &self.tenant else { return };
        lock(&self.worker.observed)
            .tenant(&view.tenant.name)
            .hot
            .add(key, 1);
    }

    /// Notes the requests in `raw` (one, or a run's) as big; `prefixed`: their keys carry the namespace.
    #[cold]
    #[inline(never)]
    fn note_big(&self, raw: &[u8], bytes: usize, direction: Direction, prefixed: bool) {
        let Some(view) = &self.tenant else { return };
        let prefix = self.prefix().filter(|_| prefixed);
        let Some((args, key)) = tracking::requests(raw, prefix.as_deref()).next() else {
            return;
        };
        let big = BigKey {
            key,
            command: command_name(&args),
            direction,
            bytes,
            at_ms: tracking::unix_micros() / 1000,
        };
        lock(&self.worker.observed)
            .tenant(&view.tenant.name)
            .big
            .add(big);
    }

    /// A reply was slow or big: tells which request it answers (a run's slot: its first request for the slow
    /// log, each request whose own reply is big for the big keys).
    #[cold]
    #[inline(never)]
    fn noticed(&self, elapsed: Duration, answered: &Answered<'_>) {
        let (Some(view), Some(raw)) = (&self.tenant, &answered.request) else {
            return; // a reply the gateway made itself, or a command on a dedicated connection
        };
        let config = &self.tracking.config;
        let prefix = self.prefix();
        if elapsed >= config.slower_than
            && let Some((args, key)) = tracking::requests(raw, prefix.as_deref()).next()
        {
            let now = tracking::unix_micros();
            let entry = SlowEntry {
                id: 0,
                timestamp: (now / 1_000_000) as i64,
                duration_us: elapsed.as_micros().min(u128::from(u64::MAX)) as u64,
                args: slowlog_args(args),
                key,
                client_addr: self.info.addr.to_string(),
                client_name: self.info.name().unwrap_or_default(),
                run: answered.count,
            };
            let logged = view
                .tenant
                .metrics
                .slowlog
                .push(entry, config.slowlog_max_len);
            let mut observed = lock(&self.worker.observed);
            let slow = &mut observed.tenant(&view.tenant.name).slow;
            if slow.len() >= config.slowlog_max_len {
                slow.remove(0);
            }
            slow.push(logged);
        }
        if answered.reply.len() >= config.big_key_bytes {
            let replies = resp::each_reply(answered.reply);
            for ((args, key), reply) in tracking::requests(raw, prefix.as_deref()).zip(replies) {
                if reply.len() >= config.big_key_bytes {
                    let big = BigKey {
                        key,
                        command: command_name(&args),
                        direction: Direction::Reply,
                        bytes: reply.len(),
                        at_ms: tracking::unix_micros() / 1000,
                    };
                    lock(&self.worker.observed)
                        .tenant(&view.tenant.name)
                        .big
                        .add(big);
                }
            }
        }
    }

    /// `SLOWLOG GET|LEN|RESET|HELP`: the tenant's own slow log on this gateway.
    pub(super) fn slowlog(&self, args: &[Bytes], started: std::time::Instant) {
        let Some(view) = &self.tenant else { return };
        let mut out = BytesMut::new();
        view.tenant.metrics.slowlog.answer(args, &mut out);
        self.replies.push_ready(out.freeze(), started);
    }
}

/// The command table's name of the command `args` run (`""` for one it does not know).
fn command_name(args: &[Bytes]) -> &'static str {
    cmd::lookup(args).map_or("", |spec| spec.name)
}
