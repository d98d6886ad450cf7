//! The systemd units of examples/systemd: `systemd-analyze verify` accepts them as shipped (in a root holding the
//! system's own units and the binaries at the paths the units name), and the binaries started with exactly their
//! `ExecStart=` lines, in an environment made of exactly their environment files (with this test's addresses,
//! database and cache path in place of the examples'), serve: the control plane answers with the file's admin token
//! and the gateway follows it with the file's gateway token. systemd itself is not PID 1 here, so it cannot start
//! them.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use switchyard_tests::{allocate_port, binary};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/systemd")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(examples().join(name)).expect("read the example")
}

/// The value of `key=` in `unit` (the only one).
fn setting<'a>(unit: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key}=");
    let mut values = unit
        .lines()
        .filter_map(|line| line.strip_prefix(prefix.as_str()));
    let value = values.next().unwrap_or_else(|| panic!("no {key}="));
    assert!(values.next().is_none(), "several {key}=");
    value
}

/// An environment file as systemd reads it: `KEY=value` lines; `#` comments and blank lines skipped.
fn environment(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (key, value) = line.split_once('=').expect("KEY=value");
            (key.to_string(), value.to_string())
        })
        .collect()
}

/// Kills the process when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `unit`'s ExecStart line (its program found among the built binaries) with only `env` as environment.
fn start(unit: &str, env: &BTreeMap<String, String>, log: &Path) -> Running {
    let line = setting(unit, "ExecStart");
    let mut words = line.split_whitespace();
    let program = words.next().expect("a program");
    let name = Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a name");
    let log = std::fs::File::create(log).expect("the log file");
    let child = Command::new(binary(name, "UNUSED_SWITCHYARD_BIN"))
        .args(words)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("the log file"))
        .stderr(log)
        .spawn()
        .expect("start the binary");
    Running(child)
}

/// A GET over a connection of its own: the status and the body, or `None` while nothing answers.
fn http_get(port: u16, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.get(9..12)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

fn wait_until(what: &str, logs: &Path, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        let log = |name: &str| std::fs::read_to_string(logs.join(name)).unwrap_or_default();
        assert!(
            Instant::now() < deadline,
            "{what}\ncontrol plane:\n{}\ngateway:\n{}",
            log("control-plane.log"),
            log("gateway.log")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A scratch directory under the target directory (the same file system as the binaries, to hard-link them).
fn scratch(name: &str) -> PathBuf {
    let target = binary("switchyard-gateway", "UNUSED_SWITCHYARD_BIN");
    let dir = target
        .parent()
        .expect("the target directory")
        .join(format!("systemd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the scratch directory");
    dir
}

#[test]
fn systemd_accepts_the_units() {
    let root = scratch("verify").join("root");
    let units = root.join("etc/systemd/system");
    std::fs::create_dir_all(&units).expect("mkdir");
    std::fs::create_dir_all(root.join("usr/lib/systemd")).expect("mkdir");
    let copied = Command::new("cp")
        .args(["-a", "/usr/lib/systemd/system"])
        .arg(root.join("usr/lib/systemd/"))
        .status()
        .expect("cp");
    assert!(copied.success());
    for unit in [
        "switchyard-control-plane.service",
        "switchyard-gateway.service",
    ] {
        let text = read(unit);
        std::fs::write(units.join(unit), &text).expect("write the unit");
        // Every program an Exec*= line runs, where the unit says: Switchyard's from the build, others (kill) from
        // this system.
        let programs = text
            .lines()
            .filter(|line| line.starts_with("Exec"))
            .filter_map(|line| line.split_once('=')?.1.split_whitespace().next());
        for program in programs {
            let installed = root.join(program.trim_start_matches('/'));
            if installed.exists() {
                continue;
            }
            std::fs::create_dir_all(installed.parent().expect("a directory")).expect("mkdir");
            let name = Path::new(program)
                .file_name()
                .and_then(|n| n.to_str())
                .expect("a name");
            match name.starts_with("switchyard-") {
                true => std::fs::hard_link(binary(name, "UNUSED_SWITCHYARD_BIN"), &installed),
                false => std::fs::copy(program, &installed).map(drop),
            }
            .expect("install the program");
        }
        let output = Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("--root={}", root.display()))
            .arg(unit)
            .output()
            .expect("systemd-analyze");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stderr.trim().is_empty(),
            "{unit}: {stderr}"
        );
    }
    std::fs::remove_dir_all(root.parent().expect("the scratch directory")).expect("clean up");
}

#[test]
fn the_exec_start_lines_serve_with_their_environment_files() {
    let dir = scratch("serve");
    let database = format!("switchyard_systemd_{}", std::process::id());
    let psql = |sql: &str| {
        let status = Command::new("psql")
            .args([
                "-q",
                "postgres://postgres@127.0.0.1:5432/postgres",
                "-c",
                sql,
            ])
            .status()
            .expect("psql");
        assert!(status.success(), "{sql}");
    };
    psql(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"));
    psql(&format!("CREATE DATABASE {database}"));
    let (cp_port, gw_port, gw_admin) = (allocate_port(), allocate_port(), allocate_port());
    let cache = dir.join("snapshot.json");
    let replace = |text: String| {
        text.replace("127.0.0.1:8080", &format!("127.0.0.1:{cp_port}"))
            .replace(
                "postgres://switchyard:CHANGE-ME@127.0.0.1:5432/switchyard",
                &format!("postgres://postgres@127.0.0.1:5432/{database}"),
            )
            .replace("0.0.0.0:6380", &format!("127.0.0.1:{gw_port}"))
            .replace("127.0.0.1:16380", &format!("127.0.0.1:{gw_admin}"))
            .replace(
                "/var/lib/switchyard-gateway/snapshot.json",
                &cache.display().to_string(),
            )
    };
    let cp_env = environment(&replace(read("control-plane.env")));
    let gw_env = environment(&replace(read("gateway.env")));
    assert_eq!(
        cp_env["SWITCHYARD_GATEWAY_TOKEN"], gw_env["SWITCHYARD_GATEWAY_TOKEN"],
        "the two files name the same gateway token"
    );
    let admin = cp_env["SWITCHYARD_ADMIN_TOKEN"].clone();

    let control_plane = start(
        &read("switchyard-control-plane.service"),
        &cp_env,
        &dir.join("control-plane.log"),
    );
    wait_until("the control plane never answered", &dir, || {
        http_get(cp_port, "/v1/tenants", Some(&admin)).is_some_and(|(status, _)| status == 200)
    });
    let gateway = start(
        &read("switchyard-gateway.service"),
        &gw_env,
        &dir.join("gateway.log"),
    );
    wait_until("the gateway never became ready", &dir, || {
        http_get(gw_admin, "/readyz", None).is_some_and(|(status, _)| status == 200)
    });
    wait_until(
        "the gateway never reported to the control plane",
        &dir,
        || {
            http_get(cp_port, "/v1/gateways", Some(&admin))
                .is_some_and(|(_, body)| body.contains("\"live\":true"))
        },
    );
    drop(gateway);
    drop(control_plane);
    psql(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"));
    std::fs::remove_dir_all(&dir).expect("clean up");
}
