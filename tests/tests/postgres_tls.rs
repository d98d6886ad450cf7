//! The control plane reaches Postgres over TLS, as `DATABASE_URL`'s `sslmode` says, against a private cluster
//! that accepts TLS connections only: `verify-full` with the server's CA (in `sslrootcert`, or in the system's
//! trust store as `SSL_CERT_FILE` names it), `verify-ca` and `require`, and a clear error at start when the
//! server's certificate is not signed by the CA it was told to trust.

use serde_json::json;
use switchyard_tests::{ControlPlane, Pki, TlsPostgres};

const REQUIRE: &str = "?sslmode=require";

#[tokio::test]
async fn control_plane_on_a_tls_only_postgres() {
    let pki = Pki::new("postgres");
    let postgres = TlsPostgres::start(&pki);
    let base = postgres.base_url();

    let verify_full = format!(
        "?sslmode=verify-full&sslrootcert={}",
        pki.ca_file().display()
    );
    let cp = ControlPlane::builder()
        .postgres(&base, &verify_full, REQUIRE)
        .start();
    cp.expect("POST", "/v1/tenants", Some(json!({"name": "acme"})), 201)
        .await;
    let health = cp.expect("GET", "/healthz", None, 200).await;
    assert_eq!(health["revision"], 1, "{health}");
    drop(cp);

    let ca = pki.ca_file().display().to_string();
    for (params, env) in [
        (REQUIRE.to_string(), None),
        (format!("?sslmode=verify-ca&sslrootcert={ca}"), None),
        (
            "?sslmode=verify-full".to_string(),
            Some(("SSL_CERT_FILE", &ca)),
        ),
    ] {
        let mut builder = ControlPlane::builder().postgres(&base, &params, REQUIRE);
        if let Some((key, value)) = env {
            builder = builder.env(key, value);
        }
        let cp = builder.start();
        cp.expect("POST", "/v1/tenants", Some(json!({"name": "acme"})), 201)
            .await;
    }

    // The server takes TLS connections only: what worked above was TLS.
    let log = ControlPlane::builder()
        .postgres(&base, "?sslmode=disable", REQUIRE)
        .start_failing();
    assert!(log.contains("no encryption"), "{log}");

    let stranger = Pki::new("not-the-postgres-ca");
    let log = ControlPlane::builder()
        .postgres(
            &base,
            &format!(
                "?sslmode=verify-full&sslrootcert={}",
                stranger.ca_file().display()
            ),
            REQUIRE,
        )
        .start_failing();
    let port = base.rsplit(':').next().unwrap_or_default();
    assert!(
        log.contains(&format!("connecting to Postgres at 127.0.0.1:{port}"))
            && log.contains("invalid peer certificate: UnknownIssuer"),
        "{log}"
    );
}
