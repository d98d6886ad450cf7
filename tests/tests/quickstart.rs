//! `scripts/quickstart` on a machine where something already listens on the control plane's port: it says which
//! port and what to do, within seconds (before building anything), instead of failing later with the reason in a
//! log file. And a component that exits at start is shown with the end of its log and a hint.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
}

/// Runs `program` with `args` in the workspace, killed after `limit`.
fn run_with_limit(program: &str, args: &[&str], limit: Duration) -> Output {
    let started = Instant::now();
    let output = Command::new("timeout")
        .arg(format!("{}s", limit.as_secs()))
        .arg(program)
        .args(args)
        .current_dir(workspace())
        .output()
        .expect("run timeout");
    assert!(
        started.elapsed() < limit,
        "still running after {limit:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn a_taken_port_is_named_before_anything_is_built() {
    // Held for the test's duration; when something else holds 8080 already, the quickstart must say the same.
    let _listener = TcpListener::bind("127.0.0.1:8080");
    let output = run_with_limit("scripts/quickstart", &[], Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("port 8080, for the control plane, is already in use on 127.0.0.1"),
        "{stderr}"
    );
    assert!(stderr.contains("hint: stop what listens there"), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("Switchyard is up"), "{stdout}");
    assert!(
        !stderr.contains("Compiling") && !stderr.contains("Finished"),
        "it built first: {stderr}"
    );
}

#[test]
fn a_component_that_exits_is_shown_with_its_log_and_a_hint() {
    let log =
        std::env::temp_dir().join(format!("switchyard-quickstart-{}.log", std::process::id()));
    let script = format!(
        ". scripts/lib.sh
         (echo 'Error: binding 127.0.0.1:1: Address already in use' >'{log}'; exit 2) &
         wait_started $! 'the control plane' 1 '{log}' 'free the port'",
        log = log.display()
    );
    let output = run_with_limit("bash", &["-c", &script], Duration::from_secs(20));
    let _ = std::fs::remove_file(&log);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the control plane did not start (nothing listens on 127.0.0.1:1)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  | Error: binding 127.0.0.1:1: Address already in use"),
        "{stderr}"
    );
    assert!(stderr.contains("hint: free the port"), "{stderr}");
}

/// Each port comes from a flag or the environment (the flag wins), and a taken one is named with the flag that
/// moves it.
#[test]
fn ports_come_from_flags_or_the_environment() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().expect("its address").port().to_string();
    let quickstart = |args: &[&str], env: &[(&str, &str)]| {
        let output = Command::new("timeout")
            .arg("60s")
            .arg("scripts/quickstart")
            .args(args)
            .envs(env.iter().copied())
            .current_dir(workspace())
            .output()
            .expect("run timeout");
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let stderr = quickstart(&[], &[("SWITCHYARD_QUICKSTART_GATEWAY_PORT", &port)]);
    assert!(
        stderr.contains(&format!("port {port}, for the gateway, is already in use")),
        "{stderr}"
    );
    assert!(stderr.contains("--gateway-port N"), "{stderr}");
    let stderr = quickstart(
        &["--redis-port", &port],
        &[("SWITCHYARD_QUICKSTART_REDIS_PORT", "1")],
    );
    assert!(
        stderr.contains(&format!("port {port}, for the Redis, is already in use")),
        "{stderr}"
    );
    assert!(!stderr.contains("port 1,"), "{stderr}");
}
