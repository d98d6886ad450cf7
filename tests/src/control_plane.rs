//! A `switchyard-control-plane` process on its own fresh Postgres database, and an admin client for its API.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::process::{Process, ScratchDir, binary};
use crate::{CertFiles, Pki, allocate_port};

pub const ADMIN_TOKEN: &str = "admin-token-for-tests-0123456789";
pub(crate) const GATEWAY_TOKEN: &str = "gateway-token-for-tests-0123456789";

/// The Postgres server the control plane uses: `SWITCHYARD_TEST_POSTGRES`, else the local one.
fn postgres_base() -> String {
    std::env::var("SWITCHYARD_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_string())
}

pub struct ControlPlane {
    port: u16,
    database: String,
    postgres: Postgres,
    env: Vec<(String, String)>,
    https: Option<CertFiles>,
    process: Option<Process>,
    dir: ScratchDir,
    http: reqwest::Client,
    /// Whether dropping it drops the database: not for a [`ControlPlane::replica`], which shares another's.
    owns_database: bool,
}

/// The Postgres server a control plane uses: `{base}/{database}{params}` is its URL; the harness' own `psql`
/// (creating and dropping the database) uses `admin_params` instead.
#[derive(Clone)]
struct Postgres {
    base: String,
    params: String,
    admin_params: String,
}

impl Postgres {
    fn url(&self, database: &str) -> String {
        format!("{}/{database}{}", self.base, self.params)
    }

    /// Runs `sql` on `database` (the harness' own `postgres` for creating and dropping databases).
    fn psql(&self, database: &str, sql: &str) -> std::process::ExitStatus {
        Command::new("psql")
            .env("PGOPTIONS", "--client-min-messages=warning")
            .arg(format!("{}/{database}{}", self.base, self.admin_params))
            .args(["-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .status()
            .expect("run psql")
    }
}

/// How to start a [`ControlPlane`]: plain HTTP on the local Postgres unless told otherwise.
pub struct ControlPlaneBuilder {
    postgres: Postgres,
    env: Vec<(String, String)>,
    /// The certificate to serve HTTPS with, and its CA's certificate.
    https: Option<(CertFiles, PathBuf)>,
}

impl ControlPlaneBuilder {
    /// Serves HTTPS with a certificate for 127.0.0.1 and localhost from `pki` (trust `pki.ca_file()`).
    pub fn https(mut self, pki: &Pki) -> Self {
        let files = pki.server(
            &format!("control-plane-{}", allocate_port()),
            &["localhost", "127.0.0.1"],
        );
        self.https = Some((files, pki.ca_file()));
        self
    }

    /// Uses the Postgres server at `base` (`postgres://user@host:port`), with `params` after the database
    /// name in the control plane's URL (`?sslmode=...`) and `admin_params` in the harness' own.
    pub fn postgres(mut self, base: &str, params: &str, admin_params: &str) -> Self {
        self.postgres = Postgres {
            base: base.to_string(),
            params: params.to_string(),
            admin_params: admin_params.to_string(),
        };
        self
    }

    /// An extra environment variable for the process.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Starts a control plane on a new, empty database, and waits until it accepts connections.
    pub fn start(self) -> ControlPlane {
        let mut control_plane = self.prepare();
        control_plane.restart();
        control_plane
    }

    /// Starts a control plane that is expected to fail at start, and returns what it logged until it exited.
    pub fn start_failing(self) -> String {
        let control_plane = self.prepare();
        let log = control_plane.log_path();
        let mut process = Process::spawn(&mut control_plane.command(), &log);
        let deadline = Instant::now() + Duration::from_secs(20);
        while process.has_exited().is_none() {
            assert!(
                Instant::now() < deadline,
                "the control plane did not exit:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::fs::read_to_string(&log).unwrap_or_default()
    }

    fn prepare(self) -> ControlPlane {
        let port = allocate_port();
        let database = format!("switchyard_e2e_{}_{port}", std::process::id());
        for sql in [
            format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
            format!("CREATE DATABASE {database}"),
        ] {
            assert!(
                self.postgres.psql("postgres", &sql).success(),
                "psql failed: {sql}"
            );
        }
        let mut http = reqwest::Client::builder();
        if let Some((_, ca)) = &self.https {
            let ca = std::fs::read(ca).expect("read the CA certificate");
            http = http
                .tls_built_in_root_certs(false)
                .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("CA PEM"));
        }
        ControlPlane {
            port,
            database,
            postgres: self.postgres,
            https: self.https.map(|(files, _)| files),
            env: self.env,
            process: None,
            dir: ScratchDir::new("control-plane", port),
            http: http.build().expect("HTTP client"),
            owns_database: true,
        }
    }
}

impl ControlPlane {
    /// Starts a control plane on a new, empty database.
    pub fn start() -> ControlPlane {
        Self::builder().start()
    }

    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder {
            postgres: Postgres {
                base: postgres_base(),
                params: String::new(),
                admin_params: String::new(),
            },
            env: Vec::new(),
            https: None,
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.0.join("control-plane.log")
    }

    fn command(&self) -> Command {
        let mut command = Command::new(binary(
            "switchyard-control-plane",
            "SWITCHYARD_CONTROL_PLANE_BIN",
        ));
        command
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--database-url", &self.postgres.url(&self.database)])
            .args([
                "--admin-token",
                ADMIN_TOKEN,
                "--gateway-token",
                GATEWAY_TOKEN,
            ])
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(files) = &self.https {
            command
                .arg("--tls-cert")
                .arg(&files.cert)
                .arg("--tls-key")
                .arg(&files.key);
        }
        command
    }

    /// Starts another replica over the same database: its own process and port, the same settings. The database
    /// is this control plane's: drop the replica first.
    pub fn replica(&self) -> ControlPlane {
        let port = allocate_port();
        let mut replica = ControlPlane {
            port,
            database: self.database.clone(),
            postgres: self.postgres.clone(),
            env: self.env.clone(),
            https: self.https.clone(),
            process: None,
            dir: ScratchDir::new("control-plane", port),
            http: self.http.clone(),
            owns_database: false,
        };
        replica.restart();
        replica
    }

    /// Starts the process again on the same port and database (after [`ControlPlane::stop`]).
    pub fn restart(&mut self) {
        let log = self.log_path();
        let mut process = Process::spawn(&mut self.command(), &log);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline && process.has_exited().is_none(),
                "control plane did not start:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.process = Some(process);
    }

    /// The certificate and key it serves HTTPS with (replace them, then [`ControlPlane::reload`]).
    pub fn certificate(&self) -> &CertFiles {
        self.https.as_ref().expect("a control plane serving HTTPS")
    }

    /// Sends SIGHUP: the HTTPS certificate is read again.
    pub fn reload(&self) {
        self.signal("HUP");
    }

    /// Sends `signal` to the process (`STOP`: the kernel still accepts its connections, nothing answers them).
    pub fn signal(&self, signal: &str) {
        self.process.as_ref().expect("running").signal(signal);
    }

    /// What the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Runs `sql` on the control plane's database, past its API: what a control plane of an earlier version, or
    /// someone at a `psql` prompt, could have written.
    pub fn sql(&self, sql: &str) {
        let status = self.postgres.psql(&self.database, sql);
        assert!(status.success(), "psql failed: {sql}");
    }

    /// Kills the process (the database stays).
    pub fn stop(&mut self) {
        self.process = None;
    }

    pub fn url(&self) -> String {
        let scheme = if self.https.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
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

    /// `GET path` without a token, as a scraper or a health check calls it: (status, body as text).
    pub async fn get_text(&self, path: &str) -> (u16, String) {
        let response = self
            .http
            .get(format!("{}{path}", self.url()))
            .send()
            .await
            .expect("control plane request");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
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

    /// Polls `GET path` until `check` holds of its answer, for at most `within`; returns the last answer.
    pub async fn poll(
        &self,
        path: &str,
        within: std::time::Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = std::time::Instant::now() + within;
        loop {
            let answer = self.expect("GET", path, None, 200).await;
            if check(&answer) {
                return answer;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{path} after {within:?}: {answer}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }
}

impl ControlPlane {
    /// Creates tenant `name`, issues it a secret and puts `route` as its route; returns the secret.
    pub async fn create_tenant(&self, name: &str, route: Value) -> String {
        self.create_tenant_with(json!({ "name": name }), route)
            .await
    }

    /// Like [`ControlPlane::create_tenant`], with the tenant's body (`name` and any other field) given whole.
    pub async fn create_tenant_with(&self, tenant: Value, route: Value) -> String {
        let name = tenant["name"].as_str().expect("a tenant name").to_string();
        self.expect("POST", "/v1/tenants", Some(tenant), 201).await;
        let secret = self.issue_secret(&name).await;
        self.expect(
            "PUT",
            &format!("/v1/tenants/{name}/route"),
            Some(json!({"route": route, "comment": "e2e"})),
            200,
        )
        .await;
        secret
    }

    /// Issues `tenant` a new secret, and returns it.
    pub async fn issue_secret(&self, tenant: &str) -> String {
        let credential = self
            .expect(
                "POST",
                &format!("/v1/tenants/{tenant}/credentials"),
                Some(json!({})),
                201,
            )
            .await;
        credential["secret"]
            .as_str()
            .expect("secret in the response")
            .to_string()
    }

    /// Waits until `gateways` gateways report `revision` (or later); returns how long it took.
    pub async fn converged(&self, gateways: usize, revision: i64) -> Duration {
        let started = Instant::now();
        loop {
            let fleet = self.expect("GET", "/v1/gateways", None, 200).await;
            let done = fleet["gateways"].as_array().map_or(0, |all| {
                all.iter()
                    .filter(|g| g["revision"].as_i64().unwrap_or(0) >= revision)
                    .count()
            });
            if done >= gateways {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "gateways did not reach revision {revision}: {fleet}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.process = None;
        if !self.owns_database {
            return;
        }
        let _ = self.postgres.psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.database),
        );
    }
}
