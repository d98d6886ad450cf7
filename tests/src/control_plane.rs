//! A `switchyard-control-plane` process on its own fresh Postgres database, and an admin client for its API.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::allocate_port;
use crate::process::{Process, ScratchDir, binary};

pub const ADMIN_TOKEN: &str = "admin-token-for-tests-0123456789";
pub(crate) const GATEWAY_TOKEN: &str = "gateway-token-for-tests-0123456789";

/// The Postgres server the control plane uses: `SWITCHYARD_TEST_POSTGRES`, else the local one.
fn postgres_base() -> String {
    std::env::var("SWITCHYARD_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_string())
}

fn psql(database: &str, sql: &str) {
    let status = Command::new("psql")
        .env("PGOPTIONS", "--client-min-messages=warning")
        .arg(format!("{}/{database}", postgres_base()))
        .args(["-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .status()
        .expect("run psql");
    assert!(status.success(), "psql failed: {sql}");
}

pub struct ControlPlane {
    port: u16,
    database: String,
    process: Option<Process>,
    dir: ScratchDir,
    http: reqwest::Client,
}

impl ControlPlane {
    /// Starts a control plane on a new, empty database.
    pub fn start() -> ControlPlane {
        let port = allocate_port();
        let database = format!("switchyard_e2e_{}_{port}", std::process::id());
        psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
        );
        psql("postgres", &format!("CREATE DATABASE {database}"));
        let mut control_plane = ControlPlane {
            port,
            database,
            process: None,
            dir: ScratchDir::new("control-plane", port),
            http: reqwest::Client::new(),
        };
        control_plane.restart();
        control_plane
    }

    /// Starts the process again on the same port and database (after [`ControlPlane::stop`]).
    pub fn restart(&mut self) {
        let log = self.dir.0.join("control-plane.log");
        let mut command = Command::new(binary(
            "switchyard-control-plane",
            "SWITCHYARD_CONTROL_PLANE_BIN",
        ));
        command
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args([
                "--database-url",
                &format!("{}/{}", postgres_base(), self.database),
            ])
            .args([
                "--admin-token",
                ADMIN_TOKEN,
                "--gateway-token",
                GATEWAY_TOKEN,
            ])
            .env("RUST_LOG", "info");
        self.process = Some(Process::spawn(&mut command, &log));
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "control plane did not start:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process (the database stays).
    pub fn stop(&mut self) {
        self.process = None;
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn gateway_token(&self) -> &'static str {
        GATEWAY_TOKEN
    }

    /// An admin API call: (status, JSON body or Null).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_with(method, path, body, &[]).await
    }

    pub async fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url()))
            .bearer_auth(ADMIN_TOKEN);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("control plane request");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Calls and asserts the status, returning the body.
    pub async fn expect(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        status: u16,
    ) -> Value {
        let (got, value) = self.call(method, path, body).await;
        assert_eq!(got, status, "{method} {path}: {value}");
        value
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.process = None;
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.database);
        let _ = Command::new("psql")
            .arg(format!("{}/postgres", postgres_base()))
            .args(["-q", "-c", &sql])
            .status();
    }
}
