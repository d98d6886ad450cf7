//! A port registry so that parallel tests (and parallel test binaries) never collide.
//!
//! Checking that a port is free is not enough across processes: two test binaries may both find a port free and
//! start a server on it, and the loser's readiness check then sees the winner's server. So each port handed out
//! is also claimed with an exclusive lock on a file named after it (and after port + 10000, a Redis Cluster bus
//! port), held until this process exits; the operating system drops the locks of a process that dies.

use std::fs::File;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, Ordering};

/// Ports handed out by this process: each is free now, and so is port + 10000 (a Redis Cluster bus port).
pub fn allocate_port() -> u16 {
    // Start each test process at a different place in the range, so concurrent test binaries rarely try the same
    // port; the locks and the bind check below settle the rest.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let span = 20_000u16;
    let seed = (std::process::id() % u32::from(span)) as u16;
    let _ = NEXT.compare_exchange(0, seed.max(1), Ordering::SeqCst, Ordering::SeqCst);
    loop {
        let offset = NEXT.fetch_add(7, Ordering::SeqCst) % span;
        let port = 10_000 + offset;
        if claim(port) && is_free(port) && is_free(port + 10_000) {
            return port;
        }
    }
}

/// Locks the files of `port` and `port + 10000` for this process; false if another process holds either.
fn claim(port: u16) -> bool {
    static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("switchyard-test-ports");
    if std::fs::create_dir_all(&dir).is_err() {
        return true; // no place for locks: the bind check alone decides, as before
    }
    let lock = |port: u16| -> Option<File> {
        let path: PathBuf = dir.join(port.to_string());
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .ok()?;
        file.try_lock().ok()?;
        Some(file)
    };
    let (Some(first), Some(bus)) = (lock(port), lock(port + 10_000)) else {
        return false;
    };
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    held.push(first);
    held.push(bus);
    true
}

fn is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}
