//! `switchyard-ctl` end to end: the real binary against a real control plane on Postgres, a real gateway and
//! real redis-servers. A whole operator session goes through the CLI only; the API and the gateway are used only
//! to check what it did.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redis::Commands;
use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Ctl, Gateway, RedisServer};

fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write a test file");
    path
}

/// An `$EDITOR` that runs `sed -i EXPR` on the file it is given.
fn sed_editor(dir: &Path, name: &str, expr: &str) -> String {
    let path = write(dir, name, &format!("#!/bin/sh\nsed -i '{expr}' \"$1\"\n"));
    let status = std::process::Command::new("chmod")
        .arg("+x")
        .arg(&path)
        .status()
        .expect("chmod");
    assert!(status.success());
    path.display().to_string()
}

async fn get_via(gateway: &Gateway, secret: &str, key: &str) -> redis::RedisResult<Option<String>> {
    let mut con = redis::Client::open(gateway.url(Some(secret)))?
        .get_multiplexed_async_connection()
        .await?;
    redis::cmd("GET").arg(key).query_async(&mut con).await
}

async fn set_via(
    gateway: &Gateway,
    secret: &str,
    key: &str,
    value: &str,
) -> redis::RedisResult<()> {
    let mut con = redis::Client::open(gateway.url(Some(secret)))?
        .get_multiplexed_async_connection()
        .await?;
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(&mut con)
        .await
}

/// Waits until the gateway serves `secret`'s tenant (it follows the control plane by long-poll).
async fn served(gateway: &Gateway, secret: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while set_via(gateway, secret, "probe", "1").await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the gateway does not serve the tenant"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The global revision the control plane is at.
async fn revision(cp: &ControlPlane) -> i64 {
    cp.expect("GET", "/healthz", None, 200).await["revision"]
        .as_i64()
        .expect("a revision")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_session_through_the_cli() {
    let (old, new) = (RedisServer::start(), RedisServer::start());
    let cp = ControlPlane::start();
    let cache =
        std::env::temp_dir().join(format!("switchyard-ctl-cache-{}.json", std::process::id()));
    let gateway = Gateway::builder().start_with_control_plane(&cp, &cache);
    let ctl = Ctl::new(&cp);
    let dir = ctl.home().to_path_buf();

    ctl.ok(&["tenants", "create", "shop", "--description", "the shop"]);
    ctl.ok(&["resources", "create", "old", &old.url()]);
    ctl.ok(&[
        "resources",
        "create",
        "new",
        &new.url(),
        "--description",
        "the new one",
    ]);
    let issued = ctl.json(&["credentials", "create", "shop"]);
    let secret = issued["secret"]
        .as_str()
        .expect("an issued secret")
        .to_string();
    let route = write(&dir, "route.json", r#"{"type": "single", "target": "old"}"#);
    let set = ctl.ok(&[
        "routes",
        "set",
        "shop",
        "--file",
        route.to_str().unwrap(),
        "--comment",
        "first",
    ]);
    assert!(set.contains("route version 1"), "{set}");

    // The credential the CLI created authenticates through the gateway, on the route the CLI set.
    served(&gateway, &secret).await;
    for i in 0..50 {
        set_via(&gateway, &secret, &format!("k{i}"), &format!("v{i}"))
            .await
            .unwrap();
    }
    assert_eq!(
        old.client().get::<_, Option<String>>("k7").ok().flatten(),
        Some("v7".into())
    );

    // Edit: $EDITOR changes the target; the CLI parses, validates and puts it with If-Match.
    let editor = sed_editor(&dir, "to-new.sh", r#"s/"old"/"new"/"#);
    let edit = Ctl::new(&cp).env("EDITOR", &editor);
    // The keys are on "old": the guard refuses to look for them on "new", unless forced.
    let refused = edit.fails(3, &["routes", "edit", "shop", "--comment", "to new"]);
    assert!(
        refused
            .stderr
            .contains("100.0% of the tenant's keys would no longer be found (exact)")
            && refused.stderr.contains("(keys_would_move)")
            && refused
                .stderr
                .contains("/route: 100.0% of the keys: old -> new"),
        "{refused:?}"
    );
    let edited = edit.ok(&["routes", "edit", "shop", "--comment", "to new", "--force"]);
    assert!(edited.contains("route version 2"), "{edited}");
    assert!(
        edited.contains("keys: 100.0% of the tenant's keys would no longer be found (exact)"),
        "{edited}"
    );
    let current = cp.expect("GET", "/v1/tenants/shop/route", None, 200).await;
    assert_eq!(current["route"]["target"], "new", "{current}");
    assert_eq!(current["comment"], "to new");

    let diff = ctl.ok(&["routes", "diff", "shop", "1", "2"]);
    assert!(
        diff.contains("- target: old") && diff.contains("+ target: new"),
        "{diff}"
    );
    let versions = ctl.ok(&["routes", "versions", "shop"]);
    assert!(
        versions.lines().nth(1).is_some_and(|l| l.starts_with('2')) && versions.contains("first"),
        "{versions}"
    );

    let rolled = ctl.ok(&["routes", "rollback", "shop", "1", "--force"]);
    assert!(rolled.contains("route version 3"), "{rolled}");
    let current = cp.expect("GET", "/v1/tenants/shop/route", None, 200).await;
    assert_eq!(current["route"]["target"], "old", "{current}");

    let explained = ctl.ok(&["routes", "explain", "shop", "k1", "k2"]);
    let rows: Vec<&str> = explained.lines().collect();
    assert!(rows[0].starts_with("KEY") && rows.len() == 3, "{explained}");
    assert!(
        rows[1].starts_with("k1") && rows[1].contains("old") && rows[2].starts_with("k2"),
        "{explained}"
    );

    // --dry-run: checked by the control plane, shown as a diff, nothing written.
    let before = revision(&cp).await;
    let two = write(
        &dir,
        "two.json",
        r#"{"route": {"type": "single", "target": "new"}, "comment": "dry"}"#,
    );
    let two = two.to_str().unwrap();
    let refused = ctl.fails(3, &["routes", "set", "shop", "-f", two, "--dry-run"]);
    assert!(refused.stderr.contains("(keys_would_move)"), "{refused:?}");
    let dry = ctl.ok(&["routes", "set", "shop", "-f", two, "--dry-run", "--force"]);
    assert!(
        dry.contains("nothing was changed")
            && dry.contains("keys: 100.0% of the tenant's keys would no longer be found (exact)")
            && dry.contains("  100.0% old -> new")
            && dry.contains("- target: old")
            && dry.contains("+ target: new"),
        "{dry}"
    );
    let dry = ctl.ok(&["tenants", "delete", "shop", "--dry-run"]);
    assert!(dry.contains("- name: shop"), "{dry}");
    ctl.ok(&[
        "tenants",
        "update",
        "shop",
        "--disabled",
        "true",
        "--dry-run",
    ]);
    ctl.ok(&["resources", "create", "third", &new.url(), "--dry-run"]);
    ctl.ok(&["credentials", "create", "shop", "--dry-run"]);
    let dry_edit = edit.ok(&["routes", "edit", "shop", "--dry-run", "--force"]);
    assert!(dry_edit.contains("+ target: new"), "{dry_edit}");
    // A dry run that the control plane refuses fails as the change would.
    ctl.fails(3, &["resources", "delete", "old", "--dry-run"]);
    assert_eq!(revision(&cp).await, before, "a dry run changed something");
    assert_eq!(
        cp.expect("GET", "/v1/tenants/shop", None, 200).await["disabled"],
        false
    );
    cp.expect("GET", "/v1/resources/third", None, 404).await;
    assert_eq!(
        cp.expect("GET", "/v1/tenants/shop/route", None, 200).await["version"],
        3
    );

    // A migration to `new`, each step through the CLI, backfill and verify watched to their end.
    let created = ctl.json(&["migrations", "create", "shop", "--to", "new"]);
    let id = created["id"].as_i64().expect("a migration id").to_string();
    let watched = ctl.ok(&[
        "migrations",
        "backfill",
        "shop",
        &id,
        "--watch",
        "--interval",
        "0.1",
    ]);
    let last = watched.lines().last().unwrap_or_default();
    assert!(
        last.contains("backfilled") && last.contains("100%") && last.contains("done"),
        "{watched}"
    );
    // Steps dry-run too: refused as they would be, or answered without moving the migration.
    ctl.fails(3, &["migrations", "finish", "shop", &id, "--dry-run"]);
    let abort = ctl.ok(&["migrations", "abort", "shop", &id, "--dry-run"]);
    assert!(
        abort.contains("- backfilled") && abort.contains("+ aborted"),
        "{abort}"
    );
    let path = format!("/v1/tenants/shop/migrations/{id}");
    assert_eq!(
        cp.expect("GET", &path, None, 200).await["state"],
        "backfilled"
    );
    let watched = ctl.ok(&[
        "migrations",
        "verify",
        "shop",
        &id,
        "--watch",
        "--interval",
        "0.1",
    ]);
    assert!(
        watched
            .lines()
            .last()
            .unwrap_or_default()
            .contains("verified"),
        "{watched}"
    );
    ctl.ok(&["migrations", "cutover", "shop", &id]);
    let finished = ctl.ok(&["migrations", "finish", "shop", &id]);
    assert!(finished.contains("finished"), "{finished}");
    let listed = ctl.ok(&["migrations", "list", "shop"]);
    assert!(
        listed
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains("finished")),
        "{listed}"
    );
    assert_eq!(
        new.client().get::<_, Option<String>>("k7").ok().flatten(),
        Some("v7".into())
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let fleet = ctl.json(&["gateways", "list"]);
        if fleet["converged"] == true && fleet["gateways"].as_array().is_some_and(|g| !g.is_empty())
        {
            break;
        }
        assert!(Instant::now() < deadline, "{fleet}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A gateway is forgotten on request (a dry run keeps it); one that is not there is a 404 (exit 2).
    let gateway_id = ctl.json(&["gateways", "list"])["gateways"][0]["id"]
        .as_str()
        .expect("a gateway id")
        .to_string();
    ctl.ok(&["gateways", "delete", &gateway_id, "--dry-run"]);
    assert_eq!(
        ctl.json(&["gateways", "list"])["gateways"][0]["id"],
        gateway_id.as_str()
    );
    ctl.ok(&["gateways", "delete", &gateway_id]);
    ctl.fails(2, &["gateways", "delete", "no-such-gateway"]);
    // Served from `new` now: a key written there directly is what the gateway returns.
    redis::cmd("SET")
        .arg("only-new")
        .arg("yes")
        .query::<()>(&mut new.client())
        .unwrap();
    assert_eq!(
        get_via(&gateway, &secret, "only-new")
            .await
            .unwrap()
            .as_deref(),
        Some("yes")
    );

    let audit = ctl.json(&["audit", "list", "--tenant", "shop"]);
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for action in [
        "tenant.create",
        "credential.create",
        "route.put",
        "route.rollback",
        "migration.finish",
    ] {
        assert!(actions.contains(&action), "{action} not in {actions:?}");
    }
    let table = ctl.ok(&["audit", "list", "--limit", "2"]);
    assert_eq!(table.lines().count(), 3, "{table}");

    // -o json is the API's body unchanged, -o yaml the same value.
    for (args, path) in [
        (
            vec!["tenants", "get", "shop"],
            "/v1/tenants/shop".to_string(),
        ),
        (vec!["tenants", "list"], "/v1/tenants".to_string()),
        (vec!["resources", "list"], "/v1/resources".to_string()),
        (
            vec!["credentials", "list", "shop"],
            "/v1/tenants/shop/credentials".to_string(),
        ),
        (
            vec!["routes", "get", "shop"],
            "/v1/tenants/shop/route".to_string(),
        ),
        (
            vec!["routes", "get", "shop", "--version", "1"],
            "/v1/tenants/shop/route/versions/1".to_string(),
        ),
        (
            vec!["routes", "versions", "shop"],
            "/v1/tenants/shop/route/versions".to_string(),
        ),
        (
            vec!["routes", "explain", "shop", "k1"],
            "/v1/tenants/shop/route/explain?key=k1".to_string(),
        ),
        (
            vec!["migrations", "get", "shop", &id],
            format!("/v1/tenants/shop/migrations/{id}"),
        ),
        (vec!["audit", "list"], "/v1/audit".to_string()),
    ] {
        let api = cp.expect("GET", &path, None, 200).await;
        assert_eq!(ctl.json(&args), api, "{args:?}");
        let yaml = ctl.ok(&[args.as_slice(), &["-o", "yaml"]].concat());
        let parsed: Value =
            serde_yaml_ng::from_str(&yaml).unwrap_or_else(|e| panic!("{args:?}: {e}\n{yaml}"));
        assert_eq!(parsed, api, "{args:?}:\n{yaml}");
    }
    let _ = std::fs::remove_file(cache);
}

#[tokio::test]
async fn exit_codes_follow_the_error_class() {
    let cp = ControlPlane::start();
    let ctl = Ctl::new(&cp);
    ctl.ok(&["tenants", "create", "acme"]);
    let missing = ctl.fails(2, &["tenants", "get", "nope"]);
    assert!(
        missing.stderr.contains("404 Not Found")
            && missing.stderr.contains("no tenant named 'nope'"),
        "{missing:?}"
    );
    let twice = ctl.fails(3, &["tenants", "create", "acme"]);
    assert!(twice.stderr.contains("(tenant_exists)"), "{twice:?}");
    let route = write(
        ctl.home(),
        "route.json",
        r#"{"type": "single", "target": "redis://127.0.0.1:1"}"#,
    );
    let route = route.to_str().unwrap();
    // Nothing listens there: the probe refuses it, unless forced (these are exit codes, not backends).
    let unreachable = ctl.fails(4, &["routes", "set", "acme", "-f", route]);
    assert!(
        unreachable
            .stderr
            .contains("\n  /route/target: redis://127.0.0.1:1: 127.0.0.1:1: connecting:"),
        "{unreachable:?}"
    );
    ctl.ok(&["routes", "set", "acme", "-f", route, "--force"]);
    let stale = ctl.fails(
        3,
        &["routes", "set", "acme", "-f", route, "--if-match", "7"],
    );
    assert!(
        stale.stderr.contains("412 Precondition Failed"),
        "{stale:?}"
    );
    // Each detail of a 422 on its own line, by JSON pointer.
    let patch = write(
        ctl.home(),
        "patch.json",
        r#"{"ip_allow": ["nope", "1.2.3.4/99"]}"#,
    );
    let invalid = ctl.fails(
        4,
        &["tenants", "update", "acme", "-f", patch.to_str().unwrap()],
    );
    assert!(
        invalid
            .stderr
            .contains("\n  /ip_allow/0: 'nope' is not an IP address")
            && invalid
                .stderr
                .contains("\n  /ip_allow/1: '1.2.3.4/99': the prefix length must be 0 to 32"),
        "{invalid:?}"
    );
    ctl.fails(4, &["tenants", "create", "bad name!"]);
    // A table naming an unknown resource is refused before anything is sent.
    let unknown = write(
        ctl.home(),
        "unknown.json",
        r#"{"type": "single", "target": "nowhere"}"#,
    );
    let local = ctl.fails(
        1,
        &["routes", "set", "acme", "-f", unknown.to_str().unwrap()],
    );
    assert!(
        local.stderr.contains("/target: unknown resource 'nowhere'"),
        "{local:?}"
    );
    let denied = ctl.fails(
        5,
        &[
            "tenants",
            "list",
            "--admin-token",
            "not-the-token-0123456789",
        ],
    );
    assert!(denied.stderr.contains("401 Unauthorized"), "{denied:?}");
    let closed = format!("http://127.0.0.1:{}", switchyard_tests::allocate_port());
    ctl.fails(6, &["--url", &closed, "tenants", "list"]);
    // An edit loses a race: someone sets the route while the editor is open. Nothing is overwritten, their change
    // is shown, and the edit is kept.
    let theirs = write(
        ctl.home(),
        "theirs.json",
        r#"{"type": "single", "target": "redis://127.0.0.1:3"}"#,
    );
    let racing = write(
        ctl.home(),
        "racing.sh",
        "#!/bin/sh\n\"$CTL\" routes set acme -f \"$THEIRS\" --force >/dev/null\nsed -i 's/:1\"/:2\"/' \"$1\"\n",
    );
    let chmod = std::process::Command::new("chmod")
        .arg("+x")
        .arg(&racing)
        .status();
    assert!(chmod.is_ok_and(|s| s.success()));
    let raced = Ctl::new(&cp)
        .env("EDITOR", racing.to_str().unwrap())
        .env(
            "CTL",
            switchyard_tests::binary("switchyard-ctl", "SWITCHYARD_CTL_BIN")
                .to_str()
                .unwrap(),
        )
        .env("THEIRS", theirs.to_str().unwrap())
        .fails(3, &["routes", "edit", "acme", "--force"]);
    assert!(
        raced
            .stderr
            .contains("someone else changed the route of 'acme'")
            && raced.stderr.contains("- target: redis://127.0.0.1:1")
            && raced.stderr.contains("+ target: redis://127.0.0.1:3")
            && raced.stderr.contains("your edit is kept in"),
        "{raced:?}"
    );
    let route = cp.expect("GET", "/v1/tenants/acme/route", None, 200).await;
    assert_eq!(route["route"]["target"], "redis://127.0.0.1:3", "{route}");
    // An edit that does not parse is refused here, and kept.
    let typo = sed_editor(ctl.home(), "typo.sh", "s/single/singel/");
    let unparsed = Ctl::new(&cp)
        .env("EDITOR", &typo)
        .fails(1, &["routes", "edit", "acme"]);
    assert!(
        unparsed.stderr.contains("does not parse")
            && unparsed.stderr.contains("unknown variant `singel`"),
        "{unparsed:?}"
    );
    ctl.fails(1, &["tenants", "list", "--no-such-flag"]);
    ctl.fails(1, &["--profile", "nope", "tenants", "list"]);
    assert_eq!(
        cp.expect("GET", "/v1/tenants/acme/route", None, 200).await["version"],
        2
    );
}

#[tokio::test]
async fn profiles_token_files_and_global_flags() {
    let cp = ControlPlane::start();
    let ctl = Ctl::bare();
    let home = ctl.home().to_path_buf();
    write(
        &home,
        "admin.token",
        &format!("{}\n", switchyard_tests::ADMIN_TOKEN),
    );
    // Without any setting the CLI says how to give a token.
    let none = ctl.fails(1, &["tenants", "list"]);
    assert!(
        none.stderr.contains("SWITCHYARD_ADMIN_TOKEN_FILE"),
        "{none:?}"
    );

    // The default profile file, its default profile, and a token file relative to it.
    let config = home.join(".config/switchyard");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("admin.token"), switchyard_tests::ADMIN_TOKEN).unwrap();
    let profiles = json!({
        "default": "local",
        "profiles": {
            "local": {"url": cp.url(), "admin_token_file": "admin.token"},
            "elsewhere": {"url": "http://127.0.0.1:1", "admin_token_file": "admin.token"}
        }
    });
    std::fs::write(config.join("ctl.json"), profiles.to_string()).unwrap();
    ctl.ok(&["tenants", "create", "from-profile"]);
    // Flags and environment variables win over the profile; --profile picks another.
    ctl.fails(6, &["tenants", "list", "--profile", "elsewhere"]);
    let flagged = ctl.ok(&[
        "tenants",
        "list",
        "--profile",
        "elsewhere",
        "--url",
        &cp.url(),
    ]);
    assert!(flagged.contains("from-profile"), "{flagged}");
    let missing = ctl.fails(1, &["tenants", "list", "--profile", "staging"]);
    assert!(
        missing.stderr.contains("no profile 'staging'"),
        "{missing:?}"
    );

    // SWITCHYARD_ADMIN_TOKEN_FILE, and global flags after the subcommand.
    let token_file = home.join("admin.token");
    let by_env = Ctl::bare()
        .env("SWITCHYARD_URL", &cp.url())
        .env("SWITCHYARD_ADMIN_TOKEN_FILE", token_file.to_str().unwrap());
    assert_eq!(
        by_env.json(&["tenants", "get", "from-profile"])["name"],
        "from-profile"
    );
    let both = by_env.fails(1, &["tenants", "list", "--admin-token", "x"]);
    assert!(both.stderr.contains("give one"), "{both:?}");
    let after = Ctl::bare().ok(&[
        "tenants",
        "get",
        "from-profile",
        "--url",
        &cp.url(),
        "--admin-token-file",
        token_file.to_str().unwrap(),
        "-o",
        "yaml",
    ]);
    assert!(after.contains("name: from-profile"), "{after}");
}

#[test]
fn help_and_completions() {
    let ctl = Ctl::bare();
    let help = ctl.ok(&["--help"]);
    assert!(
        help.contains("command line for Switchyard") || help.contains("from the command line"),
        "{help}"
    );
    assert!(help.contains("Exit codes:"), "{help}");
    for command in [
        vec!["tenants"],
        vec!["routes"],
        vec!["health"],
        vec!["tenants", "list"],
        vec!["tenants", "create"],
        vec!["credentials", "create"],
        vec!["resources", "create"],
        vec!["routes", "edit"],
        vec!["routes", "explain"],
        vec!["migrations", "create"],
        vec!["audit", "list"],
    ] {
        let help = ctl.ok(&[command.as_slice(), &["--help"]].concat());
        assert!(help.contains("Example"), "{command:?}: {help}");
    }
    for shell in ["bash", "zsh", "fish"] {
        let script = ctl.ok(&["completion", shell]);
        assert!(
            script.contains("switchyard-ctl") && script.contains("migrations"),
            "{shell}"
        );
    }
}

/// `completion bash | head`: the reader stops early, and that is no error (no panic, nothing on stderr, exit 0).
#[test]
fn a_completion_script_read_in_part_is_no_error() {
    let bin = switchyard_tests::binary("switchyard-ctl", "SWITCHYARD_CTL_BIN");
    let output = std::process::Command::new("bash")
        .arg("-c")
        .arg(r#""$0" completion bash | head -1; exit "${PIPESTATUS[0]}""#)
        .arg(&bin)
        .output()
        .expect("bash");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert_eq!(stderr, "");
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 1);
}

/// A tenant's near cache from the CLI: set whole with its flags, refused with the field's path when out of
/// bounds (exit 4), removed with `--no-near-cache`.
#[tokio::test]
async fn a_near_cache_is_set_and_removed_from_the_cli() {
    let cp = ControlPlane::start();
    let ctl = Ctl::new(&cp);
    ctl.ok(&[
        "tenants",
        "create",
        "shop",
        "--near-cache-max-bytes",
        "65536",
    ]);
    let shown = ctl.json(&["tenants", "get", "shop"]);
    assert_eq!(shown["near_cache"], json!({"max_bytes": 65536}));
    ctl.ok(&[
        "tenants",
        "update",
        "shop",
        "--near-cache-max-bytes",
        "1048576",
        "--near-cache-keys",
        "all",
        "--near-cache-max-value-bytes",
        "512",
    ]);
    let shown = ctl.json(&["tenants", "get", "shop"]);
    assert_eq!(
        shown["near_cache"],
        json!({"max_bytes": 1048576, "keys": "all", "max_value_bytes": 512})
    );
    let refused = ctl.fails(
        4,
        &[
            "tenants",
            "update",
            "shop",
            "--near-cache-max-bytes",
            "100",
            "--near-cache-max-value-bytes",
            "200",
        ],
    );
    assert!(
        refused.stderr.contains("/near_cache/max_value_bytes"),
        "{refused:?}"
    );
    ctl.ok(&["tenants", "update", "shop", "--no-near-cache"]);
    let shown = ctl.json(&["tenants", "get", "shop"]);
    assert!(shown.get("near_cache").is_none(), "{shown}");
}
