//! The control plane serving HTTPS itself, with certificates from a private CA made by the test: the API over
//! TLS, the certificate swapped on SIGHUP while a long-poll is in flight, its expiry in `/metrics` and in the log,
//! handshakes that neither block the accept loop nor wait forever, and its clients (`switchyard-ctl`, a gateway)
//! trusting that CA through their options.

use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use switchyard_tests::{
    ADMIN_TOKEN, ControlPlane, Ctl, Gateway, Pki, RedisServer, Validity, binary, wait_for_async,
};

/// A client that trusts only the CA of `ca_file`.
fn client_trusting(ca_file: &Path) -> reqwest::Client {
    let pem = std::fs::read(ca_file).expect("read the CA");
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("CA PEM"))
        .build()
        .expect("HTTP client")
}

async fn get(client: &reqwest::Client, url: &str) -> Result<(u16, String), reqwest::Error> {
    let response = client.get(url).bearer_auth(ADMIN_TOKEN).send().await?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

fn port_of(cp: &ControlPlane) -> u16 {
    cp.url()
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .expect("a port in the URL")
}

/// The expiry metric of the listener's certificate, in seconds since the epoch.
fn expiry(metrics: &str, cp: &ControlPlane) -> i64 {
    let series = format!(
        "switchyard_tls_certificate_expiry_timestamp_seconds{{role=\"listener\",source=\"{}\"}} ",
        cp.certificate().cert.display()
    );
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {series}in\n{metrics}"))
}

fn days_from_now(timestamp: i64) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    (timestamp - now) / 86_400
}

#[tokio::test]
async fn serves_https_and_swaps_its_certificate_on_sighup() {
    let first = Pki::new("cp-first");
    let cp = ControlPlane::builder().https(&first).start();
    // A client that connects and never starts its handshake: the others are served meanwhile.
    let mut silent = TcpStream::connect(("127.0.0.1", port_of(&cp))).expect("connect");

    let created = cp
        .expect("POST", "/v1/tenants", Some(json!({"name": "acme"})), 201)
        .await;
    assert_eq!(created["name"], "acme");
    let plain = format!("http://127.0.0.1:{}/healthz", port_of(&cp));
    assert!(
        get(&reqwest::Client::new(), &plain).await.is_err(),
        "plain HTTP is not served"
    );
    let trusts_first = client_trusting(&first.ca_file());
    let (_, metrics) = get(&trusts_first, &format!("{}/metrics", cp.url()))
        .await
        .expect("metrics over HTTPS");
    assert!(
        (364..=365).contains(&days_from_now(expiry(&metrics, &cp))),
        "{metrics}"
    );

    // A certificate from another CA, expiring within the warning's 14 days, replaces the first while a
    // long-poll waits on a connection made with the first.
    let second = Pki::new("cp-second");
    let trusts_second = client_trusting(&second.ca_file());
    let poll = cp.call("GET", "/v1/snapshot?after=1&wait=3s", None);
    let reload = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let next = second.issue("next", &["127.0.0.1"], Validity::EndsInDays(7));
        std::fs::copy(&next.cert, &cp.certificate().cert).expect("replace the certificate");
        std::fs::copy(&next.key, &cp.certificate().key).expect("replace the key");
        cp.reload();
        let healthz = format!("{}/healthz", cp.url());
        let mut served = false;
        for _ in 0..100 {
            if get(&trusts_second, &healthz).await.is_ok() {
                served = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(served, "the new certificate is never served:\n{}", cp.log());
    };
    let ((status, _), ()) = tokio::join!(poll, reload);
    assert_eq!(status, 304, "the long-poll outlived the reload");
    let err = get(
        &client_trusting(&first.ca_file()),
        &plain.replace("http:", "https:"),
    )
    .await
    .expect_err("the first certificate is gone");
    assert!(
        format!("{err:?}").contains("UnknownIssuer"),
        "a client of the first CA: {err:?}"
    );
    let (_, metrics) = get(&trusts_second, &format!("{}/metrics", cp.url()))
        .await
        .expect("metrics");
    assert!(
        (6..=7).contains(&days_from_now(expiry(&metrics, &cp))),
        "{metrics}"
    );
    let log = cp.log();
    assert!(log.contains("HTTPS certificate reloaded"), "{log}");
    assert!(
        log.contains("the HTTPS certificate expires in 6 days")
            || log.contains("the HTTPS certificate expires in 7 days"),
        "{log}"
    );

    // A broken key is refused and the certificate in place goes on serving.
    std::fs::write(&cp.certificate().key, "not a key").expect("break the key");
    cp.reload();
    wait_for_async("the failed reload", Duration::from_secs(5), || {
        cp.log().contains("cannot reload the HTTPS certificate")
    })
    .await;
    assert!(
        get(&trusts_second, &format!("{}/healthz", cp.url()))
            .await
            .is_ok()
    );

    // The silent client was closed once its handshake's deadline passed.
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    let read = silent.read(&mut [0u8; 16]);
    assert!(matches!(read, Ok(0)), "{read:?}");
}

#[tokio::test]
async fn switchyard_ctl_trusts_its_ca_file() {
    let pki = Pki::new("cp-ctl");
    let cp = ControlPlane::builder().https(&pki).start();
    let ctl = |ca_file: Option<&Path>| {
        let mut command = Command::new(binary("switchyard-ctl", "SWITCHYARD_CTL_BIN"));
        command
            .args(["--url", &cp.url(), "--admin-token", ADMIN_TOKEN])
            .env_remove("SSL_CERT_FILE");
        if let Some(ca_file) = ca_file {
            command.env("SWITCHYARD_CA_FILE", ca_file);
        }
        let output = command
            .args(["migrations", "watch", "acme", "1"])
            .output()
            .expect("run switchyard-ctl");
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    // The API answers, over TLS: there is no such tenant.
    let trusted = ctl(Some(&pki.ca_file()));
    assert!(trusted.contains("404 Not Found"), "{trusted}");
    let untrusted = ctl(None);
    assert!(
        untrusted.contains("invalid peer certificate: UnknownIssuer"),
        "{untrusted}"
    );
    // A profile's ca_file (relative to the profile file) is trusted the same way.
    let profiled = Ctl::bare();
    let home = profiled.home();
    std::fs::copy(pki.ca_file(), home.join("cp-ca.pem")).expect("copy the CA");
    std::fs::write(home.join("admin.token"), ADMIN_TOKEN).expect("write the token");
    let profiles = json!({"profiles": {"tls": {
        "url": cp.url(), "admin_token_file": "admin.token", "ca_file": "cp-ca.pem"}}});
    let config = home.join("ctl.json");
    std::fs::write(&config, profiles.to_string()).expect("write the profile file");
    let config = config.to_str().expect("a UTF-8 path");
    let listed = profiled.ok(&["--config", config, "--profile", "tls", "tenants", "list"]);
    assert!(listed.starts_with("NAME"), "{listed}");
}

/// `GET k` through `gateway` as the tenant of `secret`.
async fn get_k(gateway: &Gateway, secret: &str) -> String {
    let mut client = gateway.client(Some(secret)).await;
    redis::cmd("GET")
        .arg("k")
        .query_async(&mut client)
        .await
        .expect("GET through the gateway")
}

#[tokio::test]
async fn gateway_follows_an_https_control_plane_and_keeps_serving_on_a_wrong_ca() {
    let pki = Pki::new("cp-gateway");
    let cp = ControlPlane::builder().https(&pki).start();
    let redis = RedisServer::builder().start();
    cp.expect("POST", "/v1/tenants", Some(json!({"name": "acme"})), 201)
        .await;
    let credential = cp
        .expect("POST", "/v1/tenants/acme/credentials", Some(json!({})), 201)
        .await;
    let secret = credential["secret"].as_str().expect("secret").to_string();
    cp.expect(
        "PUT",
        "/v1/tenants/acme/route",
        Some(json!({"route": {"type": "single", "target": redis.url()}})),
        200,
    )
    .await;
    let cache = pki.dir().join("snapshot.json");
    let ca = pki.ca_file().display().to_string();

    let gateway = Gateway::builder()
        .arg("--control-plane-ca")
        .arg(&ca)
        .start_with_control_plane(&cp, &cache);
    wait_for_async("the snapshot cache", Duration::from_secs(10), || {
        cache.exists()
    })
    .await;
    let mut client = gateway.client(Some(&secret)).await;
    let () = redis::cmd("SET")
        .arg("k")
        .arg("over https")
        .query_async(&mut client)
        .await
        .expect("SET through the gateway");
    // The control plane's certificate and the CA it trusts for it show among the gateway's certificates.
    let (_, metrics) = gateway.admin_get("/metrics");
    for role in ["control_plane", "control_plane_ca"] {
        let series =
            format!("switchyard_tls_certificate_expiry_timestamp_seconds{{role=\"{role}\"");
        assert!(metrics.contains(&series), "no {role} in {metrics}");
    }
    drop(gateway);

    // The system's store (here SSL_CERT_FILE) is the default.
    let gateway = Gateway::builder()
        .env("SSL_CERT_FILE", &ca)
        .start_with_control_plane(&cp, &pki.dir().join("other-snapshot.json"));
    wait_for_async("a snapshot over HTTPS", Duration::from_secs(10), || {
        gateway.admin_get("/readyz").0 == 200
    })
    .await;
    assert_eq!(get_k(&gateway, &secret).await, "over https");
    drop(gateway);

    let stranger = Pki::new("not-the-control-plane");
    let gateway = Gateway::builder()
        .arg("--control-plane-ca")
        .arg(stranger.ca_file().display().to_string())
        .start_with_control_plane(&cp, &cache);
    assert_eq!(get_k(&gateway, &secret).await, "over https");
    let log = gateway.log();
    assert!(
        log.contains(&cp.url()) && log.contains("invalid peer certificate: UnknownIssuer"),
        "{log}"
    );
}
