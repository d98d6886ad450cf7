//! A reply handle's own methods: what travels with it (who the backend runs the request as, a script's limit,
//! `ASKING`), splitting it into parts, and delivering to it.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;

use super::{
    Combine, Destination, DetachedWrites, Gather, Owed, Redirect, ReplyHandle, RunAs, Sent,
    WitnessedAddress,
};

impl ReplyHandle {
    pub(super) fn new(to: Destination) -> ReplyHandle {
        ReplyHandle {
            to,
            redirect: None,
            run_as: RunAs::Gateway,
            asking: false,
            script_limit_ms: 0,
        }
    }

    /// The same handle, for a request the backend runs as `run_as` and, for a script, may run for
    /// `script_limit_ms`.
    pub(crate) fn running_as(mut self, run_as: RunAs, script_limit_ms: u32) -> ReplyHandle {
        self.run_as = run_as;
        self.script_limit_ms = script_limit_ms;
        self
    }

    pub(crate) fn run_as(&self) -> &RunAs {
        &self.run_as
    }

    /// Whether the reply's content is chosen by whoever wrote the request rather than by Redis: a script's or a
    /// function's result (every one runs as a script user, see [`RunAs`]) may be any error text, `MOVED` or
    /// `ASK` included, so a backend that acts on error replies must not take it for the node's own word.
    pub(crate) fn reply_is_payload(&self) -> bool {
        self.run_as.script_user().is_some()
    }

    /// How long the script may run (see [`ReplyHandle::running_as`]).
    pub(crate) fn script_limit(&self) -> Duration {
        Duration::from_millis(u64::from(self.script_limit_ms))
    }

    /// The same handle, for a script that must follow `ASKING` (see [`ReplyHandle::asking`]).
    pub(crate) fn after_asking(mut self) -> ReplyHandle {
        self.asking = true;
        self
    }

    pub(crate) fn asking(&self) -> bool {
        self.asking
    }

    /// The same handle, whose reply (to one write, `raw`, to the double-write secondary `writes`) also records
    /// the write's keys when it is an error (see [`DetachedWrites::witness`]).
    pub(super) fn witnessed(
        self,
        writes: Rc<DetachedWrites>,
        command: &'static str,
        raw: Bytes,
    ) -> ReplyHandle {
        let sent = Sent {
            command,
            raw,
            count: 1,
        };
        ReplyHandle {
            to: Destination::Witnessed(Owed(Some(WitnessedAddress {
                writes,
                sent: Box::new((self.to, sent)),
            }))),
            ..self
        }
    }

    /// A handle whose reply is dropped.
    pub(crate) fn discard() -> ReplyHandle {
        ReplyHandle::new(Destination::Discard)
    }

    /// The same destination, with error replies going through `redirect.via` first.
    pub(crate) fn with_redirect(self, redirect: Redirect) -> ReplyHandle {
        ReplyHandle {
            redirect: Some(redirect),
            ..self
        }
    }

    /// Splits this handle into `parts` handles; once each has its reply, `combine` makes the one reply this
    /// handle delivers. Allocates: for the rare requests a backend fans out itself.
    pub(crate) fn split(self, parts: usize, combine: Combine) -> Vec<ReplyHandle> {
        if parts == 0 {
            self.deliver(combine(Vec::new()));
            return Vec::new();
        }
        let gather = Rc::new(Gather::new(self, parts, combine));
        (0..parts)
            .map(|index| ReplyHandle::new(Destination::part(Rc::clone(&gather), index)))
            .collect()
    }

    pub(crate) fn deliver(self, reply: Bytes) {
        let error = reply.first() == Some(&b'-');
        self.deliver_run(reply, error);
    }

    /// Delivers what a run gets when its node could not answer: the replies that came, then the gateway's error for
    /// each request that got none. A redirecting backend hears of the failure first.
    pub(crate) fn failed(self, replies: Bytes) {
        if let Some(redirect) = &self.redirect {
            redirect.via.on_failure();
        }
        self.deliver_run(replies, true);
    }

    /// Delivers the replies to a run of requests; `error` says whether any of them is an error reply (the
    /// backend connection notes it while it reads them), which a redirecting backend must see first.
    pub(crate) fn deliver_run(self, replies: Bytes, error: bool) {
        if let (Some(redirect), true) = (self.redirect, error) {
            let via = Rc::clone(&redirect.via);
            let handle = ReplyHandle::new(self.to).running_as(self.run_as, self.script_limit_ms);
            return via.on_error(replies, handle, redirect);
        }
        self.to.deliver(replies, error);
    }
}
