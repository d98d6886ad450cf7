//! MONITOR: each tenant's stream of its own commands, to its clients in monitor mode, on any worker.
//!
//! A tenant's [`Monitors`] live in its runtime state (`tenant`, kept across snapshots). Sessions test [`Monitors::active`] (one
//! relaxed load) per command; only while someone monitors do they format a line ([`line`]) and hand it to every
//! monitor of the tenant ([`Monitors::feed`]). Each monitor has a [`Sink`] its session empties into its output
//! when woken; a sink that fills past its bound (its session's worker does not keep up) is dropped, and its
//! session closed, as Redis closes a monitor past its output buffer limit. The feeding session never waits.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::Notify;

use crate::cmd::{Command, CommandSpec, flag};

/// One tenant's monitors.
#[derive(Default)]
pub(crate) struct Monitors(Arc<Registry>);

#[derive(Default)]
struct Registry {
    /// How many there are: what every command tests.
    count: AtomicUsize,
    sinks: Mutex<Vec<Arc<Sink>>>,
}

/// Where one monitor's lines wait for its session.
pub(crate) struct Sink {
    lines: Mutex<Lines>,
    wake: Notify,
    /// Bytes that may wait here.
    bound: usize,
}

#[derive(Default)]
struct Lines {
    bytes: BytesMut,
    overflowed: bool,
}

/// A client in monitor mode: its place among its tenant's monitors, left when dropped.
pub(crate) struct Monitor {
    registry: Arc<Registry>,
    sink: Arc<Sink>,
}

/// The lines a monitor's sink filled past its bound.
#[derive(Debug)]
pub(crate) struct Overflowed;

impl Monitors {
    /// Whether anyone monitors the tenant.
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.0.count.load(Ordering::Relaxed) > 0
    }

    /// Hands `line` to every monitor: never waits for one.
    pub(crate) fn feed(&self, line: &[u8]) {
        for sink in self.0.sinks().iter() {
            let mut lines = sink.lines();
            if lines.overflowed {
                continue;
            }
            if lines.bytes.len() + line.len() > sink.bound {
                lines.overflowed = true;
                lines.bytes = BytesMut::new();
            } else {
                lines.bytes.extend_from_slice(line);
            }
            drop(lines);
            sink.wake.notify_one();
        }
    }
}

impl Registry {
    fn sinks(&self) -> MutexGuard<'_, Vec<Arc<Sink>>> {
        self.sinks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Sink {
    fn lines(&self) -> MutexGuard<'_, Lines> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Monitor {
    /// Joins a tenant's `monitors`; at most `bound` bytes of lines wait for the session to take them.
    pub(crate) fn start(monitors: &Monitors, bound: usize) -> Monitor {
        let sink = Arc::new(Sink {
            lines: Mutex::default(),
            wake: Notify::new(),
            bound,
        });
        let registry = Arc::clone(&monitors.0);
        registry.sinks().push(Arc::clone(&sink));
        registry.count.fetch_add(1, Ordering::Relaxed);
        Monitor { registry, sink }
    }

    /// Waits until lines are there (or the sink overflowed).
    pub(crate) async fn ready(&self) {
        self.sink.wake.notified().await;
    }

    /// Moves the lines waiting into `out`.
    pub(crate) fn take(&self, out: &mut BytesMut) -> Result<(), Overflowed> {
        let mut lines = self.sink.lines();
        if lines.overflowed {
            return Err(Overflowed);
        }
        out.extend_from_slice(&lines.bytes);
        lines.bytes.clear();
        Ok(())
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.registry
            .sinks()
            .retain(|sink| !Arc::ptr_eq(sink, &self.sink));
        self.registry.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether MONITOR shows `spec`: as Redis, not the admin commands (MONITOR, CLIENT LIST, CONFIG ...) nor those
/// it skips.
pub(crate) fn shows(spec: &CommandSpec) -> bool {
    spec.flags & (flag::ADMIN | flag::SKIP_MONITOR) == 0
}

/// The line MONITOR shows for a command, as Redis 7.0 writes it: `+<seconds>.<micros> [<db> <addr>] "arg" ...`,
/// each argument escaped as Redis' `sdscatrepr`, passwords (`AUTH`, `HELLO ... AUTH`, `MIGRATE ... AUTH`)
/// replaced by `(redacted)`.
pub(crate) fn line(spec: &CommandSpec, args: &[Bytes], db: u32, addr: SocketAddr) -> Bytes {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut out = BytesMut::with_capacity(64 + args.iter().map(Bytes::len).sum::<usize>());
    let header = format!(
        "+{}.{:06} [{db} {addr}]",
        now.as_secs(),
        now.subsec_micros()
    );
    out.put_slice(header.as_bytes());
    let redacted = redacted(spec, args);
    for (index, arg) in args.iter().enumerate() {
        out.put_slice(b" ");
        if redacted.contains(&index) {
            out.put_slice(b"\"(redacted)\"");
        } else {
            quote(&mut out, arg);
        }
    }
    out.put_slice(b"\r\n");
    out.freeze()
}

/// The arguments Redis 7.0 redacts (`redactClientCommandArgument`): the passwords and user names of `AUTH`,
/// `HELLO ... AUTH user password` and `MIGRATE ... AUTH password | AUTH2 user password`.
fn redacted(spec: &CommandSpec, args: &[Bytes]) -> Vec<usize> {
    let named = |index: usize, name: &[u8]| {
        args.get(index)
            .is_some_and(|a| a.eq_ignore_ascii_case(name))
    };
    match spec.id {
        Command::Auth => (1..args.len()).collect(),
        Command::Hello => (2..args.len())
            .find(|&index| named(index, b"auth"))
            .map_or_else(Vec::new, |index| vec![index + 1, index + 2]),
        Command::Migrate => {
            let mut redacted = Vec::new();
            let mut index = 6;
            while index < args.len() {
                if named(index, b"auth") {
                    redacted.push(index + 1);
                    index += 1;
                } else if named(index, b"auth2") {
                    redacted.extend([index + 1, index + 2]);
                    index += 2;
                } else if named(index, b"keys") {
                    break;
                }
                index += 1;
            }
            redacted
        }
        _ => Vec::new(),
    }
}

/// `arg` in double quotes, escaped as Redis' `sdscatrepr`.
fn quote(out: &mut BytesMut, arg: &[u8]) {
    out.put_u8(b'"');
    for &b in arg {
        match b {
            b'\\' | b'"' => out.put_slice(&[b'\\', b]),
            b'\n' => out.put_slice(b"\\n"),
            b'\r' => out.put_slice(b"\\r"),
            b'\t' => out.put_slice(b"\\t"),
            0x07 => out.put_slice(b"\\a"),
            0x08 => out.put_slice(b"\\b"),
            b' '..=b'~' => out.put_u8(b),
            _ => out.put_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.put_u8(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::{lookup, words};

    fn shown(args: &[&[u8]]) -> String {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        let spec = lookup(&args).unwrap();
        let text = line(spec, &args, 3, "127.0.0.1:5000".parse().unwrap());
        let text = String::from_utf8(text.to_vec()).unwrap();
        // The timestamp: seconds, a dot, six digits.
        let (stamp, rest) = text.split_once(' ').unwrap();
        let (seconds, micros) = stamp.trim_start_matches('+').split_once('.').unwrap();
        assert!(
            seconds.parse::<u64>().is_ok() && micros.len() == 6,
            "{stamp}"
        );
        rest.to_string()
    }

    #[test]
    fn lines_escape_and_redact_as_redis_7_0() {
        assert_eq!(
            shown(&[b"SET", b"a b", b"q\"x\n\x01\xff\\\t\r\x07\x08"]),
            "[3 127.0.0.1:5000] \"SET\" \"a b\" \"q\\\"x\\n\\x01\\xff\\\\\\t\\r\\a\\b\"\r\n"
        );
        assert_eq!(
            shown(&[b"AUTH", b"user", b"pw"]),
            "[3 127.0.0.1:5000] \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"
        );
        assert_eq!(
            shown(&[b"hello", b"3", b"auth", b"u", b"p", b"setname", b"n"]),
            "[3 127.0.0.1:5000] \"hello\" \"3\" \"auth\" \"(redacted)\" \"(redacted)\" \"setname\" \"n\"\r\n"
        );
        assert_eq!(
            shown(&[
                b"MIGRATE", b"h", b"1", b"", b"0", b"5", b"AUTH2", b"u", b"p", b"KEYS", b"auth"
            ]),
            "[3 127.0.0.1:5000] \"MIGRATE\" \"h\" \"1\" \"\" \"0\" \"5\" \"AUTH2\" \"(redacted)\" \"(redacted)\" \"KEYS\" \"auth\"\r\n"
        );
    }

    #[test]
    fn admin_commands_are_not_shown() {
        for (command, visible) in [
            (&["GET", "k"][..], true),
            (&["CLIENT", "ID"], true),
            (&["EXEC"], true),
            (&["CLIENT", "LIST"], false),
            (&["CONFIG", "GET", "x"], false),
            (&["MONITOR"], false),
        ] {
            assert_eq!(
                shows(lookup(&words(command)).unwrap()),
                visible,
                "{command:?}"
            );
        }
    }

    #[test]
    fn a_sink_past_its_bound_overflows_and_the_others_go_on() {
        let monitors = Monitors::default();
        let small = Monitor::start(&monitors, 10);
        let large = Monitor::start(&monitors, 100);
        assert!(monitors.active());
        monitors.feed(b"0123456789");
        monitors.feed(b"x");
        let mut out = BytesMut::new();
        assert!(small.take(&mut out).is_err());
        large.take(&mut out).unwrap();
        assert_eq!(&out[..], b"0123456789x");
        drop((small, large));
        assert!(!monitors.active());
    }
}
