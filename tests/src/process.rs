//! Guards for spawned server processes: started on allocated ports, polled until they answer, killed on drop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{CertFiles, Pki, allocate_port};

const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// A private scratch directory, removed on drop.
pub(crate) struct ScratchDir(pub(crate) PathBuf);

impl ScratchDir {
    pub(crate) fn new(label: &str, port: u16) -> ScratchDir {
        let dir =
            std::env::temp_dir().join(format!("switchyard-{label}-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed (SIGKILL, by pid) and reaped on drop.
pub(crate) struct Process {
    child: Child,
}

impl Process {
    pub(crate) fn spawn(command: &mut Command, log: &Path) -> Process {
        let log = std::fs::File::create(log).expect("create log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
        Process { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    pub(crate) fn has_exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends PING until the server at `port` answers anything (`+PONG`, or `-NOAUTH` when it wants a password).
pub(crate) fn wait_until_answering(port: u16, process: &mut Process, log: &Path) {
    wait_until_answering_to(port, b"PING\r\n", process, log);
}

/// [`wait_until_answering`] with `probe` sent instead of a bare PING (a gateway behind a PROXY protocol balancer
/// needs its header first).
fn wait_until_answering_to(port: u16, probe: &[u8], process: &mut Process, log: &Path) {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Some(status) = process.has_exited() {
            panic!(
                "process on port {port} exited with {status} during startup:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if ping(port, probe) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nothing answered PING on port {port} within {STARTUP_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ping(port: u16, probe: &[u8]) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut reply = [0u8; 1];
    stream.write_all(probe).is_ok() && matches!(stream.read(&mut reply), Ok(1))
}

/// A `redis-server` on its own port, without persistence.
pub struct RedisServer {
    port: u16,
    tls_port: Option<u16>,
    process: Process,
    dir: ScratchDir,
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
        let mut command = Command::new("redis-server");
        command
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--enable-debug-command", "yes"])
            .arg("--dir")
            .arg(&dir.0);
        if let Some(password) = &self.password {
            command.args(["--requirepass", password]);
        }
        command.args(&self.args);
        if let Some(tls) = &self.tls {
            command.args(&tls.args);
        }
        let mut process = Process::spawn(&mut command, &log);
        wait_until_answering(port, &mut process, &log);
        RedisServer {
            port,
            tls_port: self.tls.map(|tls| tls.port),
            process,
            dir,
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

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn dir(&self) -> &Path {
        &self.dir.0
    }
}

/// A `switchyard-gateway` process serving a routes file.
pub struct Gateway {
    port: u16,
    tls_port: Option<u16>,
    admin_port: u16,
    routes: Option<PathBuf>,
    log: PathBuf,
    process: Process,
    _dir: ScratchDir,
}

#[derive(Default)]
pub struct GatewayBuilder {
    args: Vec<String>,
    env: Vec<(String, String)>,
    port: Option<u16>,
    tls_port: Option<u16>,
}

impl GatewayBuilder {
    /// Extra command-line arguments.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// An extra environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// A TLS listener too, with the certificate and key `files` (and `--tls-client-ca` when `client_ca`).
    pub fn tls(mut self, files: &CertFiles, client_ca: Option<&Path>) -> Self {
        let port = allocate_port();
        self.tls_port = Some(port);
        self.args.extend([
            "--tls-listen".to_string(),
            format!("127.0.0.1:{port}"),
            "--tls-cert".to_string(),
            files.cert.to_string_lossy().into_owned(),
            "--tls-key".to_string(),
            files.key.to_string_lossy().into_owned(),
        ]);
        if let Some(ca) = client_ca {
            self.args.push("--tls-client-ca".to_string());
            self.args.push(ca.to_string_lossy().into_owned());
        }
        self
    }

    /// Listens on `port` (to restart a gateway where its clients expect it).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Serves a routes file with these contents.
    pub fn start(self, routes: &serde_json::Value) -> Gateway {
        self.spawn(|dir, command| {
            let path = dir.join("routes.json");
            std::fs::write(&path, routes.to_string()).expect("write routes file");
            command.arg("--routes").arg(&path);
            Some(path)
        })
    }

    /// Follows a control plane, keeping its snapshot cache in `cache_file`.
    pub fn start_with_control_plane(
        self,
        control_plane: &crate::ControlPlane,
        cache_file: &Path,
    ) -> Gateway {
        self.spawn(|_, command| {
            command
                .args(["--control-plane", &control_plane.url()])
                .args(["--gateway-token", control_plane.gateway_token()])
                .arg("--cache-file")
                .arg(cache_file);
            None
        })
    }

    fn spawn(self, source: impl FnOnce(&Path, &mut Command) -> Option<PathBuf>) -> Gateway {
        let port = self.port.unwrap_or_else(allocate_port);
        let admin_port = allocate_port();
        let dir = ScratchDir::new("gateway", port);
        let log = dir.0.join("gateway.log");
        let mut command = Command::new(binary("switchyard-gateway", "SWITCHYARD_GATEWAY_BIN"));
        command
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
            .env("RUST_LOG", "info");
        let routes = source(&dir.0, &mut command);
        let probe: &[u8] = match self.args.iter().any(|arg| arg == "--proxy-protocol") {
            true => b"PROXY UNKNOWN\r\nPING\r\n",
            false => b"PING\r\n",
        };
        command.args(&self.args).envs(self.env);
        let mut process = Process::spawn(&mut command, &log);
        wait_until_answering_to(port, probe, &mut process, &log);
        Gateway {
            port,
            tls_port: self.tls_port,
            admin_port,
            routes,
            log,
            process,
            _dir: dir,
        }
    }
}

impl Gateway {
    pub fn builder() -> GatewayBuilder {
        GatewayBuilder::default()
    }

    /// A gateway with the default settings serving `routes`.
    pub fn start(routes: &serde_json::Value) -> Gateway {
        Self::builder().start(routes)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS listener's port (see [`GatewayBuilder::tls`]).
    pub fn tls_port(&self) -> u16 {
        self.tls_port.expect("started with a TLS listener")
    }

    pub fn admin_port(&self) -> u16 {
        self.admin_port
    }

    /// `redis://` URL for the `redis` crate, authenticated with `password` when given.
    pub fn url(&self, password: Option<&str>) -> String {
        match password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// [`Gateway::url`] for a client speaking `protocol`: 2, or 3 (the `redis` crate then says `HELLO 3` on
    /// connect).
    pub fn url_speaking(&self, password: Option<&str>, protocol: u8) -> String {
        match protocol {
            2 => self.url(password),
            3 => format!("{}?protocol=resp3", self.url(password)),
            _ => panic!("no protocol {protocol}"),
        }
    }

    pub async fn client(&self, password: Option<&str>) -> redis::aio::MultiplexedConnection {
        connect(&self.url(password)).await
    }

    /// [`Gateway::client`] speaking `protocol` (see [`Gateway::url_speaking`]).
    pub async fn client_speaking(
        &self,
        password: Option<&str>,
        protocol: u8,
    ) -> redis::aio::MultiplexedConnection {
        connect(&self.url_speaking(password, protocol)).await
    }

    /// Replaces the routes file and sends SIGHUP.
    pub fn reload(&self, routes: &serde_json::Value) {
        let path = self
            .routes
            .as_ref()
            .expect("a gateway started with a routes file");
        std::fs::write(path, routes.to_string()).expect("rewrite routes file");
        self.process.signal("HUP");
    }

    pub fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }

    /// Waits for the process to exit, returning its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.process.has_exited() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The gateway's resident memory, in bytes (`VmRSS`).
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("read the gateway's /proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or_else(|| panic!("no VmRSS in {status}"))
    }

    /// The value of the sample `series` (name and labels, as `/metrics` writes them), 0 when absent.
    pub fn metric(&self, series: &str) -> i64 {
        let (_, metrics) = self.admin_get("/metrics");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    }

    /// What the gateway logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path` on the admin port: (status code, body).
    pub fn admin_get(&self, path: &str) -> (u16, String) {
        let mut stream =
            TcpStream::connect(("127.0.0.1", self.admin_port)).expect("connect admin port");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("set timeout");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .expect("send request");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read response");
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("bad HTTP response: {response}"));
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }
}

/// An async `redis` crate connection to `url` (panics if it cannot connect: for tests).
pub async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// Where a workspace binary is: `env_var` (taken as it is), or the target directory this test binary lives in,
/// provided that the binary is newer than every source it is built from: a test never runs a stale build.
pub fn binary(name: &str, env_var: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env_var) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test binary> -> target/<profile>/<name>
    let profile_dir = exe.parent().and_then(Path::parent).expect("target dir");
    let binary = profile_dir.join(name);
    let build = "build it first (scripts/test does: cargo build --workspace --bins)";
    let built = std::fs::metadata(&binary)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} does not exist: {build}", binary.display()));
    // The sources of the binary's crate and of the crates it uses (their `src`, which every change to the binary
    // touches, and which `cargo build` always rebuilds from).
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace");
    // The control plane's two binaries share the crate: cargo relinks one only when its own sources (or the
    // library's) change, so the other's are left out.
    let (crates, other): (&[&str], &str) = match name {
        "switchyard-gateway" => (&["gateway", "schemas"], ""),
        "switchyard-ctl" => (&["control-plane", "schemas"], "control-plane/src/main.rs"),
        _ => (&["control-plane", "schemas"], "control-plane/src/bin"),
    };
    let sources = crates.iter().map(|dir| workspace.join(dir).join("src"));
    let other = (!other.is_empty()).then(|| workspace.join(other));
    if let Some((changed, when)) = newest(sources, other.as_deref())
        && when > built
    {
        panic!(
            "{} is older than {}: {build}",
            binary.display(),
            changed.display()
        );
    }
    binary
}

/// The most recently modified file under `paths` (files or directories) but not under `skip`, and when.
fn newest(
    paths: impl Iterator<Item = PathBuf>,
    skip: Option<&Path>,
) -> Option<(PathBuf, std::time::SystemTime)> {
    let mut newest: Option<(PathBuf, std::time::SystemTime)> = None;
    let mut pending: Vec<PathBuf> = paths.collect();
    while let Some(path) = pending.pop() {
        if skip.is_some_and(|skip| path.starts_with(skip)) {
            continue;
        }
        let Ok(metadata) = std::fs::metadata(&path) else {
            continue;
        };
        if metadata.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                pending.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
            }
        } else if let Ok(modified) = metadata.modified()
            && newest.as_ref().is_none_or(|(_, when)| modified > *when)
        {
            newest = Some((path, modified));
        }
    }
    newest
}
