//! Runs: requests read together that go to one backend connection one after the other, sent as one piece and
//! answered into one reply slot (on a cluster, one lane per master, put back in request order).

use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::backend::{Backend, ClusterBackend};
use crate::cmd::{Command, CommandSpec};
use crate::family::Family;
use crate::reply::{Combine, DetachedWrites, ReplyQueue};
use crate::resp::{self, Frame};

/// Requests read together that go to one backend connection one after the other: their frames are adjacent in
/// the input buffer, so they are joined back into one piece, sent with one queue entry and answered by one
/// delivery of all their replies, into one reply slot. This is what makes pipelines cheap.
///
/// On a cluster route the requests of a pipeline go to several masters: the run then keeps one lane per master
/// (each sent as a run of its own), notes which lane each request went to, and puts the lanes' replies back in
/// request order in one reply slot (see `interleave`).
pub(crate) struct Run {
    replies: Rc<ReplyQueue>,
    started: Instant,
    affinity: usize,
    /// The first request's target: the first lane's.
    to: Option<RunTarget>,
    /// The run's command, for the log of a failed copy (`None` when they differ).
    command: Option<Command>,
    /// The family of its first command, which its reply slot is timed under.
    family: Family,
    /// Requests in the run, in every lane.
    count: u32,
    /// The first lane's requests.
    raw: BytesMut,
    /// The other lanes, once a request goes to a second master.
    lanes: Option<Box<Lanes>>,
    /// The replies of a run the gateway answers itself (which has no target).
    answers: Option<Answers>,
    /// The size of the input the run is read from, which sizes the lanes' buffers: each starts with half of it
    /// (within limits), so that copying frames into lanes seldom grows them.
    input: usize,
}

/// How many replies the size of its first two (the larger) the buffer of a run the gateway answers itself is
/// made for: a pipeline's worth, so that it seldom grows.
const ANSWERS_AT_ONCE: usize = 32;

/// The replies of a run the gateway answers itself: the first as it came, then (from the second on) all of them
/// back to back.
struct Answers {
    first: Bytes,
    more: BytesMut,
}

/// The lanes of a cluster run beyond the first, and the lane (0 the first) of every request.
struct Lanes {
    first: u32,
    more: Vec<Lane>,
    order: Vec<u8>,
}

/// The requests of a cluster run for one more master.
struct Lane {
    master: u16,
    /// The slot of the lane's first request.
    slot: u16,
    raw: BytesMut,
    count: u32,
}

/// Most lanes a run keeps (on a cluster with more masters, a request for yet another master starts a new run).
const MAX_LANES: usize = 16;

/// Most requests in one run: a run's replies are delivered, and written to the client, only once all are in, so
/// a long pipeline is answered run after run rather than all at once.
const MAX_RUN: u32 = 1024;

/// Bounds of a lane's initial buffer.
const LANE_CAPACITY: std::ops::RangeInclusive<usize> = 64..=64 * 1024;

/// A double-write secondary of a direct route, and where its background writes are tracked.
pub(crate) struct WriteCopy {
    pub node: Rc<Backend>,
    pub writes: Rc<DetachedWrites>,
}

/// Where a run goes.
pub(crate) enum RunTarget {
    /// A node, and the double-write copies every request of the run also goes to (writes only: a read ends such
    /// a run).
    Node {
        backend: Rc<Backend>,
        copies: Option<Rc<[WriteCopy]>>,
    },
    /// The master of a cluster that serves `slot`; `master` is its index in the slot map (a request whose
    /// master is unknown travels alone).
    Cluster {
        cluster: Rc<ClusterBackend>,
        slot: u16,
        master: Option<u16>,
    },
}

impl Run {
    /// A run of requests read from `input`.
    pub(crate) fn new(
        replies: &Rc<ReplyQueue>,
        started: Instant,
        affinity: usize,
        input: usize,
    ) -> Run {
        Run {
            replies: Rc::clone(replies),
            started,
            affinity,
            to: None,
            command: None,
            family: Family::Other,
            count: 0,
            raw: BytesMut::new(),
            lanes: None,
            answers: None,
            input,
        }
    }

    /// Requests in the run so far.
    pub(crate) fn len(&self) -> usize {
        self.count as usize
    }

    /// Adds a request for `to`, of command `spec`; a run that goes elsewhere is sent first. Returns whether
    /// one was: the requests in flight then grew by the run's, which no longer count in `len`.
    pub(crate) fn push(&mut self, to: RunTarget, spec: &'static CommandSpec, frame: Frame) -> bool {
        let (lane, sent) = match self.lane_for(&to) {
            Some(lane) => (lane, false),
            None => {
                let sent = self.to.is_some() || self.answers.is_some();
                self.send();
                self.to = Some(to);
                (0, sent)
            }
        };
        self.command = match self.count {
            0 => {
                self.family = spec.family();
                Some(spec.id)
            }
            _ => self.command.filter(|&first| first == spec.id),
        };
        self.count += 1;
        match self.lanes.as_deref_mut() {
            None => self.raw.unsplit(frame.0), // no copy: the frames are adjacent
            Some(lanes) => {
                match lane.checked_sub(1).and_then(|i| lanes.more.get_mut(i)) {
                    Some(other) => {
                        other.raw.extend_from_slice(&frame.0);
                        other.count += 1;
                    }
                    None => {
                        self.raw.extend_from_slice(&frame.0);
                        lanes.first += 1;
                    }
                }
                lanes.order.push(lane as u8);
            }
        }
        sent
    }

    /// The lane a request for `to` joins in this run (opening one if need be), or `None` if it cannot join.
    fn lane_for(&mut self, to: &RunTarget) -> Option<usize> {
        if self.count == MAX_RUN {
            return None;
        }
        match (self.to.as_ref()?, to) {
            (
                RunTarget::Node { backend, copies },
                RunTarget::Node {
                    backend: other,
                    copies: other_copies,
                },
            ) => (Rc::ptr_eq(backend, other) && copies.is_some() == other_copies.is_some())
                .then_some(0),
            (
                RunTarget::Cluster {
                    cluster,
                    master: Some(first),
                    ..
                },
                RunTarget::Cluster {
                    cluster: other,
                    master: Some(master),
                    slot,
                },
            ) if Rc::ptr_eq(cluster, other) => {
                if master == first {
                    return Some(0);
                }
                self.other_lane(*master, *slot)
            }
            _ => None,
        }
    }

    /// The lane for `master`, not the first lane's, opening one (the first time, the run's lanes) if need be.
    fn other_lane(&mut self, master: u16, slot: u16) -> Option<usize> {
        let capacity = (self.input / 2).clamp(*LANE_CAPACITY.start(), *LANE_CAPACITY.end());
        let lanes = self.lanes.get_or_insert_with(|| {
            // From now on the first lane's frames are not adjacent: they are copied too.
            let mut own = BytesMut::with_capacity(capacity);
            own.extend_from_slice(&self.raw);
            self.raw = own;
            // A request takes 16 bytes at the least.
            let mut order = Vec::with_capacity(self.input / 16);
            order.resize(self.count as usize, 0);
            Box::new(Lanes {
                first: self.count,
                more: Vec::new(),
                order,
            })
        });
        if let Some(i) = lanes.more.iter().position(|lane| lane.master == master) {
            return Some(i + 1);
        }
        if lanes.more.len() + 1 == MAX_LANES {
            return None;
        }
        lanes.more.push(Lane {
            master,
            slot,
            raw: BytesMut::with_capacity(capacity),
            count: 0,
        });
        Some(lanes.more.len())
    }

    /// Adds a request of command `spec` the gateway answers itself with `reply` (a near cache's hit): a run of
    /// such requests is answered into one ready slot; a run that goes to a backend is sent first. Returns whether
    /// one was, as `push` does.
    pub(crate) fn answer(
        &mut self,
        spec: &'static CommandSpec,
        frame: Frame,
        reply: Bytes,
    ) -> bool {
        let sent = self.to.is_some() || self.count == MAX_RUN;
        if sent {
            self.send();
        }
        match &mut self.answers {
            None => {
                self.family = spec.family();
                self.answers = Some(Answers {
                    first: reply,
                    more: BytesMut::new(),
                });
            }
            Some(answers) => {
                if answers.more.is_empty() {
                    // Room for a pipeline's worth at once: growing it reply by reply would cost more than the
                    // hits themselves.
                    let room = answers.first.len().max(reply.len()) * ANSWERS_AT_ONCE;
                    answers.more.reserve(room);
                    answers.more.extend_from_slice(&answers.first);
                }
                answers.more.extend_from_slice(&reply);
            }
        }
        self.count += 1;
        self.raw.unsplit(frame.0);
        sent
    }

    /// Sends the run, if there is one: to its node, then to each double-write copy in the background (or each
    /// lane to its cluster master, which resends what a redirect refuses); or queues the replies of a run the
    /// gateway answered. Whatever is dispatched after it gets a later reply slot.
    pub(crate) fn send(&mut self) {
        if let Some(answers) = self.answers.take() {
            return self.send_answers(answers);
        }
        let Some(to) = self.to.take() else {
            return;
        };
        let count = std::mem::take(&mut self.count);
        let raw = std::mem::take(&mut self.raw).freeze();
        self.replies.set_family(self.family);
        match (to, self.lanes.take()) {
            (RunTarget::Node { backend, copies }, _) => {
                let reply = self.replies.reserve_run(self.started, &raw, count);
                let Some(copies) = copies else {
                    return backend.send_run(raw, count, reply, self.affinity);
                };
                backend.send_run(raw.clone(), count, reply, self.affinity);
                let command = self.command.map_or("several commands", |id| id.spec().name);
                for copy in copies.iter() {
                    if let Some(handle) = copy.writes.admit_run(command, &raw, count) {
                        copy.node
                            .send_run(raw.clone(), count, handle, self.affinity);
                    }
                }
            }
            (RunTarget::Cluster { cluster, slot, .. }, None) => {
                let reply = self.replies.reserve_run(self.started, &raw, count);
                cluster.send_run(raw, slot, count, reply, self.affinity);
            }
            (RunTarget::Cluster { cluster, slot, .. }, Some(lanes)) => {
                self.send_lanes(&cluster, (raw, slot), count, *lanes);
            }
        }
    }

    /// Queues the replies of the run the gateway answered, in one slot.
    #[inline(never)]
    fn send_answers(&mut self, answers: Answers) {
        let count = std::mem::take(&mut self.count);
        let raw = std::mem::take(&mut self.raw).freeze();
        let reply = match answers.more.is_empty() {
            true => answers.first,
            false => answers.more.freeze(),
        };
        self.replies.set_family(self.family);
        self.replies
            .push_answered(reply, self.started, count, Some(&raw));
    }

    /// Sends each lane of a cluster run to its master, into one reply slot for all `count` requests.
    #[inline(never)] // keeps the common path of `send` small
    fn send_lanes(&self, cluster: &ClusterBackend, first: (Bytes, u16), count: u32, lanes: Lanes) {
        let Lanes {
            first: first_count,
            more,
            order,
        } = lanes;
        let (raw, slot) = first;
        let replies = self.replies.reserve_parts(
            self.started,
            1 + more.len(),
            count,
            interleave(order),
            Some(&raw),
        );
        let lanes = std::iter::once((raw, slot, first_count)).chain(
            more.into_iter()
                .map(|lane| (lane.raw.freeze(), lane.slot, lane.count)),
        );
        for ((raw, slot, count), reply) in lanes.zip(replies) {
            cluster.send_run(raw, slot, count, reply, self.affinity);
        }
    }
}

/// Puts the replies of a cluster run's lanes back in request order: `order[i]` is the lane of request `i`, and
/// each lane's replies come in the order of its requests.
fn interleave(order: Vec<u8>) -> Combine {
    Box::new(move |lanes: Vec<Bytes>| {
        let mut read = vec![0; lanes.len()];
        let mut out = BytesMut::with_capacity(lanes.iter().map(Bytes::len).sum());
        for &lane in &order {
            let lane = usize::from(lane);
            let next = lanes
                .get(lane)
                .zip(read.get_mut(lane))
                .and_then(|(replies, at)| {
                    let reply = replies.get(*at..)?;
                    let len = resp::reply_len(reply)?;
                    *at += len;
                    reply.get(..len)
                });
            // Every backend path answers each request of a run; the error is only a guard.
            out.extend_from_slice(next.unwrap_or(b"-ERR missing reply from a backend\r\n"));
        }
        out.freeze()
    })
}
