//! A tenant's slow log: the last commands whose gateway-side latency reached the threshold, newest first, with
//! what Redis' `SLOWLOG GET` shows of each, and `SLOWLOG`'s replies.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};

use super::lock;
use crate::resp;

/// Arguments an entry keeps (Redis' SLOWLOG_ENTRY_MAX_ARGC): the last one kept says how many more there were.
const MAX_ARGS: usize = 32;
/// Bytes an argument keeps (Redis' SLOWLOG_ENTRY_MAX_STRING): the rest is said as a count.
const MAX_ARG_BYTES: usize = 128;

/// How many entries `SLOWLOG GET` without a count returns.
const DEFAULT_GET: usize = 10;

/// One slow command.
#[derive(Debug)]
pub(crate) struct SlowEntry {
    /// Unique in its tenant's log on this gateway, growing.
    pub id: u64,
    /// Unix time, in seconds, at which the command was answered.
    pub timestamp: i64,
    pub duration_us: u64,
    /// Its arguments, cut as Redis cuts them (`slowlog_args`).
    pub args: Vec<Bytes>,
    /// Its first key, as the tenant sent it.
    pub key: Option<Bytes>,
    pub client_addr: String,
    pub client_name: String,
    /// The resource its key maps to (see `RoutePlan::resource_of`; empty when that cannot be told).
    pub backend: String,
    /// How many requests of a pipelined run the latency covers (1: the command alone).
    pub run: u32,
}

/// A tenant's slow log. Empty, it holds no memory: a tenant never slow costs nothing.
#[derive(Default)]
pub(crate) struct SlowLog(Mutex<Ring>);

#[derive(Default)]
struct Ring {
    next_id: u64,
    entries: VecDeque<Arc<SlowEntry>>,
}

impl SlowLog {
    /// Logs `entry` (its id is given here), dropping the oldest beyond `max_len`; returns it as logged.
    pub(crate) fn push(&self, mut entry: SlowEntry, max_len: usize) -> Arc<SlowEntry> {
        let mut ring = lock(&self.0);
        entry.id = ring.next_id;
        ring.next_id += 1;
        let entry = Arc::new(entry);
        ring.entries.push_front(Arc::clone(&entry));
        ring.entries.truncate(max_len);
        entry
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.0).entries.len()
    }

    /// The newest `count` entries, newest first.
    pub(crate) fn newest(&self, count: usize) -> Vec<Arc<SlowEntry>> {
        lock(&self.0).entries.iter().take(count).cloned().collect()
    }

    /// `SLOWLOG RESET`: ids go on growing, as Redis' do.
    pub(crate) fn reset(&self) {
        let mut ring = lock(&self.0);
        ring.entries = VecDeque::new();
    }

    /// Answers `SLOWLOG GET|LEN|RESET|HELP` (`args` passed the command table's arity check) into `out`.
    pub(crate) fn answer(&self, args: &[Bytes], out: &mut BytesMut) {
        let sub = args
            .get(1)
            .map(|s| s.to_ascii_lowercase())
            .unwrap_or_default();
        match &sub[..] {
            b"get" => {
                let count = match args.get(2) {
                    None => DEFAULT_GET,
                    Some(count) => match resp::parse_int(count) {
                        Some(-1) => usize::MAX,
                        Some(n @ 0..) => n as usize,
                        _ => {
                            return resp::error(
                                out,
                                "ERR count should be greater than or equal to -1",
                            );
                        }
                    },
                };
                let entries = self.newest(count);
                resp::array_header(out, entries.len());
                for entry in entries {
                    write_entry(out, &entry);
                }
            }
            b"len" => resp::integer(out, self.len() as i64),
            b"reset" => {
                self.reset();
                resp::simple(out, b"OK");
            }
            _ => help(out),
        }
    }
}

/// One entry as `SLOWLOG GET` writes it (the same in RESP2 and RESP3): id, timestamp, duration in
/// microseconds, arguments, client address, client name.
fn write_entry(out: &mut BytesMut, entry: &SlowEntry) {
    resp::array_header(out, 6);
    resp::integer(out, entry.id as i64);
    resp::integer(out, entry.timestamp);
    resp::integer(out, entry.duration_us as i64);
    resp::array_header(out, entry.args.len());
    for arg in &entry.args {
        resp::bulk(out, arg);
    }
    resp::bulk(out, entry.client_addr.as_bytes());
    resp::bulk(out, entry.client_name.as_bytes());
}

fn help(out: &mut BytesMut) {
    const LINES: &[&str] = &[
        "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET [<count>]",
        "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
        "    Entries are made of:",
        "    id, timestamp, time in microseconds, arguments array, client IP and port,",
        "    client name",
        "LEN",
        "    Return the length of the slowlog.",
        "RESET",
        "    Reset the slowlog.",
        "HELP",
        "    Prints this help.",
    ];
    resp::array_header(out, LINES.len());
    for line in LINES {
        resp::simple(out, line.as_bytes());
    }
}

/// A command's arguments as a slow log keeps them (Redis' slowlogCreateEntry): at most 32, the 32nd saying
/// how many more there were, each cut at 128 bytes with how many more it had.
pub(crate) fn slowlog_args(args: Vec<Bytes>) -> Vec<Bytes> {
    let total = args.len();
    let kept = total.min(MAX_ARGS);
    let mut out = Vec::with_capacity(kept);
    for (i, arg) in args.into_iter().take(kept).enumerate() {
        if kept != total && i == kept - 1 {
            let more = total - kept + 1;
            out.push(Bytes::from(format!("... ({more} more arguments)")));
        } else if arg.len() > MAX_ARG_BYTES {
            let mut cut = BytesMut::from(&arg[..MAX_ARG_BYTES]);
            let more = arg.len() - MAX_ARG_BYTES;
            cut.extend_from_slice(format!("... ({more} more bytes)").as_bytes());
            out.push(cut.freeze());
        } else {
            out.push(Bytes::copy_from_slice(&arg)); // not a slice that keeps the whole request alive
        }
    }
    out
}

/// An entry's arguments as shown where argument values must not be (the admin port's `/tracking`, which takes no
/// token): the command's name (and its subcommand's), its keys, and every other argument as `(redacted)`, the
/// word Redis' own slow log shows in place of a password. Values are tenant data; names of keys are what an
/// operator looks for in a slow log. An entry whose keys the command table cannot find keeps only its name.
pub(crate) fn without_values(args: &[Bytes]) -> Vec<Bytes> {
    let (spec, keys) = super::command_keys(args);
    let names = match spec {
        Some(spec) if spec.name.contains('|') => 2,
        _ => 1,
    };
    args.iter()
        .enumerate()
        .map(|(i, arg)| {
            if i < names || keys.contains(&i) {
                arg.clone()
            } else {
                Bytes::from_static(REDACTED)
            }
        })
        .collect()
}

/// What `without_values` shows in place of a value.
const REDACTED: &[u8] = b"(redacted)";

#[cfg(test)]
mod tests {
    use super::*;

    fn args(n: usize) -> Vec<Bytes> {
        (0..n).map(|i| Bytes::from(i.to_string())).collect()
    }

    #[test]
    fn arguments_are_cut_as_redis_cuts_them() {
        assert_eq!(slowlog_args(args(32)), args(32));
        let cut = slowlog_args(args(40));
        assert_eq!(cut.len(), 32);
        assert_eq!(cut[30], Bytes::from("30"));
        assert_eq!(cut[31], Bytes::from("... (9 more arguments)"));
        let long = slowlog_args(vec![Bytes::from(vec![b'x'; 200])]);
        assert_eq!(long[0].len(), 128 + "... (72 more bytes)".len());
        assert!(long[0].ends_with(b"... (72 more bytes)"));
    }

    #[test]
    fn values_are_left_out_and_names_kept() {
        let words = |words: &[&str]| -> Vec<Bytes> {
            words.iter().map(|w| Bytes::from(w.to_string())).collect()
        };
        let shown = |args: &[&str]| without_values(&words(args));
        assert_eq!(
            shown(&["SET", "user:1", "secret", "EX", "10"]),
            words(&["SET", "user:1", "(redacted)", "(redacted)", "(redacted)"])
        );
        assert_eq!(
            shown(&["mset", "a", "1", "b", "2"]),
            words(&["mset", "a", "(redacted)", "b", "(redacted)"])
        );
        assert_eq!(
            shown(&["EVAL", "return 1", "1", "k", "v"]),
            words(&["EVAL", "(redacted)", "(redacted)", "k", "(redacted)"])
        );
        assert_eq!(
            shown(&["CONFIG", "SET", "requirepass", "x"]),
            words(&["CONFIG", "SET", "(redacted)", "(redacted)"])
        );
        // Not a command the table knows (or one cut short): only its name.
        assert_eq!(
            shown(&["NOSUCH", "a", "b"]),
            words(&["NOSUCH", "(redacted)", "(redacted)"])
        );
        assert_eq!(shown(&["SET", "k"]), words(&["SET", "(redacted)"]));
    }

    #[test]
    fn the_log_keeps_the_newest_and_resets_like_redis() {
        let log = SlowLog::default();
        for _ in 0..5 {
            log.push(
                SlowEntry {
                    id: 0,
                    timestamp: 1,
                    duration_us: 2,
                    args: args(1),
                    key: None,
                    client_addr: "127.0.0.1:1".into(),
                    client_name: String::new(),
                    backend: "127.0.0.1:6379/0".into(),
                    run: 1,
                },
                3,
            );
        }
        let ids: Vec<_> = log.newest(10).iter().map(|e| e.id).collect();
        assert_eq!(ids, [4, 3, 2]);
        let mut out = BytesMut::new();
        log.answer(&[Bytes::from("slowlog"), Bytes::from("len")], &mut out);
        assert_eq!(&out[..], b":3\r\n");
        out.clear();
        log.answer(&[Bytes::from("SLOWLOG"), Bytes::from("RESET")], &mut out);
        assert_eq!(&out[..], b"+OK\r\n");
        assert_eq!(log.len(), 0);
        out.clear();
        log.answer(
            &[
                Bytes::from("slowlog"),
                Bytes::from("get"),
                Bytes::from("-2"),
            ],
            &mut out,
        );
        assert_eq!(
            &out[..],
            b"-ERR count should be greater than or equal to -1\r\n"
        );
    }
}
