//! `switchyard-ctl tokens` and `whoami` end to end: the real binary against a real control plane on Postgres.
//! An admin creates, rotates and revokes tokens; each token then drives the CLI as what its role allows.

use serde_json::json;
use switchyard_tests::{ControlPlane, Ctl};

#[tokio::test]
async fn tokens_from_the_command_line() {
    let cp = ControlPlane::start();
    let admin = Ctl::new(&cp);
    admin.ok(&["tenants", "create", "team-a-web"]);
    admin.ok(&["tenants", "create", "other"]);

    // A viewer: reads, and is refused a change with the role it would need (exit code 5).
    let created = admin.json(&["tokens", "create", "dashboards", "--role", "viewer"]);
    let viewer_token = created["token"].as_str().expect("the secret").to_string();
    let viewer = Ctl::new(&cp).env("SWITCHYARD_ADMIN_TOKEN", &viewer_token);
    assert_eq!(
        viewer.json(&["whoami"]),
        json!({"actor": "token:dashboards", "role": "viewer", "bootstrap": false})
    );
    assert!(viewer.ok(&["tenants", "list"]).contains("team-a-web"));
    let refused = viewer.fails(5, &["tenants", "create", "nope"]);
    assert!(
        refused.stderr.contains("needs the role admin or operator"),
        "{refused:?}"
    );
    viewer.fails(5, &["tokens", "list"]);

    // A tenant-owner by prefix, allowed to change ip_allow: its tenants only, its credentials.
    let printed = admin.ok(&[
        "tokens",
        "create",
        "team-a",
        "--role",
        "tenant-owner",
        "--tenant-prefix",
        "team-a-",
        "--policy",
        "ip_allow",
    ]);
    assert!(printed.contains("shown only now"), "{printed}");
    let owner_token = printed.lines().last().expect("the secret line").to_string();
    assert!(owner_token.starts_with("syt_"), "{printed}");
    let owner = Ctl::new(&cp).env("SWITCHYARD_ADMIN_TOKEN", &owner_token);
    let listed = owner.ok(&["tenants", "list"]);
    assert!(
        listed.contains("team-a-web") && !listed.contains("other"),
        "{listed}"
    );
    owner.ok(&["credentials", "create", "team-a-web"]);
    owner.fails(5, &["credentials", "create", "other"]);
    let patch = owner.home().join("patch.json");
    std::fs::write(&patch, r#"{"ip_allow": ["10.0.0.0/8"]}"#).expect("write the patch");
    let patch = patch.display().to_string();
    owner.ok(&["tenants", "update", "team-a-web", "--file", &patch]);
    owner.fails(
        5,
        &["tenants", "update", "team-a-web", "--read-only", "true"],
    );

    // Listed without secrets; rotated with an overlap (both work), then revoked (neither does).
    let tokens = admin.ok(&["tokens", "list"]);
    assert!(
        tokens.contains("dashboards") && tokens.contains("tenant-owner"),
        "{tokens}"
    );
    assert!(!tokens.contains(&viewer_token), "{tokens}");
    let rotated = admin.json(&["tokens", "rotate", "1", "--overlap-secs", "600"]);
    let new_token = rotated["token"]
        .as_str()
        .expect("the new secret")
        .to_string();
    assert!(rotated["previous_valid_until"].is_string(), "{rotated}");
    let renewed = Ctl::new(&cp).env("SWITCHYARD_ADMIN_TOKEN", &new_token);
    viewer.ok(&["whoami"]);
    renewed.ok(&["whoami"]);
    admin.ok(&["tokens", "revoke", "1"]);
    viewer.fails(5, &["whoami"]);
    renewed.fails(5, &["whoami"]);
    admin.fails(2, &["tokens", "revoke", "1"]);
}
