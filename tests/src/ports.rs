//! A port registry so that parallel tests (and parallel test binaries) never collide.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

/// Ports handed out by this process: each is free now, and so is port + 10000 (a Redis Cluster bus port).
pub fn allocate_port() -> u16 {
    // Start each test process at a different place in the range, so concurrent test binaries rarely try the same
    // port; the bind check below settles the rest.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let span = 20_000u16;
    let seed = (std::process::id() % u32::from(span)) as u16;
    let _ = NEXT.compare_exchange(0, seed.max(1), Ordering::SeqCst, Ordering::SeqCst);
    loop {
        let offset = NEXT.fetch_add(7, Ordering::SeqCst) % span;
        let port = 10_000 + offset;
        if is_free(port) && is_free(port + 10_000) {
            return port;
        }
    }
}

fn is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}
