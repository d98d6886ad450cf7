//! `redis-server` processes for the tests: each on its own port, without persistence, with a TLS port beside the
//! plain one when asked; started and polled until they answer, killed on drop.

use std::path::Path;
use std::process::Command;

use crate::process::{Process, ScratchDir, wait_until_answering};
use crate::{CertFiles, Pki, allocate_port};

/// A `redis-server` on its own port, without persistence.
pub struct RedisServer {
    port: u16,
    tls_port: Option<u16>,
    process: Process,
    dir: ScratchDir,
    /// What it was started with, to start it again (see [`RedisServer::restart`]).
    args: Vec<String>,
}

#[derive(Default)]
pub struct RedisServerBuilder {
    password: Option<String>,
    args: Vec<String>,
    tls: Option<TlsListener>,
}

/// A TLS port beside the plain one (which the harness keeps for its own checks).
struct TlsListener {
    port: u16,
    args: Vec<String>,
}

/// `redis-server`'s TLS settings for a certificate `files`, trusting the CA in `ca` (a PEM file) for client
/// certificates (required only when `auth_clients`) and for the nodes it connects to.
pub(crate) fn redis_tls_args(ca: &Path, files: &CertFiles, auth_clients: bool) -> Vec<String> {
    let path = |p: &Path| p.to_string_lossy().into_owned();
    vec![
        "--tls-cert-file".into(),
        path(&files.cert),
        "--tls-key-file".into(),
        path(&files.key),
        "--tls-ca-cert-file".into(),
        path(ca),
        "--tls-auth-clients".into(),
        if auth_clients { "yes" } else { "no" }.into(),
    ]
}

impl RedisServerBuilder {
    /// `requirepass`.
    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.to_string());
        self
    }

    /// Extra `--name value` arguments.
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }

    /// A TLS port too, with a certificate from `pki` for `127.0.0.1` and `localhost`; client certificates
    /// signed by `pki` are required when `auth_clients`.
    pub fn tls(self, pki: &Pki, auth_clients: bool) -> Self {
        let files = pki.server(
            &format!("redis-{}", allocate_port()),
            &["localhost", "127.0.0.1"],
        );
        self.tls_with(pki, &files, auth_clients)
    }

    /// A TLS port with the certificate `files` (signed by `pki`, or not).
    pub fn tls_with(mut self, pki: &Pki, files: &CertFiles, auth_clients: bool) -> Self {
        let port = allocate_port();
        let mut args = redis_tls_args(&pki.ca_file(), files, auth_clients);
        args.extend(["--tls-port".to_string(), port.to_string()]);
        self.tls = Some(TlsListener { port, args });
        self
    }

    pub fn start(self) -> RedisServer {
        self.start_on(allocate_port())
    }

    /// Starts on a given port (to bring a killed server back where its clients expect it).
    pub fn start_on(self, port: u16) -> RedisServer {
        let dir = ScratchDir::new("redis", port);
        let log = dir.0.join("redis.log");
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
            "--dir",
            &dir.0.to_string_lossy(),
        ]
        .map(str::to_string)
        .to_vec();
        if let Some(password) = &self.password {
            args.extend(["--requirepass".to_string(), password.clone()]);
        }
        args.extend(self.args);
        if let Some(tls) = &self.tls {
            args.extend(tls.args.iter().cloned());
        }
        let mut process = Process::spawn(Command::new("redis-server").args(&args), &log);
        wait_until_answering(port, &mut process, &log);
        RedisServer {
            port,
            tls_port: self.tls.map(|tls| tls.port),
            process,
            dir,
            args,
        }
    }
}

impl RedisServer {
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    pub fn start() -> RedisServer {
        Self::builder().start()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The TLS port (see [`RedisServerBuilder::tls`]).
    pub fn tls_port(&self) -> u16 {
        self.tls_port.expect("started with a TLS port")
    }

    /// A synchronous client straight to this server (bypassing the gateway), to check where data landed.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connect to redis-server")
    }

    /// Stops the process (SIGSTOP): it keeps its port open but answers nothing, like a hung backend.
    pub fn freeze(&self) {
        self.process.signal("STOP");
    }

    pub fn thaw(&self) {
        self.process.signal("CONT");
    }

    /// Kills the process (SIGKILL) and keeps its directory: what it persisted (with `--appendonly yes`) is
    /// there for [`RedisServer::restart`].
    pub fn kill(&self) {
        self.process.signal("KILL");
    }

    /// Starts it again (after [`RedisServer::kill`]) on its port, in its directory and with its settings: it
    /// loads what it persisted, if anything.
    pub fn restart(&mut self) {
        let log = self.dir.0.join("redis-restarted.log");
        // The old process is reaped when replaced.
        self.process = Process::spawn(Command::new("redis-server").args(&self.args), &log);
        wait_until_answering(self.port, &mut self.process, &log);
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn dir(&self) -> &Path {
        &self.dir.0
    }
}
