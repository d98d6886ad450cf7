//! How long a case held the shared Redis: a thread of its own sends `PING`s to the backend, one at a time, and
//! keeps the longest wait between two `PONG`s since the case began. A runaway script holds Redis until the
//! gateway kills it at its tenant's limit (meanwhile Redis answers nothing, then `BUSY`, but no `PONG`); a case
//! that holds it much longer keeps every other tenant waiting, however it does it.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::platform::{BACKEND_PASSWORD, SCRIPT_TIMEOUT_MS};

/// A case that keeps Redis from answering `PING` for longer than this holds it past what the gateway allows:
/// three times a tenant's script limit, so that a kill that lands late on a loaded machine still passes, and a
/// script left to run to the 2 s command timeout does not.
pub(crate) const HELD_BOUND: Duration = Duration::from_millis(3 * SCRIPT_TIMEOUT_MS);
/// Between two `PING`s.
const CADENCE: Duration = Duration::from_millis(5);

/// Since when no `PONG` has come (the last one, or the start of the case), and the longest such wait that ended.
struct Gaps {
    since: Instant,
    longest: Duration,
}

pub(crate) struct Watch {
    gaps: Arc<Mutex<Gaps>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    /// Starts watching the backend on `port` (through its restarts: it connects again).
    pub(crate) fn start(port: u16) -> Watch {
        let gaps = Arc::new(Mutex::new(Gaps {
            since: Instant::now(),
            longest: Duration::ZERO,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (gaps, stop) = (Arc::clone(&gaps), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // An error is the backend going away (a restart between cases): connect again.
                    let _ = ping(port, &gaps, &stop);
                    std::thread::sleep(CADENCE);
                }
            })
        };
        Watch {
            gaps,
            stop,
            thread: Some(thread),
        }
    }

    /// A case begins: the longest wait is counted from now.
    pub(crate) fn reset(&self) {
        let mut gaps = self.gaps.lock().unwrap_or_else(PoisonError::into_inner);
        gaps.since = Instant::now();
        gaps.longest = Duration::ZERO;
    }

    /// The longest wait for a `PONG` since [`Watch::reset`], the one still going on included.
    pub(crate) fn longest(&self) -> Duration {
        let gaps = self.gaps.lock().unwrap_or_else(PoisonError::into_inner);
        gaps.longest.max(gaps.since.elapsed())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `PING`s the backend until `stop`, recording each `PONG` in `gaps`.
fn ping(port: u16, gaps: &Mutex<Gaps>, stop: &AtomicBool) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_millis(100)))?;
    stream.write_all(format!("AUTH {BACKEND_PASSWORD}\r\n").as_bytes())?;
    if reply(&mut stream, stop)? != b"+OK" {
        return Err(std::io::Error::other("AUTH refused"));
    }
    while !stop.load(Ordering::Relaxed) {
        stream.write_all(b"PING\r\n")?;
        if reply(&mut stream, stop)? == b"+PONG" {
            let mut gaps = gaps.lock().unwrap_or_else(PoisonError::into_inner);
            gaps.longest = gaps.longest.max(gaps.since.elapsed());
            gaps.since = Instant::now();
        }
        std::thread::sleep(CADENCE);
    }
    Ok(())
}

/// The reply to the one request in flight (a simple string or an error), without its CRLF, however long it
/// takes (until `stop`).
fn reply(stream: &mut TcpStream, stop: &AtomicBool) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let mut chunk = [0u8; 256];
    while !line.ends_with(b"\r\n") {
        match stream.read(&mut chunk) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => line.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if stop.load(Ordering::Relaxed) {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    line.truncate(line.len() - 2);
    Ok(line)
}
