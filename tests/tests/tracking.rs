//! Slow log, big keys and hot keys end to end: real Redis servers, a real control plane on Postgres and a real
//! gateway reporting to it, real clients.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Gateway, RawClient, RedisServer};

/// Report interval the tests run with: short, so that "within one interval" is quick to check.
const INTERVAL_MS: u64 = 300;
/// How long a wait for reports may take before the test fails: a few intervals on an idle machine, far more on
/// a busy one (a poll returns as soon as what it waits for is there).
const REPORTS_WITHIN: Duration = Duration::from_secs(20);

/// A Lua script that runs for `ms` milliseconds on the server (TIME is allowed in scripts since Redis 7).
fn busy_script(ms: u64) -> String {
    format!(
        "local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] \
         repeat local n = redis.call('TIME') until n[1] * 1000000 + n[2] - s >= {} return 1",
        ms * 1000
    )
}

struct Stack {
    cp: ControlPlane,
    gateway: Gateway,
    cache: std::path::PathBuf,
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.cache);
    }
}

fn start_stack(tag: &str) -> Stack {
    start_stack_every(tag, INTERVAL_MS)
}

/// A stack whose gateway reports every `interval_ms`.
fn start_stack_every(tag: &str, interval_ms: u64) -> Stack {
    let cp = ControlPlane::start();
    let cache = std::env::temp_dir().join(format!(
        "switchyard-tracking-{tag}-{}.json",
        std::process::id()
    ));
    // One request in 100 sampled (the default is 1 in 1000): the counts the tests check are then estimated
    // from some 100 samples, not 10.
    let gateway = Gateway::builder()
        .arg("--tracking-report-interval-ms")
        .arg(interval_ms.to_string())
        .arg("--hot-key-sample")
        .arg("100")
        .start_with_control_plane(&cp, &cache);
    Stack { cp, gateway, cache }
}

async fn connect(
    gateway: &Gateway,
    tenant: &str,
    secret: &str,
) -> redis::aio::MultiplexedConnection {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let url = format!("redis://{tenant}:{secret}@127.0.0.1:{}", gateway.port());
        let client = redis::Client::open(url).expect("a client");
        match client.get_multiplexed_async_connection().await {
            Ok(mut con) => {
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut con).await;
                if pong.is_ok() {
                    return con;
                }
            }
            Err(e) => assert!(Instant::now() < deadline, "cannot connect: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The tenant's slow log on the control plane, once it has an entry.
async fn slowlog_of(cp: &ControlPlane, tenant: &str) -> Value {
    let path = format!("/v1/tenants/{tenant}/slowlog");
    cp.poll(&path, Duration::from_secs(5), |answer| {
        answer["entries"].as_array().is_some_and(|e| !e.is_empty())
    })
    .await
}

/// The tenant's big keys on the control plane, once there are `count` of them.
async fn big_keys(cp: &ControlPlane, tenant: &str, count: usize) -> Value {
    let path = format!("/v1/tenants/{tenant}/big-keys");
    cp.poll(&path, REPORTS_WITHIN, |answer| {
        answer["keys"]
            .as_array()
            .is_some_and(|keys| keys.len() == count)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_and_a_big_value_reach_the_control_plane() {
    let redis = RedisServer::start();
    let stack = start_stack("keys");
    let cp = &stack.cp;
    let secret = cp
        .create_tenant("acme", json!({"type": "single", "target": redis.url()}))
        .await;
    let mut con = connect(&stack.gateway, "acme", &secret).await;

    // 10,000 GETs of one key among 1,000 others, pipelined (the direct path, in runs).
    let mut pipe = redis::pipe();
    for i in 0..11_000 {
        match i % 11 {
            0 => pipe.cmd("GET").arg(format!("cold:{}", i / 11)),
            _ => pipe.cmd("GET").arg("hot"),
        };
    }
    let _: Vec<Option<String>> = pipe.query_async(&mut con).await.expect("the GETs");
    let sent = Instant::now();
    // A report made while the pipeline was still being answered counts only its first GETs: the one after it
    // counts them all.
    let hot = cp
        .poll(
            "/v1/tenants/acme/hot-keys",
            Duration::from_millis(INTERVAL_MS * 2 + 2000),
            |answer| {
                answer["keys"][0]["key"] == "hot"
                    && answer["keys"][0]["count"]
                        .as_u64()
                        .is_some_and(|count| count >= 5_000)
            },
        )
        .await;
    // One report interval, and the time the report and the poll take.
    assert!(
        sent.elapsed() < Duration::from_millis(INTERVAL_MS + 1500),
        "{:?}",
        sent.elapsed()
    );
    let keys = hot["keys"].as_array().expect("keys");
    let top = keys[0]["count"].as_u64().expect("a count");
    assert!((5_000..=20_000).contains(&top), "{hot}");
    // The view across tenants names it with its tenant.
    let fleet = cp.expect("GET", "/v1/hot-keys?limit=3", None, 200).await;
    assert_eq!(
        (
            &fleet["keys"][0]["tenant"],
            &fleet["keys"][0]["key"],
            &fleet["keys"][0]["count"]
        ),
        (&json!("acme"), &json!("hot"), &json!(top)),
        "{fleet}"
    );
    assert!(
        keys.len() > 1 && keys[1]["count"].as_u64() < Some(top / 10),
        "{hot}"
    );

    // A key read only as the second of three in MGETs: each sampled MGET counts one of its keys in turn, three
    // times, so 3,000 MGETs show it touched some 3,000 times.
    let mut pipe = redis::pipe();
    for i in 0..3_000 {
        pipe.cmd("MGET")
            .arg(format!("left:{i}"))
            .arg("warm")
            .arg(format!("right:{i}"));
    }
    let _: Vec<Vec<Option<String>>> = pipe.query_async(&mut con).await.expect("the MGETs");
    let count_of = |answer: &Value, key: &str| {
        answer["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|k| k["key"] == key)
            .and_then(|k| k["count"].as_u64())
    };
    let warm = cp
        .poll(
            "/v1/tenants/acme/hot-keys",
            Duration::from_millis(INTERVAL_MS * 2 + 2000),
            |answer| count_of(answer, "warm").is_some(),
        )
        .await;
    let count = count_of(&warm, "warm").unwrap_or_default();
    assert!((2_000..=4_000).contains(&count), "{warm}");

    // A 1 MB value, written and read: the SET's request and the GET's reply are big.
    let value = "v".repeat(1 << 20);
    let () = redis::cmd("SET")
        .arg("big")
        .arg(&value)
        .query_async(&mut con)
        .await
        .expect("SET");
    let read: String = redis::cmd("GET")
        .arg("big")
        .query_async(&mut con)
        .await
        .expect("GET");
    assert_eq!(read.len(), value.len());
    let big = big_keys(cp, "acme", 2).await;
    for (command, direction) in [("set", "request"), ("get", "reply")] {
        let found =
            big["keys"].as_array().into_iter().flatten().find(|k| {
                k["key"] == "big" && k["command"] == command && k["direction"] == direction
            });
        let found = found.unwrap_or_else(|| panic!("no {command} {direction} in {big}"));
        assert!(found["bytes"].as_u64() > Some(1 << 20), "{found}");
        assert!(
            found["gateway"].as_str().is_some_and(|g| !g.is_empty()),
            "{found}"
        );
    }
    // The gateway's admin port shows its last report.
    let (status, body) = stack.gateway.admin_get("/tracking");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"tenant\":\"acme\""), "{body}");
    // Keys are tenant data: the gateway's token does not read them.
    let status = reqwest::Client::new()
        .get(format!("{}/v1/tenants/acme/hot-keys", cp.url()))
        .bearer_auth(cp.gateway_token())
        .send()
        .await
        .expect("a reply")
        .status()
        .as_u16();
    assert_eq!(status, 403, "a valid token of the wrong kind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_script_is_in_its_tenants_slowlog_only() {
    let redis = RedisServer::start();
    let stack = start_stack("slowlog");
    let cp = &stack.cp;
    let route = json!({"type": "single", "target": redis.url()});
    let secret = cp.create_tenant("acme", route.clone()).await;
    let other_secret = cp.create_tenant("other", route).await;
    let mut con = connect(&stack.gateway, "acme", &secret).await;
    let mut other = connect(&stack.gateway, "other", &other_secret).await;

    let len = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        async move {
            let len: i64 = redis::cmd("SLOWLOG")
                .arg("LEN")
                .query_async(&mut con)
                .await
                .expect("SLOWLOG LEN");
            len
        }
    };
    let ok: String = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut con)
        .await
        .expect("RESET");
    assert_eq!(ok, "OK");
    assert_eq!(len(&mut con).await, 0);
    let () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("slowpoke")
        .query_async(&mut con)
        .await
        .expect("SETNAME");
    let script = busy_script(200);
    let one: i64 = redis::cmd("EVAL")
        .arg(&script)
        .arg(0)
        .query_async(&mut con)
        .await
        .expect("EVAL");
    assert_eq!(one, 1);
    assert_eq!(len(&mut con).await, 1);
    let info: String = redis::cmd("CLIENT")
        .arg("INFO")
        .query_async(&mut con)
        .await
        .expect("INFO");
    let addr = info
        .split(' ')
        .find_map(|field| field.strip_prefix("addr="))
        .expect("addr=")
        .to_string();

    // Redis' format: id, timestamp, duration in µs, arguments, client address, client name.
    let entries: Vec<(i64, i64, i64, Vec<String>, String, String)> = redis::cmd("SLOWLOG")
        .arg("GET")
        .query_async(&mut con)
        .await
        .expect("SLOWLOG GET");
    assert_eq!(entries.len(), 1);
    let (id, timestamp, duration, args, client, name) = &entries[0];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs() as i64;
    assert_eq!(*id, 0);
    assert!((now - 5..=now).contains(timestamp), "{timestamp}");
    assert!((200_000..5_000_000).contains(duration), "{duration}");
    // Arguments are cut at 128 bytes, as Redis cuts them.
    let cut = format!("{}... ({} more bytes)", &script[..128], script.len() - 128);
    assert_eq!(args, &["EVAL".to_string(), cut, "0".to_string()]);
    assert_eq!(client, &addr);
    assert_eq!(name, "slowpoke");

    // The same in RESP3: arrays and integers, as Redis writes them.
    let mut raw = RawClient::connect(stack.gateway.port());
    let hello = raw.request(&[b"HELLO", b"3", b"AUTH", b"acme", secret.as_bytes()]);
    assert!(
        hello.starts_with(b"%7\r\n"),
        "{}",
        String::from_utf8_lossy(&hello)
    );
    let reply = raw.request(&[b"SLOWLOG", b"GET", b"1"]);
    assert!(
        reply.starts_with(b"*1\r\n*6\r\n:0\r\n:"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    assert!(
        reply.ends_with(b"$8\r\nslowpoke\r\n"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    assert_eq!(
        raw.request(&[b"SLOWLOG", b"GET", b"-2"]),
        b"-ERR count should be greater than or equal to -1\r\n"
    );

    // Another tenant never sees it, on the gateway or through its own slow log.
    assert_eq!(len(&mut other).await, 0);
    let none: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(&mut other)
        .await
        .expect("SLOWLOG GET -1");
    assert!(none.is_empty());

    // The control plane has it from the gateway's report, for that tenant only.
    let slowlog = slowlog_of(cp, "acme").await;
    let entry = &slowlog["entries"][0];
    assert_eq!(entry["args"][0], "EVAL", "{slowlog}");
    assert_eq!(entry["client_name"], "slowpoke");
    assert!(entry["duration_us"].as_u64() >= Some(200_000), "{entry}");
    tokio::time::sleep(Duration::from_millis(INTERVAL_MS * 2)).await;
    let theirs = cp
        .expect("GET", "/v1/tenants/other/slowlog", None, 200)
        .await;
    assert_eq!(theirs["entries"], json!([]), "{theirs}");

    // RESET empties the tenant's log on the gateway; ids go on (as Redis').
    let ok: String = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut con)
        .await
        .expect("RESET");
    assert_eq!(ok, "OK");
    assert_eq!(len(&mut con).await, 0);
    let _: i64 = redis::cmd("EVAL")
        .arg(&script)
        .arg(0)
        .query_async(&mut con)
        .await
        .expect("EVAL");
    let entries: Vec<(i64, i64, i64, Vec<String>, String, String)> = redis::cmd("SLOWLOG")
        .arg("GET")
        .query_async(&mut con)
        .await
        .expect("SLOWLOG GET");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].0, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_read_on_the_direct_path_shows_the_key_as_the_tenant_sent_it() {
    let redis = RedisServer::start();
    let stack = start_stack("direct");
    let cp = &stack.cp;
    let route = json!({"type": "single", "target": redis.url()});
    let secret = cp
        .create_tenant_with(json!({"name": "ns", "namespace": "ns:"}), route)
        .await;
    let _ = connect(&stack.gateway, "ns", &secret).await; // the gateway serves the tenant
    let mut client = RawClient::connect(stack.gateway.port());
    client.roundtrip(format!("AUTH ns {secret}\r\n").as_bytes(), b"+OK\r\n");
    // A GET forwarded untouched (the direct path, keys written under ns:) that its backend answers late.
    redis.freeze();
    client.send_command(&[b"GET", b"user:1"]);
    std::thread::sleep(Duration::from_millis(50));
    redis.thaw();
    assert_eq!(client.read_reply(), b"$-1\r\n");
    let reply = client.request(&[b"SLOWLOG", b"GET"]);
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("*1\r\n*6\r\n:0\r\n"), "{text}");
    assert!(
        text.contains("*2\r\n$3\r\nGET\r\n$6\r\nuser:1\r\n"),
        "{text}"
    );
    let slowlog = slowlog_of(cp, "ns").await;
    let entry = &slowlog["entries"][0];
    assert_eq!(entry["args"], json!(["GET", "user:1"]), "{slowlog}");
    assert_eq!(entry["key"], "user:1", "{slowlog}");
    // The resource the key maps to, as the gateway's GET /tenants names it.
    let resource = format!("127.0.0.1:{}/0", redis.port());
    assert_eq!(entry["backend"], json!(resource), "{slowlog}");
    assert!(entry["duration_us"].as_u64() >= Some(40_000), "{entry}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_own_thresholds_replace_the_gateways_for_it_alone() {
    let redis = RedisServer::start();
    let stack = start_stack("thresholds");
    let cp = &stack.cp;
    let route = json!({"type": "single", "target": redis.url()});
    let policy =
        json!({"big_key_bytes": 1000, "big_key_elements": 50, "hot_key_threshold": 1_000_000});
    let secret = cp
        .create_tenant_with(
            json!({"name": "small", "namespace": "s:", "tracking": policy}),
            route.clone(),
        )
        .await;
    let plain_secret = cp
        .create_tenant_with(json!({"name": "plain", "namespace": "p:"}), route)
        .await;
    // The same requests from each: a 2 KB value written, a list of 100 read whole, 2,000 reads of one key.
    for (tenant, secret) in [("small", &secret), ("plain", &plain_secret)] {
        let mut con = connect(&stack.gateway, tenant, secret).await;
        let () = redis::cmd("SET")
            .arg("value")
            .arg("v".repeat(2000))
            .query_async(&mut con)
            .await
            .expect("SET");
        let _: i64 = redis::cmd("RPUSH")
            .arg("list")
            .arg((0..100).collect::<Vec<i32>>())
            .query_async(&mut con)
            .await
            .expect("RPUSH");
        let read: Vec<String> = redis::cmd("LRANGE")
            .arg("list")
            .arg(0)
            .arg(-1)
            .query_async(&mut con)
            .await
            .expect("LRANGE");
        assert_eq!(read.len(), 100);
        let mut pipe = redis::pipe();
        for _ in 0..2_000 {
            pipe.cmd("GET").arg("hot");
        }
        let _: Vec<Option<String>> = pipe.query_async(&mut con).await.expect("the GETs");
    }
    let big = big_keys(cp, "small", 2).await;
    let keys = big["keys"].as_array().expect("keys");
    let found = |command: &str| {
        keys.iter()
            .find(|k| k["command"] == command)
            .unwrap_or_else(|| panic!("no {command} in {big}"))
    };
    assert_eq!(found("set")["direction"], "request", "{big}");
    assert_eq!(found("set")["key"], "value", "{big}");
    assert_eq!(found("lrange")["elements"], 100, "{big}");
    assert_eq!(found("lrange")["key"], "list", "{big}");
    // The other tenant's were under the gateway's thresholds; the first tenant's reads under its own rate.
    let hot = cp
        .poll(
            "/v1/tenants/plain/hot-keys",
            REPORTS_WITHIN,
            // The reads may straddle two reports: wait for the window that holds them all.
            |answer| {
                answer["keys"][0]["key"] == "hot"
                    && answer["keys"][0]["count"].as_u64() >= Some(1000)
            },
        )
        .await;
    assert!(hot["keys"][0]["count"].as_u64() >= Some(1000), "{hot}");
    let plain = cp
        .expect("GET", "/v1/tenants/plain/big-keys", None, 200)
        .await;
    assert_eq!(plain["keys"], json!([]), "{plain}");
    let small = cp
        .expect("GET", "/v1/tenants/small/hot-keys", None, 200)
        .await;
    assert_eq!(small["keys"], json!([]), "{small}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_shows_names_and_keys_never_values() {
    let redis = RedisServer::start();
    let stack = start_stack("admin");
    let cp = &stack.cp;
    let route = json!({"type": "single", "target": redis.url()});
    let every = json!({"slowlog_log_slower_than": 0});
    let secret = cp
        .create_tenant_with(json!({"name": "acme", "tracking": every}), route)
        .await;
    let mut con = connect(&stack.gateway, "acme", &secret).await;
    // Every command is slow for this tenant: each report has its SET, until /tracking shows one.
    let deadline = Instant::now() + Duration::from_secs(10);
    let shown = loop {
        let () = redis::cmd("SET")
            .arg("user:1")
            .arg("hunter2-password")
            .arg("EX")
            .arg(100)
            .query_async(&mut con)
            .await
            .expect("SET");
        let (status, body) = stack.gateway.admin_get("/tracking");
        assert_eq!(status, 200, "{body}");
        let report: Value = serde_json::from_str(&body).expect("JSON");
        let set = report["tenants"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|t| {
                let entries = t["slowlog"].as_array()?;
                entries.iter().find(|e| e["args"][0] == "SET").cloned()
            });
        if let Some(set) = set {
            assert!(!body.contains("hunter2"), "{body}");
            break set;
        }
        assert!(Instant::now() < deadline, "no SET in {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        shown["args"],
        json!(["SET", "user:1", "(redacted)", "(redacted)", "(redacted)"]),
        "{shown}"
    );
    assert_eq!(shown["key"], "user:1", "{shown}");
    // The control plane, behind its admin token, has the arguments as the tenant sent them.
    let path = "/v1/tenants/acme/slowlog?limit=1000";
    let slowlog = cp
        .poll(path, Duration::from_secs(5), |answer| {
            answer["entries"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e["args"][2] == "hunter2-password")
        })
        .await;
    assert!(slowlog.to_string().contains("\"EX\",\"100\""), "{slowlog}");
    // A key with a NUL byte (which Postgres cannot keep in JSON) arrives escaped, and does not cost the report.
    let () = redis::cmd("SET")
        .arg(&b"nul:\0"[..])
        .arg("v")
        .query_async(&mut con)
        .await
        .expect("SET");
    cp.poll(path, Duration::from_secs(5), |answer| {
        answer["entries"][0]["key"] == "nul:\\x00"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_slow_log_outgrows_the_report_loses_its_oldest_entries_not_the_others() {
    let redis = RedisServer::start();
    // Reports 2 s apart, so that each tenant's requests below fall in one report (one of some 2.5 MB).
    let stack = start_stack_every("share", 2000);
    let cp = &stack.cp;
    let route = json!({"type": "single", "target": redis.url()});
    let every = json!({"slowlog_log_slower_than": 0, "big_key_bytes": 1000});
    let mut secrets = Vec::new();
    for (name, namespace) in [("quiet", "q:"), ("loud", "l:")] {
        let tenant = json!({"name": name, "namespace": namespace, "tracking": every});
        secrets.push(cp.create_tenant_with(tenant, route.clone()).await);
    }
    let mut quiet = connect(&stack.gateway, "quiet", &secrets[0]).await;
    let mut loud = connect(&stack.gateway, "loud", &secrets[1]).await;
    let gets = |count: usize| {
        let mut pipe = redis::pipe();
        for _ in 0..count {
            pipe.cmd("GET").arg("hot");
        }
        pipe
    };

    // The quiet tenant: a hot key, a big value, slow commands.
    let _: Vec<Option<String>> = gets(1000).query_async(&mut quiet).await.expect("GETs");
    let () = redis::cmd("SET")
        .arg("big")
        .arg("v".repeat(2000))
        .query_async(&mut quiet)
        .await
        .expect("SET");
    // The loud one, busier (more reads of its hot key), then 128 slow MSETs, a full slow log, each of 32
    // arguments of 128 bytes shown as \xHH: some 20 KB of JSON apiece, 2.5 MB together.
    let _: Vec<Option<String>> = gets(5000).query_async(&mut loud).await.expect("GETs");
    for i in 0..128u8 {
        let mut mset = redis::cmd("MSET");
        for pair in 0..16u8 {
            let mut key = vec![0xfe; 150];
            key.extend_from_slice(&[i + 1, pair + 1]);
            mset.arg(&key[..]).arg(&[0xff_u8; 200][..]);
        }
        let () = mset.query_async(&mut loud).await.expect("MSET");
    }

    // The quiet tenant's observations all arrive...
    let within = Duration::from_secs(8);
    let hot = cp
        .poll("/v1/tenants/quiet/hot-keys", within, |answer| {
            answer["keys"][0]["key"] == "hot"
        })
        .await;
    assert!(hot["keys"][0]["count"].as_u64() >= Some(500), "{hot}");
    let big = big_keys(cp, "quiet", 1).await;
    assert_eq!(big["keys"][0]["key"], "big", "{big}");
    let slowlog = slowlog_of(cp, "quiet").await;
    assert!(slowlog["entries"][0]["args"][0].is_string(), "{slowlog}");
    // ... and the loud one's hot key and newest MSETs, as many as its share holds: fewer than it sent.
    let path = "/v1/tenants/loud/slowlog?limit=1000";
    let msets = |answer: &Value| {
        answer["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["args"][0] == "MSET")
            .count()
    };
    let loud_log = cp.poll(path, within, |answer| msets(answer) > 0).await;
    let kept = msets(&loud_log);
    assert!((10..128).contains(&kept), "{kept} MSETs kept");
    let newest = &loud_log["entries"][0];
    assert_eq!(newest["args"][0], "MSET", "{newest}");
    assert!(
        newest["args"][1]
            .as_str()
            .is_some_and(|key| key.starts_with("\\xfe\\xfe")),
        "{newest}"
    );
    let hot = cp
        .expect("GET", "/v1/tenants/loud/hot-keys", None, 200)
        .await;
    assert_eq!(hot["keys"][0]["key"], "hot", "{hot}");
}
