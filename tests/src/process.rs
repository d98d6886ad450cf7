//! What every spawned server process of the tests shares: its scratch directory and its guard (killed on drop),
//! the wait until it answers, and where its binary is (never a stale build).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

    pub(crate) fn pid(&self) -> u32 {
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
pub(crate) fn wait_until_answering_to(port: u16, probe: &[u8], process: &mut Process, log: &Path) {
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
    let crates: &[&str] = match name {
        "switchyard-gateway" => &["gateway", "schemas", "schemas/runtime"],
        "switchyard-ctl" => &["control-plane/ctl", "schemas", "schemas/runtime"],
        _ => &["control-plane", "schemas", "schemas/runtime"],
    };
    let sources = crates.iter().map(|dir| workspace.join(dir).join("src"));
    if let Some((changed, when)) = newest(sources)
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

/// The most recently modified file under `paths` (files or directories), and when.
fn newest(paths: impl Iterator<Item = PathBuf>) -> Option<(PathBuf, std::time::SystemTime)> {
    let mut newest: Option<(PathBuf, std::time::SystemTime)> = None;
    let mut pending: Vec<PathBuf> = paths.collect();
    while let Some(path) = pending.pop() {
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
