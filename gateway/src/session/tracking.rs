//! What the session notes of each reply it writes: the tenant's metrics, and its side of `tracking`. Nothing is
//! looked at while a request is read and forwarded: the reply slot keeps the request (a run's, shared, not
//! copied: see `reply::Tag`), and once its reply is in, one check per slot tells whether the hot-key sample's
//! countdown runs out in it, or it was slow, or a request or reply in it is big. Only then are its requests looked
//! into, out of line.

use std::cell::Cell;
use std::time::{Duration, Instant};

use bytes::Bytes;
use switchyard_schemas::policy::TrackingPolicy;

use super::client::Client;
use super::output::Output;
use crate::reply::Answered;
use crate::resp;
use crate::tracking::{
    self, BigKey, Direction, Parsed, SlowEntry, TrackingConfig, lock, slowlog_args,
};

/// A session's copy of the thresholds (one load each on the path, not a walk to the gateway's), its tenant's own
/// in place of the gateway's, and its countdown to the next request whose key is sampled.
pub(super) struct SessionTracking {
    gateway: TrackingConfig,
    config: TrackingConfig,
    /// Requests answered before the next sampled one, that one included.
    sample: Cell<u32>,
    /// Which key of a sampled request with several is counted (the next in turn).
    turn: Cell<usize>,
}

impl SessionTracking {
    pub(super) fn new(config: TrackingConfig) -> SessionTracking {
        SessionTracking {
            gateway: config,
            config,
            sample: Cell::new(config.hot_key_sample),
            turn: Cell::new(0),
        }
    }

    /// Counts `count` requests down: the index in them of the first one sampled, if the countdown runs out
    /// there (then every `hot_key_sample`-th one after it is sampled too).
    fn count_down(&self, count: u32) -> Option<u32> {
        let every = self.config.hot_key_sample;
        let left = self.sample.get();
        if count < left {
            self.sample.set(left - count);
            return None;
        }
        let after = count - left; // requests after the first sampled one
        self.sample.set(every - after % every);
        Some(left - 1)
    }
}

impl SessionTracking {
    /// The session enters a tenant with thresholds of its own (`policy`, possibly none).
    pub(super) fn track_tenant(&mut self, client: &Client, policy: &TrackingPolicy) {
        self.config = self.gateway.with(policy);
        client.replies.keep_requests(self.config.keeps_requests);
    }

    /// Moves the replies ready into `output`, each counted in its tenant's metrics and checked by tracking.
    pub(super) fn drain_replies(&self, client: &Client, output: &mut Output, now: Instant) {
        let metrics = client
            .tenant
            .as_ref()
            .map(|view| &view.tenant.runtime.counters);
        let tenant_latency = client.worker.gateway.config.metrics.tenant_latency;
        let unsent = output.len();
        client.replies.drain_ready(output.buf(), |answered| {
            if let Some(metrics) = metrics {
                let elapsed = now.saturating_duration_since(answered.started);
                let (family, count) = (answered.family, answered.count);
                client.worker.latency.observe(family, elapsed, count);
                if tenant_latency {
                    metrics.latency.observe(elapsed, count);
                }
                if let Some(replies) = answered.error {
                    metrics.errors.count(replies);
                }
                self.track_answered(client, elapsed, answered);
            }
        });
        if let Some(metrics) = metrics {
            metrics
                .sent_bytes
                .add(output.len().saturating_sub(unsent) as u64);
        }
    }

    /// Checks a slot whose reply the session is about to write: its key sampled, slow, or big?
    #[inline]
    pub(super) fn track_answered(
        &self,
        client: &Client,
        elapsed: Duration,
        answered: Answered<'_>,
    ) {
        let config = &self.config;
        let left = self.sample.get();
        let request_len = answered.request.as_ref().map_or(0, |tag| tag.raw.len());
        if answered.count < left
            && elapsed < config.slower_than
            && answered.reply.len() < config.big_reply_bytes
            && request_len < config.big_key_bytes
        {
            self.sample.set(left - answered.count);
        } else {
            self.noticed(client, elapsed, answered);
        }
    }

    /// A slot tripped a check: finds which of its requests did, and notes them.
    #[cold]
    #[inline(never)]
    fn noticed(&self, client: &Client, elapsed: Duration, answered: Answered<'_>) {
        let config = &self.config;
        let sampled = self.count_down(answered.count);
        let (Some(view), Some(tag)) = (&client.tenant, &answered.request) else {
            return; // a reply the gateway made itself, or a command on a dedicated connection
        };
        let prefix = view
            .tenant
            .namespace()
            .map(|namespace| namespace.prefix().clone());
        let prefix = prefix.as_deref();
        if let Some(first) = sampled {
            let mut frames = resp::each_request(&tag.raw);
            let mut next = 0;
            for i in (first..answered.count).step_by(config.hot_key_sample as usize) {
                let Some(frame) = frames.nth((i - next) as usize) else {
                    break;
                };
                next = i + 1;
                self.sample(client, &tag.raw, frame, prefix);
            }
        }
        let slow = elapsed >= config.slower_than;
        let big_replies = answered.reply.len() >= config.big_reply_bytes;
        let big_requests = tag.raw.len() >= config.big_key_bytes;
        if !(slow || big_replies || big_requests) {
            return;
        }
        // Replies are matched to requests only where they are in the requests' order.
        let mut replies = resp::each_reply(answered.reply).filter(|_| big_replies && tag.aligned);
        // Past the first request, only a big one is looked into.
        let requests = match big_replies || big_requests {
            true => answered.count as usize,
            false => 1,
        };
        for (i, frame) in resp::each_request(&tag.raw).enumerate().take(requests) {
            let reply = replies.next().unwrap_or_default();
            let slow = i == 0 && slow;
            let big_request = frame.len() >= config.big_key_bytes;
            let big_reply = big_reply(reply, config);
            if !(slow || big_request || big_reply.is_some()) {
                continue;
            }
            let parsed = Parsed::new(&tag.raw, frame, prefix);
            let mut observed = lock(&client.worker.observed);
            let observed = observed.tenant(&view.tenant.name);
            let at_ms = tracking::unix_micros() / 1000;
            let big = |direction, bytes: usize, elements| BigKey {
                key: parsed.kept_key(),
                command: parsed.command,
                direction,
                bytes,
                elements,
                at_ms,
            };
            if big_request {
                observed.big.add(big(Direction::Request, frame.len(), None));
            }
            if let Some(elements) = big_reply {
                observed
                    .big
                    .add(big(Direction::Reply, reply.len(), elements));
            }
            if slow {
                let entry = self.slow_entry(client, elapsed, answered.count, parsed);
                let logged = view
                    .tenant
                    .runtime
                    .slowlog
                    .push(entry, config.slowlog_max_len);
                if observed.slow.len() >= config.slowlog_max_len {
                    observed.slow.remove(0);
                }
                observed.slow.push(logged);
            }
        }
        if big_replies && !tag.aligned {
            self.note_unaligned_big_replies(client, answered.reply);
        }
    }

    /// Counts the key of a sampled request (`frame`, a piece of `raw`) for the hot keys. One key a request: of
    /// several, the next in turn, counted once for each (an estimate of how often each is touched).
    fn sample(&self, client: &Client, raw: &Bytes, frame: &[u8], prefix: Option<&[u8]>) {
        let Some(view) = &client.tenant else { return };
        let mut args = resp::request_args(frame);
        let argc = args.clone().count();
        let (name, first) = (args.next().unwrap_or_default(), args.next());
        let count = |key: &[u8], count| {
            let mut observed = lock(&client.worker.observed);
            let observed = observed.tenant(&view.tenant.name);
            observed.hot.add(key, count);
            observed.hot_threshold = self.config.hot_key_threshold;
        };
        match (client.commands.cached(name, argc), first) {
            (Some((spec, _)), Some(key)) if spec.key_is_first_argument() => {
                count(strip(key, prefix), 1);
            }
            _ => {
                let parsed = Parsed::new(raw, frame, prefix);
                let turn = self.turn.get();
                self.turn.set(turn.wrapping_add(1));
                let keys = parsed.keys.len();
                if let Some(key) = parsed.key(turn % keys.max(1)) {
                    count(key, keys as u64);
                }
            }
        }
    }

    /// The slow log's entry for a slot's first request.
    fn slow_entry(
        &self,
        client: &Client,
        elapsed: Duration,
        run: u32,
        parsed: Parsed,
    ) -> SlowEntry {
        // Placement hashes the key as stored, under the tenant's namespace.
        let backend = client.tenant.as_ref().and_then(|view| {
            let stored = parsed.key(0).map(|key| match view.tenant.namespace() {
                Some(namespace) => [&namespace.prefix()[..], &key[..]].concat(),
                None => key.to_vec(),
            });
            let resource = view
                .tenant
                .route
                .resource_of(stored.as_deref(), parsed.writes);
            resource.map(str::to_string)
        });
        SlowEntry {
            id: 0,
            timestamp: (tracking::unix_micros() / 1_000_000) as i64,
            duration_us: elapsed.as_micros().min(u128::from(u64::MAX)) as u64,
            key: parsed.kept_key(),
            args: slowlog_args(parsed.args),
            client_addr: client.info.addr.to_string(),
            client_name: client.info.name().unwrap_or_default(),
            backend: backend.unwrap_or_default(),
            run,
        }
    }

    /// Big replies of a cluster run spread over several masters, whose requests the slot does not keep in
    /// order: noted without their key and command.
    fn note_unaligned_big_replies(&self, client: &Client, replies: &[u8]) {
        let Some(view) = &client.tenant else { return };
        let mut observed = lock(&client.worker.observed);
        let observed = observed.tenant(&view.tenant.name);
        for reply in resp::each_reply(replies) {
            if let Some(elements) = big_reply(reply, &self.config) {
                observed.big.add(BigKey {
                    key: None,
                    command: "",
                    direction: Direction::Reply,
                    bytes: reply.len(),
                    elements,
                    at_ms: tracking::unix_micros() / 1000,
                });
            }
        }
    }
}

/// `key` without the namespace's `prefix`, if it has it.
fn strip<'a>(key: &'a [u8], prefix: Option<&[u8]>) -> &'a [u8] {
    prefix
        .and_then(|prefix| key.strip_prefix(prefix))
        .unwrap_or(key)
}

/// Whether `reply` is big, by its bytes or by its elements: then the elements of a collection reply.
fn big_reply(reply: &[u8], config: &TrackingConfig) -> Option<Option<u64>> {
    if reply.len() < config.big_reply_bytes {
        return None;
    }
    let elements = tracking::elements(reply);
    let many = elements.is_some_and(|n| n >= config.big_key_elements as u64);
    (many || reply.len() >= config.big_key_bytes).then_some(elements)
}
