//! Migration readiness end to end: a real control plane on Postgres, a real gateway following it, a tenant on a
//! standalone Redis migrating to a 3-master Redis Cluster. What the tenant's clients send during double-write is
//! checked by the gateway against the cluster's slots and summed by the control plane; `cutover` is refused
//! (409 `not_ready`) while commands were counted that would fail there, unless forced.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_schemas::placement::{crc16, hash_tag};
use switchyard_tests::{ControlPlane, Ctl, Gateway, RedisCluster, RedisServer};

/// One tenant ("acme") on `old`, served by one gateway that reports every 200 ms.
struct Stack {
    cp: ControlPlane,
    gateway: Gateway,
    secret: String,
    cache: PathBuf,
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.cache);
    }
}

impl Stack {
    async fn start(old: &RedisServer, tag: &str) -> Stack {
        let cp = ControlPlane::start();
        let secret = cp
            .create_tenant("acme", json!({"type": "single", "target": old.url()}))
            .await;
        let cache = std::env::temp_dir().join(format!(
            "switchyard-readiness-{tag}-{}.json",
            std::process::id()
        ));
        let gateway = Gateway::builder()
            .arg("--tracking-report-interval-ms")
            .arg("200")
            .start_with_control_plane(&cp, &cache);
        Stack {
            cp,
            gateway,
            secret,
            cache,
        }
    }

    fn path(&self, id: i64) -> String {
        format!("/v1/tenants/acme/migrations/{id}")
    }

    /// Starts migrating to `cluster` and waits until the gateway serves the double-write route.
    async fn migrate_to(&self, cluster: &RedisCluster) -> i64 {
        self.migrate_to_url(&cluster.url()).await
    }

    /// Starts migrating to the resource at `url` and waits until the gateway serves the double-write route.
    async fn migrate_to_url(&self, url: &str) -> i64 {
        let created = self
            .cp
            .expect(
                "POST",
                "/v1/tenants/acme/migrations",
                Some(json!({"to": url, "ack": "primary"})),
                201,
            )
            .await;
        let id = created["id"].as_i64().unwrap();
        self.wait(id, "converged", |m| m["converged"] == true).await;
        id
    }

    async fn readiness(&self, id: i64) -> Value {
        let path = format!("{}/readiness", self.path(id));
        self.cp.expect("GET", &path, None, 200).await
    }

    /// Polls the migration (or, with `what` starting with "readiness", its readiness) until `done`.
    async fn wait(&self, id: i64, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let body = match what.starts_with("readiness") {
                true => self.readiness(id).await,
                false => self.cp.expect("GET", &self.path(id), None, 200).await,
            };
            if done(&body) {
                return body;
            }
            assert!(Instant::now() < deadline, "never {what}: {body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Backfill and verify, then a cutover refused as not ready: its path and the refusal.
    async fn refused_cutover(&self, id: i64) -> (String, Value) {
        self.backfill_and_verify(id).await;
        let cutover = format!("{}/cutover", self.path(id));
        let (status, refused) = self.cp.call("POST", &cutover, None).await;
        assert_eq!(
            (status, &refused["error"]),
            (409, &json!("not_ready")),
            "{refused}"
        );
        (cutover, refused)
    }

    /// Backfill and verify (nothing much to copy), up to `verified`, where cutover is allowed.
    async fn backfill_and_verify(&self, id: i64) {
        for (action, state) in [("backfill", "backfilled"), ("verify", "verified")] {
            let path = format!("{}/{action}", self.path(id));
            self.cp.expect("POST", &path, None, 200).await;
            self.wait(id, state, |m| m["state"] == state).await;
        }
    }
}

fn slot(key: &str) -> u16 {
    crc16(hash_tag(key.as_bytes())) % 16384
}

/// Cross-slot MULTI/EXEC, MGET and EVAL during double-write are counted with patterns of their keys; cutover is
/// refused with the counts until forced, through the API and `switchyard-ctl`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_slot_traffic_makes_the_migration_not_ready_until_forced() {
    let old = RedisServer::start();
    let cluster = RedisCluster::start(3, 0, None);
    let stack = Stack::start(&old, "cross").await;
    let id = stack.migrate_to(&cluster).await;
    assert_ne!(
        slot("user:1001"),
        slot("user:2002"),
        "the test needs two slots"
    );

    let mut client = stack.gateway.client(Some(&stack.secret)).await;
    for _ in 0..3 {
        // redis-py's default pipeline: MULTI/EXEC. The double-write route already places keys as the cluster
        // does, so the client sees the error it would get after the move.
        let exec: redis::RedisResult<()> = redis::pipe()
            .atomic()
            .set("user:1001", "a")
            .set("user:2002", "b")
            .query_async(&mut client)
            .await;
        assert!(exec.is_err(), "a cross-slot transaction fails on the route");
        let values: Vec<Option<String>> = redis::cmd("MGET")
            .arg("user:1001")
            .arg("user:2002")
            .query_async(&mut client)
            .await
            .unwrap();
        assert_eq!(values.len(), 2, "MGET is split by the gateway");
    }
    let eval: redis::RedisResult<Value> = redis::cmd("EVAL")
        .arg("return 1")
        .arg(2)
        .arg("user:1001")
        .arg("user:2002")
        .query_async(&mut client)
        .await
        .map(|_: i64| Value::Null);
    assert!(eval.is_err(), "a cross-slot script fails on the route");

    let readiness = stack
        .wait(id, "readiness counted", |r| {
            r["counts"]["transactions"] == 3
                && r["counts"]["split"] == 3
                && r["counts"]["scripts"] == 1
        })
        .await;
    assert_eq!(readiness["ready"], false, "{readiness}");
    assert!(readiness["checked"].as_u64().unwrap() >= 10, "{readiness}");
    assert_eq!(readiness["gateways"].as_array().unwrap().len(), 1);
    let examples = readiness["examples"].as_array().unwrap();
    let example = |kind: &str| {
        examples
            .iter()
            .find(|e| e["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} example: {readiness}"))
            .clone()
    };
    let transaction = example("transaction");
    assert_eq!(
        (
            &transaction["command"],
            &transaction["keys"],
            &transaction["count"]
        ),
        (&json!("set"), &json!(["user:#", "user:#"]), &json!(3))
    );
    assert_eq!(example("split")["command"], "mget");
    assert_eq!(example("script")["command"], "eval");
    let text = serde_json::to_string(&readiness).unwrap();
    assert!(!text.contains("1001"), "no key leaves as it is: {text}");

    let ctl = Ctl::new(&stack.cp);
    let shown = ctl.ok(&["migrations", "get", "acme", &id.to_string()]);
    assert!(
        shown.contains("NOT READY") && shown.contains("transactions 3"),
        "{shown}"
    );
    assert!(shown.contains("user:#"), "{shown}");

    let (_, refused) = stack.refused_cutover(id).await;
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("3 transactions") && message.contains("1 scripts"),
        "{message}"
    );
    assert!(
        !refused["details"].as_array().unwrap().is_empty(),
        "{refused}"
    );
    let run = ctl.run(&["migrations", "cutover", "acme", &id.to_string()]);
    assert_ne!(run.code, 0, "{run:?}");
    assert!(
        run.stderr.contains("not_ready") || run.stderr.contains("not ready"),
        "{run:?}"
    );
    assert_eq!(
        stack.cp.expect("GET", &stack.path(id), None, 200).await["state"],
        "verified"
    );

    ctl.ok(&["migrations", "cutover", "acme", &id.to_string(), "--force"]);
    stack
        .wait(id, "cut over", |m| m["state"] == "cut_over")
        .await;
    let audit = stack
        .cp
        .expect("GET", "/v1/audit?tenant=acme", None, 200)
        .await;
    let forced = audit.to_string();
    assert!(forced.contains("\"forced\":true"), "{audit}");
}

/// A tenant whose multi-key commands and transactions keep to one slot (hash tags) is ready, and its cutover is
/// not refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_slot_traffic_is_ready_and_cuts_over() {
    let old = RedisServer::start();
    let cluster = RedisCluster::start(3, 0, None);
    let stack = Stack::start(&old, "tagged").await;
    let id = stack.migrate_to(&cluster).await;

    let mut client = stack.gateway.client(Some(&stack.secret)).await;
    for i in 0..5 {
        let (a, b) = (format!("{{user:{i}}}:cart"), format!("{{user:{i}}}:orders"));
        let _: () = redis::pipe()
            .atomic()
            .set(&a, "1")
            .set(&b, "2")
            .query_async(&mut client)
            .await
            .unwrap();
        let _: Vec<String> = redis::cmd("MGET")
            .arg(&a)
            .arg(&b)
            .query_async(&mut client)
            .await
            .unwrap();
    }
    // 5 × (two queued SETs, one MGET).
    let readiness = stack
        .wait(id, "readiness checked", |r| {
            r["checked"].as_u64() >= Some(15)
        })
        .await;
    assert_eq!(readiness["ready"], true, "{readiness}");
    assert_eq!(
        readiness["counts"],
        json!({"cross_slot": 0, "transactions": 0, "scripts": 0, "split": 0, "unsupported": 0})
    );
    assert_eq!(readiness["examples"], json!([]));

    stack.backfill_and_verify(id).await;
    let cutover = format!("{}/cutover", stack.path(id));
    let cut = stack.cp.expect("POST", &cutover, None, 200).await;
    assert_eq!(cut["state"], "cut_over", "{cut}");
}

/// `WATCH` counts as the destination would answer it: watched keys in two slots there are a cross-slot command, and
/// a transaction must share its watched keys' slot, so one whose commands keep to one slot apart from them is
/// counted as a transaction that fails there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_keys_count_with_the_transaction_they_guard() {
    let old = RedisServer::start();
    let cluster = RedisCluster::start(3, 0, None);
    let stack = Stack::start(&old, "watch").await;
    let id = stack.migrate_to(&cluster).await;
    assert_ne!(slot("user:1001"), slot("user:2002"));

    let mut client = stack.gateway.client(Some(&stack.secret)).await;
    let watched: redis::RedisResult<()> = redis::cmd("WATCH")
        .arg("user:1001")
        .arg("user:2002")
        .query_async(&mut client)
        .await;
    assert!(watched.is_err(), "cross-slot WATCH fails on the route");
    let () = redis::cmd("WATCH")
        .arg("user:1001")
        .query_async(&mut client)
        .await
        .unwrap();
    let exec: redis::RedisResult<()> = redis::pipe()
        .atomic()
        .set("user:2002", "b")
        .query_async(&mut client)
        .await;
    assert!(
        exec.is_err(),
        "a transaction away from its watched key fails"
    );

    let readiness = stack
        .wait(id, "readiness counted", |r| {
            r["counts"]["cross_slot"] == 1 && r["counts"]["transactions"] == 1
        })
        .await;
    assert_eq!(readiness["ready"], false, "{readiness}");
    let commands: Vec<&Value> = readiness["examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["command"])
        .collect();
    assert_eq!(commands.len(), 2, "{readiness}");
    assert!(commands.contains(&&json!("watch")), "{readiness}");
}

/// A command the destination does not know (here renamed there, as `rename-command` does; an older Redis or a
/// missing module looks the same to `COMMAND INFO`) is counted as `unsupported` with its calls, and cutover is
/// refused until forced. The destination is one plain Redis: nothing is checked for slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_the_destination_lacks_make_the_migration_not_ready() {
    let old = RedisServer::start();
    let new = RedisServer::builder()
        .arg("--rename-command")
        .arg("strlen")
        .arg("strlen-renamed")
        .start();
    let stack = Stack::start(&old, "lacks").await;
    let id = stack.migrate_to_url(&new.url()).await;

    let mut client = stack.gateway.client(Some(&stack.secret)).await;
    let () = redis::cmd("SET")
        .arg("user:1")
        .arg("abc")
        .query_async(&mut client)
        .await
        .unwrap();
    for _ in 0..3 {
        let length: i64 = redis::cmd("STRLEN")
            .arg("user:1")
            .query_async(&mut client)
            .await
            .unwrap();
        assert_eq!(length, 3, "old still answers the read");
    }

    let readiness = stack
        .wait(id, "readiness counted", |r| r["counts"]["unsupported"] == 3)
        .await;
    assert_eq!(
        (&readiness["ready"], &readiness["commands_checked"]),
        (&json!(false), &json!(true)),
        "{readiness}"
    );
    assert_eq!(readiness["checked"], 0, "a plain Redis: no slot to check");
    assert_eq!(
        readiness["examples"],
        json!([{"kind": "unsupported", "command": "strlen", "keys": [], "count": 3}]),
        "only the unknown command: set is known there"
    );
    let shown = Ctl::new(&stack.cp).ok(&["migrations", "readiness", "acme", &id.to_string()]);
    assert!(
        shown.contains("unsupported 3") && shown.contains("strlen"),
        "{shown}"
    );

    let (cutover, refused) = stack.refused_cutover(id).await;
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("3 calls of commands"), "{message}");
    let forced = format!("{cutover}?force=true");
    let cut = stack.cp.expect("POST", &forced, None, 200).await;
    assert_eq!(cut["state"], "cut_over", "{cut}");
}

/// A destination that cannot be asked leaves the commands unchecked, says why, and holds nothing against the
/// migration: readiness does not block on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_that_cannot_be_asked_leaves_commands_unchecked() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let stack = Stack::start(&old, "unasked").await;
    let id = stack.migrate_to_url(&new.url()).await;
    let mut client = stack.gateway.client(Some(&stack.secret)).await;
    let _: Option<i64> = redis::cmd("STRLEN")
        .arg("user:1")
        .query_async(&mut client)
        .await
        .unwrap();
    let readiness = stack
        .wait(id, "readiness reported", |r| {
            r["commands_checked"] == true && !r["gateways"].as_array().unwrap().is_empty()
        })
        .await;
    assert_eq!(
        (&readiness["ready"], &readiness["counts"]["unsupported"]),
        (&json!(true), &json!(0)),
        "{readiness}"
    );

    let port = new.port();
    drop(new);
    let readiness = stack.readiness(id).await;
    assert_eq!(
        (&readiness["ready"], &readiness["commands_checked"]),
        (&json!(true), &json!(false)),
        "{readiness}"
    );
    let reason = readiness["commands_unchecked"].as_str().unwrap();
    assert!(reason.contains(&port.to_string()), "{reason}");
}
