//! A TCP relay in front of a real Redis that holds back the commands of one name for a while, on their way to
//! Redis, or answers the next one itself with a reply a test forges: what the gateway sends and receives is
//! otherwise passed on untouched, in order. It makes a moment that loopback leaves too short to hit (a change
//! landing between two commands sent back to back) long enough for a test to put something into it, and lets a
//! test put in a reply no honest Redis would send (a redirect to a node that is not in the cluster).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::allocate_port;

/// The commands held back: their name (upper case) and for how long.
type Hold = Arc<Mutex<Option<(Vec<u8>, Duration)>>>;

/// The command the relay answers itself, once: its name (upper case) and the reply.
type Forge = Arc<Mutex<Option<(Vec<u8>, Vec<u8>)>>>;

/// A relay listening on a port of its own, to `target` on 127.0.0.1; stops accepting when dropped.
pub struct Relay {
    port: u16,
    hold: Hold,
    forge: Forge,
    stopped: Arc<AtomicBool>,
}

impl Relay {
    /// Relays to 127.0.0.1:`target`.
    pub fn start(target: u16) -> Relay {
        let port = allocate_port();
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the relay");
        let (hold, forge): (Hold, Forge) = Default::default();
        let stopped = Arc::new(AtomicBool::new(false));
        let accept = (Arc::clone(&hold), Arc::clone(&forge), Arc::clone(&stopped));
        thread::spawn(move || {
            let (hold, forge, stopped) = accept;
            for client in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                relay(client, server, (Arc::clone(&hold), Arc::clone(&forge)));
            }
        });
        Relay {
            port,
            hold,
            forge,
            stopped,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// From now on, every `command` sent through the relay reaches Redis `by` later than it was sent (and what
    /// its connection sends after it, too).
    pub fn hold(&self, command: &str, by: Duration) {
        *self.hold.lock().unwrap() = Some((command.to_ascii_uppercase().into_bytes(), by));
    }

    /// Commands pass at once again.
    pub fn release(&self) {
        *self.hold.lock().unwrap() = None;
    }

    /// The next `command` sent through the relay (on a connection with nothing else in flight) does not reach
    /// Redis: the relay answers it with `reply`.
    pub fn answer(&self, command: &str, reply: &[u8]) {
        *self.forge.lock().unwrap() =
            Some((command.to_ascii_uppercase().into_bytes(), reply.to_vec()));
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wakes the accept loop
    }
}

/// Copies `client` to `server` command by command (holding back the ones `hold` names, answering the one
/// `forge` names), and `server` to `client` as it comes.
fn relay(client: TcpStream, server: TcpStream, (hold, forge): (Hold, Forge)) {
    let (Ok(from_client), Ok(from_server), Ok(answers)) =
        (client.try_clone(), server.try_clone(), client.try_clone())
    else {
        return;
    };
    thread::spawn(move || upstream((from_client, answers), server, (&hold, &forge)));
    thread::spawn(move || {
        let (mut from_server, mut to_client) = (from_server, client);
        let _ = std::io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Write);
    });
}

/// Passes what the client sends to the server, a whole command at a time; answers a forged command itself.
fn upstream(
    (mut from_client, mut to_client): (TcpStream, TcpStream),
    mut to_server: TcpStream,
    (hold, forge): (&Hold, &Forge),
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    while let Ok(n @ 1..) = from_client.read(&mut chunk) {
        buf.extend_from_slice(&chunk[..n]);
        let mut sent = 0;
        while let Some((len, name)) = command_at(&buf[sent..]) {
            let held = hold.lock().unwrap().clone();
            if let Some((_, by)) = held.filter(|(held, _)| name.eq_ignore_ascii_case(held)) {
                thread::sleep(by);
            }
            let forged = {
                let mut forge = forge.lock().unwrap();
                match forge.as_ref() {
                    Some((forged, _)) if name.eq_ignore_ascii_case(forged) => forge.take(),
                    _ => None,
                }
            };
            let written = match forged {
                Some((_, reply)) => to_client.write_all(&reply),
                None => to_server.write_all(&buf[sent..sent + len]),
            };
            if written.is_err() {
                return;
            }
            sent += len;
        }
        buf.drain(..sent);
    }
    let _ = to_server.shutdown(Shutdown::Write);
}

/// The length and the name of the command (a RESP array of bulk strings) at the front of `buf`, once it is all
/// there.
fn command_at(buf: &[u8]) -> Option<(usize, Vec<u8>)> {
    let (count, mut at) = line(buf, b'*')?;
    let mut name = Vec::new();
    for i in 0..count {
        let (len, start) = line(&buf[at..], b'$')?;
        let end = at + start + len + 2;
        if buf.len() < end {
            return None;
        }
        if i == 0 {
            name = buf[at + start..at + start + len].to_vec();
        }
        at = end;
    }
    Some((at, name))
}

/// The number on the line `<prefix><number>\r\n` at the front of `buf`, and the line's length.
fn line(buf: &[u8], prefix: u8) -> Option<(usize, usize)> {
    if buf.first() != Some(&prefix) {
        return None;
    }
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let number = std::str::from_utf8(&buf[1..end]).ok()?.parse().ok()?;
    Some((number, end + 2))
}
