//! Sending one command along a tenant's route: to the key's shard, to the read or the write set, double-written
//! to every write resource, or split by shard and merged back for multi-key commands.
//!
//! Against a Redis Cluster resource, a command also carries its keys' hash slot, and a multi-key command is split
//! by (shard, slot): keys sharing a slot travel together as one sub-command, and the sub-commands for one master
//! travel as one run (one queue entry, one write, one delivery of their replies).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use switchyard_schemas::{AckMode, ReadPolicy};

use super::RoutePlan;
use super::merge::{Group, Merge, combiner, one_each};
use super::resolve::{CROSSSLOT, Endpoint, Place, ResolvedRoute, ResolvedTarget, routing_keys};
use super::scan;
use crate::backend::identity;
use crate::backend::{ClusterBackend, Keyspace};
use crate::cmd::{Command, CommandSpec, flag};
use crate::reply::{Combine, ReplyHandle, ReplyQueue, RunAs, Transform};
use crate::resp::{self, Request};

/// Everything one command's dispatch needs from its session.
pub(crate) struct Dispatch<'a> {
    pub plan: &'a RoutePlan,
    pub route: &'a ResolvedRoute,
    pub replies: &'a Rc<ReplyQueue>,
    /// Keeps a client's commands on one backend connection, so they stay in order.
    pub affinity: usize,
    pub random: &'a Cell<u64>,
    /// Reused between commands to avoid an allocation per command.
    pub keys: &'a mut Vec<usize>,
    /// Where each of `keys` goes, computed once per command (hashing is the costly part of a split).
    pub places: &'a mut Vec<Place>,
    /// Who the tenant's scripts run as (see `backend::identity`).
    pub scripts_run_as: &'a RunAs,
    /// How long the tenant's scripts may run, in milliseconds (see `ReplyHandle::running_as`).
    pub script_limit_ms: u32,
    /// Rewrites the reply before the client sees it (what a tenant may see of `CONFIG GET`, its channel names
    /// in `PUBSUB`): taken by the request's reply slot.
    pub transform: Option<Transform>,
}

/// How a command that touches several shards is split.
fn split_kind(command: Command) -> Option<(Merge, usize)> {
    // (how replies merge, arguments per key)
    match command {
        Command::Mget => Some((
            Merge::Mget {
                positions: Vec::new(),
            },
            1,
        )),
        Command::Mset => Some((Merge::AllOk, 2)),
        Command::Del | Command::Unlink | Command::Exists | Command::Touch => Some((Merge::Sum, 1)),
        _ => None,
    }
}

/// Whether the gateway splits the command by shard and slot when its keys are in several (so it does not fail
/// with CROSSSLOT there).
pub(crate) fn splits(command: Command) -> bool {
    split_kind(command).is_some()
}

/// Keyless commands that concern every shard.
fn fan_out_kind(command: Command) -> Option<(Merge, bool)> {
    // (how replies merge, whether it goes to the write sets)
    match command {
        Command::Dbsize => Some((Merge::Sum, false)),
        // Shard channels are placed by their hash (see docs/stateful.md): every node knows some of them.
        Command::PubsubShardchannels => Some((Merge::Concat, false)),
        Command::PubsubShardnumsub => Some((Merge::Counts, false)),
        Command::Keys => Some((Merge::Concat, false)),
        Command::Randomkey => Some((Merge::Random(0), false)),
        // Where SCRIPT LOAD went: every write resource.
        Command::ScriptExists => Some((Merge::AllOf, true)),
        Command::Flushall
        | Command::Flushdb
        | Command::ScriptFlush
        | Command::ScriptLoad
        | Command::FunctionFlush
        | Command::FunctionLoad
        | Command::FunctionDelete
        | Command::FunctionRestore
        | Command::ConfigSet
        | Command::ConfigResetstat => Some((Merge::First, true)),
        _ => None,
    }
}

/// A write as `send_write` sends it: the shard, the bytes, and the whole request when the bytes are all of it
/// (each write resource may then get it renumbered, see `per_resource`; a split command's sub-commands name no
/// database).
struct Write<'a> {
    shard: usize,
    raw: &'a Bytes,
    whole: Option<&'a Request>,
    keyspace: Keyspace,
}

/// What the parts of a fan-out share: the request each of them is, and how a cluster resource, which sends its
/// part to every master, combines their replies.
struct FanOut<'a> {
    request: &'a Request,
    per_resource: Rc<dyn Fn(usize) -> Combine>,
}

/// One sub-command of a split or fanned-out command (or a run of them): where it goes and its bytes.
struct Part {
    shard: usize,
    /// The hash slot of its keys (of the first sub-command's, for a run), when the shard's target has a cluster
    /// resource.
    slot: Option<u16>,
    raw: Bytes,
    /// For the sub-commands that one master of the shard's cluster serves, sent as one run: the cluster, and
    /// how many sub-commands `raw` holds.
    run: Option<(Rc<ClusterBackend>, u32)>,
}

impl Dispatch<'_> {
    /// Sends `request`; its reply (or an error reply) lands in the session's queue. Returns an error text for
    /// commands the route cannot serve as asked (CROSSSLOT, refused double-writes).
    pub(crate) fn forward(
        &mut self,
        spec: &'static CommandSpec,
        request: &Request,
        started: Instant,
    ) -> Result<(), String> {
        let args = request.args();
        let write = !spec.has(flag::READONLY);
        let sharded = self.route.shards.len() > 1;
        if sharded && matches!(spec.id, Command::Sort | Command::SortRo) {
            sort_patterns(args)?;
        }
        self.keys.clear();
        if sharded || self.route.clustered {
            routing_keys(spec, args, self.keys);
        }
        let (shard, slot) = match self.keys.first() {
            None if (sharded || self.route.clustered) && spec.id == Command::Scan => {
                return self.scan(request, started);
            }
            None => {
                if let Some((merge, write)) = fan_out_kind(spec.id)
                    && (sharded || self.route.clustered || merge.needs_every_copy())
                {
                    return self.fan_out(spec, request, write, merge, started);
                }
                (0, None)
            }
            Some(_) => {
                self.places.clear();
                for &key in self.keys.iter() {
                    let place = self.locate(&args[key]);
                    self.places.push(place);
                }
                let first = self.places[0];
                if self.places[1..].iter().any(|&place| place != first) {
                    return self.split(spec, request, write, started);
                }
                first
            }
        };
        let keyspace = slot.map_or(Keyspace::Any, Keyspace::Slot);
        let target = &self.route.shards[shard];
        if !write {
            let endpoint = self.pick_read(target);
            let run_as = identity::run_as(spec, self.scripts_run_as);
            endpoint.send(
                request.raw().clone(),
                keyspace,
                self.reserve(started)
                    .running_as(run_as, self.script_limit_ms),
                self.affinity,
            );
            return Ok(());
        }
        self.check_double_write(spec, args, target)?;
        let parts = self.write_parts(target);
        let write = Write {
            shard,
            raw: request.raw(),
            whole: Some(request),
            keyspace,
        };
        if parts == 1 {
            let handle = self.reserve(started);
            self.send_write(spec, target, write, [handle]);
        } else {
            let group = Group {
                parts: 0..parts,
                ack: target.ack,
            };
            let combine = transformed(combiner(vec![group], Merge::Only), self.transform.take());
            let handles = self.replies.reserve_parts(started, parts, 1, combine, None);
            self.send_write(spec, target, write, handles);
        }
        Ok(())
    }

    /// The request's reply slot, rewritten by `transform` if set.
    pub(super) fn reserve(&mut self, started: Instant) -> ReplyHandle {
        self.replies.reserve_with(started, self.transform.take())
    }

    /// SCAN over a sharded or clustered route: every node in turn (each shard, and each master of a cluster),
    /// with the node's position encoded in the cursor (see `scan`).
    fn scan(&mut self, request: &Request, started: Instant) -> Result<(), String> {
        let args = request.args();
        let Some(cursor) = scan::parse_cursor(&args[1]) else {
            return Err("ERR invalid cursor".to_string());
        };
        let shards = self
            .plan
            .fan_out(false)
            .into_iter()
            .map(|shard| self.pick_read(&self.route.shards[shard]).upstream.clone())
            .collect();
        let handle = self.reserve(started);
        scan::start(shards, cursor, args[2..].to_vec(), handle, self.affinity);
        Ok(())
    }

    fn locate(&self, key: &[u8]) -> Place {
        self.route.locate(self.plan, key)
    }

    /// A multi-key command whose keys live on several shards (or cluster slots): one sub-command per shard and
    /// slot, merged back.
    fn split(
        &mut self,
        spec: &'static CommandSpec,
        request: &Request,
        write: bool,
        started: Instant,
    ) -> Result<(), String> {
        let args = request.args();
        let Some((mut merge, per_key)) = split_kind(spec.id) else {
            return Err(CROSSSLOT.to_string());
        };
        // The keys sorted by place, keeping the client's order within each place: each run of one place is one
        // sub-command. Where a shard is one cluster, places sort by the master serving the slot first, and the
        // sub-commands for one master make one part, sent as one run; every other sub-command is a part of its
        // own. For each key (in the client's order), its part and its index among the part's keys, which is
        // also where MGET finds its value in the part's replies.
        let count = self.keys.len();
        let clusters: Vec<Option<&Rc<ClusterBackend>>> = self
            .route
            .shards
            .iter()
            .map(|target| target.only_cluster(write))
            .collect();
        let mut sorted: Vec<(u64, usize)> = self
            .places
            .iter()
            .enumerate()
            .map(|(i, &(shard, slot))| {
                let cluster = clusters.get(shard).copied().flatten();
                let master = slot.zip(cluster).and_then(|(slot, c)| c.master_index(slot));
                (place_order(shard, master, slot), i)
            })
            .collect();
        sorted.sort_unstable();
        // Every sub-command is encoded into one buffer and each part split off it: one allocation for all of
        // them. The command name, the same in each, is encoded once.
        let mut name = BytesMut::new();
        resp::bulk(&mut name, &args[0]);
        let mut buf = BytesMut::with_capacity(request.raw().len() + count * (name.len() + 8) + 16);
        let mut positions = vec![(0, 0); count];
        let mut parts: Vec<Part> = Vec::new();
        // The run (shard and master) the last part gathers sub-commands for, and where its keys start in `sorted`.
        let mut last_run = None;
        let mut part_start = 0;
        let mut n = 0;
        while let Some(&(order, first)) = sorted.get(n) {
            let keys = sorted[n..].iter().take_while(|(o, _)| *o == order).count();
            let (shard, slot) = self.places[first];
            let cluster = clusters[shard].filter(|_| order & NO_MASTER != NO_MASTER);
            let run = cluster.map(|_| order >> MASTER_SHIFT);
            if run.is_none() || run != last_run {
                close_last(&mut parts, &mut buf);
                parts.push(Part {
                    shard,
                    slot,
                    raw: Bytes::new(),
                    run: cluster.map(|cluster| (Rc::clone(cluster), 0)),
                });
                (last_run, part_start) = (run, n);
            }
            let part = parts.len() - 1;
            if let Some(Part {
                run: Some((_, sub_commands)),
                ..
            }) = parts.last_mut()
            {
                *sub_commands += 1;
            }
            resp::array_header(&mut buf, 1 + keys * per_key);
            buf.extend_from_slice(&name);
            for (m, &(_, i)) in sorted[n..n + keys].iter().enumerate() {
                positions[i] = (part, n + m - part_start);
                for arg in args[self.keys[i]..].iter().take(per_key) {
                    resp::bulk(&mut buf, arg);
                }
            }
            n += keys;
        }
        close_last(&mut parts, &mut buf);
        if let Merge::Mget { positions: p } = &mut merge {
            *p = positions;
        }
        self.send_parts(spec, parts, write, merge, None, started)
    }

    /// A keyless command that concerns every shard, and every master of a cluster resource.
    pub(crate) fn fan_out(
        &mut self,
        spec: &'static CommandSpec,
        request: &Request,
        write: bool,
        mut merge: Merge,
        started: Instant,
    ) -> Result<(), String> {
        if let Merge::Random(pick) = &mut merge {
            *pick = self.next_random();
        }
        let parts = self
            .plan
            .fan_out(write)
            .into_iter()
            .map(|shard| Part {
                shard,
                slot: None,
                raw: request.raw().clone(),
                run: None,
            })
            .collect();
        let per_node = merge.per_node();
        let per_resource: Rc<dyn Fn(usize) -> Combine> =
            Rc::new(move |parts: usize| combiner(one_each(parts), per_node.clone()));
        let fan_out = FanOut {
            request,
            per_resource,
        };
        self.send_parts(spec, parts, write, merge, Some(fan_out), started)
    }

    /// Sends the parts of a command and gathers their replies into one slot. `fan_out` is set for fan-outs (see
    /// [`FanOut`]).
    fn send_parts(
        &mut self,
        spec: &'static CommandSpec,
        parts: Vec<Part>,
        write: bool,
        merge: Merge,
        fan_out: Option<FanOut<'_>>,
        started: Instant,
    ) -> Result<(), String> {
        let transform = self.transform.take();
        // SCRIPT EXISTS must hear from every copy, whatever the ack mode: each copy is then a group of its own.
        let every_copy = write && merge.needs_every_copy();
        let copies = |target: &ResolvedTarget| match (write, every_copy) {
            (false, _) => 1,
            (true, true) => target.write.len(),
            (true, false) => self.write_parts(target),
        };
        let mut groups = Vec::with_capacity(parts.len());
        let mut total = 0;
        for part in &parts {
            let target = &self.route.shards[part.shard];
            if write {
                // Split and fanned-out commands are never XADD, the one write whose arguments decide.
                self.check_double_write(spec, &[], target)?;
            }
            let count = copies(target);
            if every_copy {
                groups.extend(one_each(count).into_iter().map(|group| Group {
                    parts: group.parts.start + total..group.parts.end + total,
                    ..group
                }));
            } else {
                groups.push(Group {
                    parts: total..total + count,
                    ack: target.ack,
                });
            }
            total += count;
        }
        let combine = transformed(combiner(groups, merge), transform);
        let mut handles = self
            .replies
            .reserve_parts(started, total, 1, combine, None)
            .into_iter();
        for part in parts {
            let target = &self.route.shards[part.shard];
            let keyspace = match (&fan_out, part.slot) {
                (Some(fan_out), _) => Keyspace::Every(Rc::clone(&fan_out.per_resource)),
                (None, Some(slot)) => Keyspace::Slot(slot),
                (None, None) => Keyspace::Any,
            };
            if let (Some((cluster, count)), Some(slot)) = (&part.run, part.slot) {
                // One resource, so one copy.
                if let Some(handle) = handles.next() {
                    cluster.send_run(part.raw, slot, *count, handle, self.affinity);
                }
            } else if write {
                let taken = handles.by_ref().take(copies(target));
                let write = Write {
                    shard: part.shard,
                    raw: &part.raw,
                    whole: fan_out.as_ref().map(|fan_out| fan_out.request),
                    keyspace,
                };
                self.send_write(spec, target, write, taken);
            } else if let Some(handle) = handles.next() {
                self.pick_read(target)
                    .send(part.raw, keyspace, handle, self.affinity);
            }
        }
        Ok(())
    }

    /// How many replies a write to `target` waits for: the primary's only, or every copy's.
    fn write_parts(&self, target: &ResolvedTarget) -> usize {
        match target.ack {
            AckMode::Primary => 1,
            AckMode::All | AckMode::AllCheckError => target.write.len(),
        }
    }

    /// Writes to the primary, then to each secondary in order, each as its own database numbers ask (see
    /// `per_resource`). `handles` holds the primary's handle and, unless the ack mode is `primary`, one for each
    /// secondary; otherwise secondaries complete in the background.
    fn send_write(
        &self,
        spec: &'static CommandSpec,
        target: &ResolvedTarget,
        write: Write<'_>,
        handles: impl IntoIterator<Item = ReplyHandle>,
    ) {
        let mut handles = handles.into_iter();
        let run_as = identity::run_as(spec, self.scripts_run_as);
        for (index, endpoint) in target.write.iter().enumerate() {
            let raw = match write.whole {
                Some(request) => self.plan.request_for(spec, request, write.shard, index),
                None => write.raw.clone(),
            };
            let handle = match (handles.next(), &endpoint.detached) {
                // A copy the client waits for: its failure is recorded too (the primary applied the write).
                (Some(handle), Some(detached)) => detached.witness(handle, spec.name, &raw),
                (Some(handle), None) => handle,
                (None, Some(detached)) => match detached.admit(spec.name, &raw) {
                    Some(handle) => handle,
                    None => continue,
                },
                (None, None) => continue,
            };
            let handle = handle.running_as(run_as.clone(), self.script_limit_ms);
            endpoint.send(raw, write.keyspace.clone(), handle, self.affinity);
        }
    }

    fn check_double_write(
        &self,
        spec: &CommandSpec,
        args: &[Bytes],
        target: &ResolvedTarget,
    ) -> Result<(), String> {
        target.double_write_refusal(spec, args).map_or(Ok(()), Err)
    }

    fn pick_read<'t>(&self, target: &'t ResolvedTarget) -> &'t Endpoint {
        let read = &target.read;
        match target.read_policy {
            ReadPolicy::Primary => &read[0],
            ReadPolicy::Ordered => read.iter().find(|e| e.healthy()).unwrap_or(&read[0]),
            ReadPolicy::Random => {
                let healthy = read.iter().filter(|e| e.healthy()).count();
                let pick = self.next_random() as usize;
                if healthy == 0 {
                    &read[pick % read.len()]
                } else {
                    read.iter()
                        .filter(|e| e.healthy())
                        .nth(pick % healthy)
                        .unwrap_or(&read[0])
                }
            }
        }
    }

    /// xorshift64: cheap, and good enough to spread reads.
    fn next_random(&self) -> u64 {
        let mut x = self.random.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random.set(x);
        x
    }
}

/// Gives the last part the sub-commands encoded into `buf` since the part before it.
/// `combine`, then `transform` over the combined reply.
fn transformed(combine: Combine, transform: Option<Transform>) -> Combine {
    match transform {
        Some(transform) => Box::new(move |replies| transform(combine(replies))),
        None => combine,
    }
}

fn close_last(parts: &mut [Part], buf: &mut BytesMut) {
    if let Some(part) = parts.last_mut() {
        part.raw = buf.split().freeze();
    }
}

/// Where the master sits in a place's order; below it, 17 bits of slot (or no slot).
const MASTER_SHIFT: u32 = 17;
/// The master bits of a place whose slot has no known master in one cluster: its sub-command travels alone.
const NO_MASTER: u64 = 0xffff << MASTER_SHIFT;

/// A place as one number that sorts by shard, then by the master serving the slot (see `split`), then slot.
fn place_order(shard: usize, master: Option<u16>, slot: Option<u16>) -> u64 {
    ((shard as u64) << (MASTER_SHIFT + 16))
        | (master.map_or(0xffff, u64::from) << MASTER_SHIFT)
        | slot.map_or(1 << 16, u64::from)
}

/// SORT's BY and GET patterns name keys the command does not declare, which may live on any shard: refused on
/// a sharded route with the errors Redis Cluster gives for the same reason (a constant BY, which only means "do
/// not sort", is fine). The options are walked as Redis walks them; malformed ones are left to the backend.
fn sort_patterns(args: &[Bytes]) -> Result<(), String> {
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        match &args[j].to_ascii_lowercase()[..] {
            b"asc" | b"desc" | b"alpha" => {}
            b"limit" if left >= 2 => j += 2,
            b"store" if left >= 1 => j += 1,
            b"by" if left >= 1 => {
                if args[j + 1].contains(&b'*') {
                    return Err("ERR BY option of SORT denied in Cluster mode.".to_string());
                }
                j += 1;
            }
            b"get" if left >= 1 => {
                return Err("ERR GET option of SORT denied in Cluster mode.".to_string());
            }
            _ => return Ok(()),
        }
        j += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sort(args: &[&'static str]) -> Result<(), String> {
        let args: Vec<Bytes> = args
            .iter()
            .map(|a| Bytes::from_static(a.as_bytes()))
            .collect();
        sort_patterns(&args)
    }

    #[test]
    fn sort_patterns_are_found_where_redis_reads_options() {
        assert!(sort(&["SORT", "k"]).is_ok());
        assert!(sort(&["SORT", "k", "BY", "nosort", "LIMIT", "0", "1"]).is_ok());
        // "by" and "get" as the values of other options are not options.
        assert!(sort(&["SORT", "k", "STORE", "by", "ALPHA"]).is_ok());
        assert!(sort(&["SORT", "k", "LIMIT", "get", "by", "DESC"]).is_ok());
        assert!(sort(&["SORT", "k", "by", "w_*"]).is_err());
        assert!(sort(&["SORT", "k", "ASC", "get", "#"]).is_err());
        // Malformed: the backend says what is wrong.
        assert!(sort(&["SORT", "k", "BY"]).is_ok());
    }
}
