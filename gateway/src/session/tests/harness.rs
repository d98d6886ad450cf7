//! What the session tests run on: a gateway with no Redis behind it (its tenants in `ROUTES`), on a worker of
//! the test's own runtime, and a raw client socket to it.

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

pub(super) use crate::state::test_config as config;
use crate::state::{Config, Gateway};
use crate::worker::Worker;

/// `shop` owns databases 4 to 6 of its Redis (its 0 to 2); `dev` owns database 0 only; `ops`, an admin on
/// database 0, may select all 16; `capped` takes one connection at a time; `metered` runs one command a second
/// and may not `FLUSHALL`.
pub(super) const ROUTES: &str = r#"{"tenants": [
  {"name": "shop", "passwords": ["shop-secret"],
   "route": {"type": "single", "target": "redis://127.0.0.1:1/4", "databases": 3}},
  {"name": "dev", "passwords": ["dev-secret"], "route": {"type": "single", "target": "redis://127.0.0.1:1"}},
  {"name": "ops", "passwords": ["ops-secret"], "allow_admin": true,
   "route": {"type": "single", "target": "redis://127.0.0.1:1"}},
  {"name": "capped", "passwords": ["capped-secret"], "limits": {"max_connections": 1},
   "route": {"type": "single", "target": "redis://127.0.0.1:1"}},
  {"name": "metered", "passwords": ["metered-secret"], "limits": {"max_ops_per_sec": 1},
   "commands": {"deny": ["flushall"]}, "route": {"type": "single", "target": "redis://127.0.0.1:1"}}
]}"#;

/// How long a reply may take before the test fails: nothing here waits for a backend that answers.
pub(super) const PATIENCE: Duration = Duration::from_secs(5);

/// Runs a test on a worker's kind of thread: a current-thread runtime, tasks spawned locally.
pub(super) fn run(test: impl Future<Output = ()>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&runtime, test);
}

/// A gateway with `ROUTES` and one worker, on the test's thread; each client gets a session of its own.
pub(super) struct TestGateway {
    worker: Rc<Worker>,
    listener: std::net::TcpListener,
    _shutdown: watch::Sender<bool>,
}

impl TestGateway {
    pub(super) fn start(config: Config) -> TestGateway {
        static FILES: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "switchyard-session-{}-{}.json",
            std::process::id(),
            FILES.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, ROUTES).unwrap();
        let gateway = Gateway::new(config, None);
        let loaded = gateway.load_routes(&path);
        std::fs::remove_file(&path).unwrap();
        loaded.unwrap();
        let (shutdown, receiver) = watch::channel(false);
        TestGateway {
            worker: Rc::new(Worker::new(Arc::new(gateway), receiver)),
            listener: std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            _shutdown: shutdown,
        }
    }

    /// A new client connection (the loopback handshake completes before `accept`, which cannot block).
    pub(super) fn connect(&self) -> Client {
        let client = std::net::TcpStream::connect(self.listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = self.listener.accept().unwrap();
        tokio::task::spawn_local(crate::session::serve(
            Rc::clone(&self.worker),
            accepted,
            false,
        ));
        client.set_nonblocking(true).unwrap();
        Client(TcpStream::from_std(client).unwrap())
    }

    /// A client authenticated with `password`.
    pub(super) async fn client(&self, password: &str) -> Client {
        let mut client = self.connect();
        let auth = format!("AUTH {password}\r\n");
        client.roundtrip(auth.as_bytes(), b"+OK\r\n").await;
        client
    }
}

pub(super) struct Client(TcpStream);

impl Client {
    pub(super) async fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).await.unwrap();
    }

    /// Reads exactly as many bytes as `expected` holds (no more, so the next check starts at the next reply) and
    /// compares them; a reply that does not come in time fails with what came.
    pub(super) async fn expect(&mut self, expected: &[u8]) {
        let mut got = Vec::with_capacity(expected.len());
        let read = tokio::time::timeout(PATIENCE, async {
            let mut chunk = vec![0; expected.len()];
            while got.len() < expected.len() {
                match self.0.read(&mut chunk[..expected.len() - got.len()]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        // Where they part, with some context: a deep pipeline's replies are too long to print whole.
        let from = expected
            .iter()
            .zip(&got)
            .take_while(|(a, b)| a == b)
            .count();
        let from = from.saturating_sub(40);
        let part = |b: &[u8]| {
            String::from_utf8_lossy(&b[from.min(b.len())..b.len().min(from + 160)]).into_owned()
        };
        assert!(
            read.is_ok() && got == expected,
            "got {} bytes of {}{}; from byte {from}: expected {:?}, got {:?}",
            got.len(),
            expected.len(),
            if read.is_err() { " (timed out)" } else { "" },
            part(expected),
            part(&got),
        );
    }

    pub(super) async fn roundtrip(&mut self, request: &[u8], expected: &[u8]) {
        self.send(request).await;
        self.expect(expected).await;
    }

    /// Checks that the gateway closes the connection without sending anything more.
    pub(super) async fn expect_closed(&mut self) {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(PATIENCE, self.0.read_to_end(&mut rest)).await;
        let closed = match read {
            Ok(Ok(_)) => true,
            // Closed with input it had not read yet: the kernel resets the connection.
            Ok(Err(ref e)) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Err(_) => false,
        };
        assert!(
            closed && rest.is_empty(),
            "expected the connection closed, got {:?} then {read:?}",
            String::from_utf8_lossy(&rest)
        );
    }
}
