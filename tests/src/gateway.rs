//! `switchyard-gateway` processes for the tests: serving a routes file or following a control plane, polled
//! until they answer, reloaded and signalled as an operator would, killed on drop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::{Process, ScratchDir, binary, connect, wait_until_answering_to};
use crate::{CertFiles, allocate_port};

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

/// A directory for gateways' `--state-dir` (see [`GatewayBuilder::state_dir`]), which outlives the gateways a
/// test kills and starts again on it; removed on drop.
pub struct StateDir(PathBuf);

impl StateDir {
    /// A new, empty directory; `label` tells it from the test's others.
    pub fn new(label: &str) -> StateDir {
        let name = format!("switchyard-state-{label}-{}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        StateDir(dir)
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

    /// Keeps its state (the records of missed double-writes) in `dir`.
    pub fn state_dir(self, dir: &StateDir) -> Self {
        self.arg("--state-dir").arg(dir.0.to_string_lossy())
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
        self.start_with_replicas(&[control_plane], cache_file)
    }

    /// Follows a control plane given as several replicas (`--control-plane URL1,URL2`, in this order), keeping
    /// its snapshot cache in `cache_file`.
    pub fn start_with_replicas(
        self,
        replicas: &[&crate::ControlPlane],
        cache_file: &Path,
    ) -> Gateway {
        let urls: Vec<String> = replicas.iter().map(|replica| replica.url()).collect();
        let token = replicas.first().expect("a control plane").gateway_token();
        self.spawn(|_, command| {
            command
                .args(["--control-plane", &urls.join(",")])
                .args(["--gateway-token", token])
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
