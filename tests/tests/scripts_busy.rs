//! A script that keeps its Redis busy, through the gateway: `SCRIPT KILL` and `FUNCTION KILL` reach the node past
//! the shared connection queued behind the script, requests behind a script the gateway gives up on get Redis'
//! `BUSY`, a transaction queued meanwhile runs whole behind the script, and a tenant's script limit
//! (`limits.script_timeout_ms`) is its scripts' deadline, where a non-admin tenant's script is killed.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{
    Gateway, GatewayBuilder, RawClient, RedisCluster, RedisServer, wait_for_slot_map_as,
};

const SPIN: &str = "while true do end";
/// A script that writes, then never ends: Redis can no longer kill it.
const WRITE_THEN_SPIN: &str = "redis.call('SET', 'written', '1') while true do end";
const LIBRARY: &str = "#!lua name=spinning\n\
    redis.register_function('spin', function() while true do end end)\n\
    redis.register_function('write_then_spin', function() redis.call('SET', 'written', '1') while true do end end)";
/// Runs for one second, then answers 1.
const ONE_SECOND: &str = "local t = redis.call('TIME') local until_us = (t[1] + 1) * 1000000 + t[2] \
    repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= until_us return 1";
const KILLED: &str = "-ERR Script killed by user with SCRIPT KILL...";
const NOTBUSY: &str = "-NOTBUSY No scripts in execution right now.\r\n";

/// A Redis that serves other connections (and `SCRIPT KILL`) once a script has run for 200 ms (5 s by default).
fn busy_redis() -> RedisServer {
    RedisServer::builder()
        .arg("--busy-reply-threshold")
        .arg("200")
        .start()
}

/// A gateway with one worker: its clients share one connection per backend node, so that a request sent after a
/// script waits behind it there. (Each worker has its own connection, on which Redis answers `-BUSY` at once
/// while the script runs.)
fn one_worker() -> GatewayBuilder {
    Gateway::builder().arg("--workers").arg("1")
}

fn admin_tenant(route: Value, limits: Value) -> Value {
    json!({"tenants": [{"name": "root", "passwords": ["root-password"], "allow_admin": true,
                        "limits": limits, "route": route}]})
}

fn client(gateway: &Gateway, password: &str) -> RawClient {
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(format!("AUTH {password}\r\n").as_bytes(), b"+OK\r\n");
    client
}

/// Sends `args` and returns the whole reply.
fn call(client: &mut RawClient, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    String::from_utf8_lossy(&client.request(&args)).into_owned()
}

fn send(client: &mut RawClient, args: &[&str]) {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    client.send_command(&args);
}

fn read(client: &mut RawClient) -> String {
    String::from_utf8_lossy(&client.read_reply()).into_owned()
}

/// Waits until `redis` runs a script past its busy-reply-threshold: it then answers `BUSY` to anyone else.
fn wait_until_busy(redis: &RedisServer) {
    let started = Instant::now();
    let mut direct = RawClient::connect(redis.port());
    while !call(&mut direct, &["PING"]).starts_with("-BUSY") {
        assert!(started.elapsed() < Duration::from_secs(5), "no script ran");
    }
}

/// `kill` until it finds the script running (`NOTBUSY` until the script reaches the node), within `within`.
fn kill_until_killed(killer: &mut RawClient, kill: &str, within: Duration) -> String {
    let started = Instant::now();
    loop {
        let reply = call(killer, &[kill, "KILL"]);
        if reply != NOTBUSY {
            assert!(
                started.elapsed() < within,
                "{kill} KILL took {:?}",
                started.elapsed()
            );
            return reply;
        }
        assert!(started.elapsed() < within, "{kill} KILL found no script");
    }
}

#[test]
fn script_kill_and_function_kill_stop_an_admin_script_on_a_connection_of_their_own() {
    let redis = busy_redis();
    let gateway = Gateway::start(&admin_tenant(
        json!({"type": "single", "target": redis.url()}),
        json!({}),
    ));
    let mut killer = client(&gateway, "root-password");
    assert_eq!(call(&mut killer, &["SCRIPT", "KILL"]), NOTBUSY);
    assert_eq!(call(&mut killer, &["FUNCTION", "KILL"]), NOTBUSY);
    assert_eq!(
        call(&mut killer, &["FUNCTION", "LOAD", LIBRARY]),
        "$8\r\nspinning\r\n"
    );
    for (run, kill) in [
        (["EVAL", SPIN, "0"], "SCRIPT"),
        (["FCALL", "spin", "0"], "FUNCTION"),
    ] {
        let mut runner = client(&gateway, "root-password");
        send(&mut runner, &run);
        // Well within the command timeout (2 s), behind which the kill would wait on the shared connection.
        let killed = kill_until_killed(&mut killer, kill, Duration::from_millis(1500));
        assert_eq!(killed, "+OK\r\n", "{kill} KILL");
        let reply = read(&mut runner);
        assert!(reply.starts_with(KILLED), "{run:?} answered {reply:?}");
        // The node serves everyone again.
        assert_eq!(call(&mut runner, &["SET", "k", kill]), "+OK\r\n");
        assert_eq!(
            call(&mut killer, &["GET", "k"]),
            format!("${}\r\n{kill}\r\n", kill.len())
        );
    }
}

/// Runs scripts on the node `key` lives on (not the one keyless commands go to) and kills them through the
/// gateway: `+OK` for one that can be killed, `UNKILLABLE` (not the other nodes' `NOTBUSY`) for one that wrote.
fn kill_reaches_the_node_of(gateway: &Gateway, key: &str) {
    let mut killer = client(gateway, "root-password");
    assert_eq!(call(&mut killer, &["SCRIPT", "KILL"]), NOTBUSY);
    let mut runner = client(gateway, "root-password");
    send(&mut runner, &["EVAL", SPIN, "1", key]);
    let killed = kill_until_killed(&mut killer, "SCRIPT", Duration::from_millis(1500));
    assert_eq!(killed, "+OK\r\n");
    assert!(read(&mut runner).starts_with(KILLED));
    assert_eq!(call(&mut killer, &["SCRIPT", "KILL"]), NOTBUSY);
    send(&mut runner, &["EVAL", WRITE_THEN_SPIN, "1", key]);
    let refused = kill_until_killed(&mut killer, "SCRIPT", Duration::from_millis(1500));
    assert!(
        refused.starts_with("-UNKILLABLE Sorry the script already executed write commands"),
        "{refused}"
    );
    // That node is busy for good: it goes with its guard.
}

#[test]
fn script_kill_reaches_every_shard_and_says_notbusy_when_none_runs_a_script() {
    let shards = [busy_redis(), busy_redis()];
    let route = json!({"type": "sharded", "shards": [
        {"name": "s0", "target": shards[0].url()}, {"name": "s1", "target": shards[1].url()}]});
    let gateway = Gateway::start(&admin_tenant(route, json!({})));
    let mut setter = client(&gateway, "root-password");
    // A key of the second shard, whose script the first shard knows nothing of.
    let key = (0..100)
        .map(|i| format!("key:{i}"))
        .find(|key| {
            assert_eq!(call(&mut setter, &["SET", key, "1"]), "+OK\r\n");
            redis::cmd("EXISTS")
                .arg(key)
                .query::<bool>(&mut shards[1].client())
                .unwrap()
        })
        .expect("some key lands on the second shard");
    kill_reaches_the_node_of(&gateway, &key);
}

#[test]
fn script_kill_reaches_every_master_of_a_cluster() {
    let cluster = RedisCluster::start(3, 0, None);
    for master in cluster.masters() {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("busy-reply-threshold")
            .arg(200)
            .query(&mut cluster.client(master.port))
            .unwrap();
    }
    let gateway = Gateway::start(&admin_tenant(
        json!({"type": "single", "target": cluster.url()}),
        json!({}),
    ));
    wait_for_slot_map_as(gateway.port(), Some("root-password"));
    // A key of another master than slot 0's, where keyless commands go.
    let owners = cluster.slot_owners();
    let mut direct = cluster.client(owners[0]);
    let key = (0..100)
        .map(|i| format!("key:{i}"))
        .find(|key| {
            let slot: usize = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key)
                .query(&mut direct)
                .unwrap();
            owners[slot] != owners[0]
        })
        .expect("some key lives on another master");
    kill_reaches_the_node_of(&gateway, &key);
}

/// A transaction queued while a script runs (a deliberate difference, docs/stateful.md): Redis answers `-BUSY` to
/// the queued command and `-EXECABORT` to `EXEC`; through the gateway the commands are queued in the gateway, and
/// `EXEC` rides the shared connection behind the script, so the transaction runs whole once the script is done.
#[test]
fn a_transaction_queued_while_a_script_runs_runs_whole_after_it() {
    let redis = busy_redis();
    let gateway = one_worker().start(&admin_tenant(
        json!({"type": "single", "target": redis.url()}),
        json!({}),
    ));
    let mut runner = client(&gateway, "root-password");
    send(&mut runner, &["EVAL", ONE_SECOND, "0"]);
    wait_until_busy(&redis);
    let mut queuing = client(&gateway, "root-password");
    assert_eq!(call(&mut queuing, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut queuing, &["SET", "k", "v"]), "+QUEUED\r\n");
    assert_eq!(call(&mut queuing, &["EXEC"]), "*1\r\n+OK\r\n");
    assert_eq!(
        read(&mut runner),
        ":1\r\n",
        "the script ran to its end first"
    );
    assert_eq!(call(&mut queuing, &["GET", "k"]), "$1\r\nv\r\n");
    // Redis itself, on a connection of its own, aborts the transaction instead.
    send(&mut runner, &["EVAL", ONE_SECOND, "0"]);
    wait_until_busy(&redis);
    let mut direct = RawClient::connect(redis.port());
    assert_eq!(call(&mut direct, &["MULTI"]), "+OK\r\n");
    assert!(call(&mut direct, &["SET", "k", "w"]).starts_with("-BUSY "));
    assert!(call(&mut direct, &["EXEC"]).starts_with("-EXECABORT "));
    assert_eq!(read(&mut runner), ":1\r\n");
}

#[test]
fn requests_behind_a_script_the_gateway_gives_up_on_get_redis_busy_reply() {
    for (run, kill) in [
        (["EVAL", WRITE_THEN_SPIN, "0"], "SCRIPT"),
        (["FCALL", "write_then_spin", "0"], "FUNCTION"),
    ] {
        let redis = busy_redis();
        // An admin's script is not killed: past its limit the gateway stops waiting for it. One worker, so that
        // the request behind it is queued on the script's backend connection (see `one_worker`).
        let gateway = one_worker().start(&admin_tenant(
            json!({"type": "single", "target": redis.url()}),
            json!({"script_timeout_ms": 1000}),
        ));
        let mut runner = client(&gateway, "root-password");
        assert_eq!(
            call(&mut runner, &["FUNCTION", "LOAD", LIBRARY]),
            "$8\r\nspinning\r\n"
        );
        send(&mut runner, &run);
        wait_until_busy(&redis);
        let mut behind = client(&gateway, "root-password");
        send(&mut behind, &["GET", "k"]);
        let reply = read(&mut runner);
        assert!(
            reply.starts_with("-ERR backend") && reply.contains("timed out after 1000 ms"),
            "{run:?} answered {reply:?}"
        );
        assert_eq!(
            read(&mut behind),
            format!(
                "-BUSY Redis is busy running a script. You can only call {kill} KILL or SHUTDOWN NOSAVE.\r\n"
            )
        );
        // A script that wrote cannot be killed, by Redis' own rule.
        let unkillable = call(&mut behind, &[kill, "KILL"]);
        assert!(unkillable.starts_with("-UNKILLABLE "), "{unkillable}");
        // The Redis, busy for good, goes with its guard.
    }
}

/// Tenant `short` (scripts limited to 300 ms) in database 0 of `redis`, and `long` (3 s) in database `long_db`.
fn short_and_long(gateway: GatewayBuilder, redis: &RedisServer, long_db: u32) -> Gateway {
    gateway.start(&json!({"tenants": [
        {"name": "short", "passwords": ["short-password"], "limits": {"script_timeout_ms": 300},
         "route": {"type": "single", "target": format!("{}/0", redis.url())}},
        {"name": "long", "passwords": ["long-password"], "limits": {"script_timeout_ms": 3000},
         "route": {"type": "single", "target": format!("{}/{long_db}", redis.url())}}]}))
}

/// Runs a script that never ends as `tenant`, which the gateway must kill within `within`.
fn spin_until_killed(tenant: &mut RawClient, within: Duration) {
    let started = Instant::now();
    let reply = call(tenant, &["EVAL", SPIN, "0"]);
    killed_within(&reply, started, within);
}

/// `reply` is a killed script's, and came within `within` of `started`.
fn killed_within(reply: &str, started: Instant, within: Duration) {
    assert!(reply.starts_with(KILLED), "{reply}");
    assert!(
        started.elapsed() < within,
        "killed {:?} after it was sent",
        started.elapsed()
    );
}

#[test]
fn a_tenants_script_limit_is_its_scripts_deadline_and_where_they_are_killed() {
    let redis = busy_redis();
    let gateway = short_and_long(
        one_worker().arg("--command-timeout-ms").arg("300"),
        &redis,
        1,
    );
    let mut short = client(&gateway, "short-password");
    spin_until_killed(&mut short, Duration::from_secs(2));
    // A legitimate script runs past the command timeout to its end within its tenant's limit, and a request
    // behind it on the same backend connection waits for it.
    let mut long = client(&gateway, "long-password");
    send(&mut long, &["EVAL", ONE_SECOND, "0"]);
    wait_until_busy(&redis);
    let mut behind = client(&gateway, "long-password");
    send(&mut behind, &["SET", "after", "1"]);
    assert_eq!(read(&mut long), ":1\r\n");
    assert_eq!(read(&mut behind), "+OK\r\n");
    assert_eq!(call(&mut short, &["GET", "after"]), "$-1\r\n");
}

#[test]
fn a_script_limit_below_the_command_timeout_counts_from_when_the_script_starts() {
    let redis = busy_redis();
    // The default command timeout (2 s) is longer than the short tenant's limit: the limit still decides.
    let gateway = short_and_long(one_worker(), &redis, 0);
    let mut short = client(&gateway, "short-password");
    // A request answered just before on the same backend connection does not lend the script its deadline.
    assert_eq!(call(&mut short, &["GET", "k"]), "$-1\r\n");
    spin_until_killed(&mut short, Duration::from_millis(1500));
    // Queued behind a legitimate one-second script on the same backend connection, a runaway script gets its
    // limit from when it starts, not the deadline of the script before it (3 s).
    let mut long = client(&gateway, "long-password");
    let started = Instant::now();
    send(&mut long, &["EVAL", ONE_SECOND, "0"]);
    wait_until_busy(&redis);
    send(&mut short, &["EVAL", SPIN, "0"]);
    assert_eq!(read(&mut long), ":1\r\n");
    killed_within(&read(&mut short), started, Duration::from_millis(2500));
}

/// `commands` in one write, as a pipelining client sends them.
fn pipeline(client: &mut RawClient, commands: &[&[&str]]) {
    let mut bytes = Vec::new();
    for args in commands {
        bytes.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in *args {
            bytes.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
    }
    client.send(&bytes);
}

#[test]
fn a_script_pipelined_behind_requests_is_killed_at_its_limit_though_redis_holds_their_replies() {
    // Redis sends none of a connection's replies while a script of that connection runs, not even those of the
    // requests before it in the same read: their replies cannot tell the gateway when the script started.
    let redis = busy_redis();
    let gateway = short_and_long(one_worker(), &redis, 1);
    let mut short = client(&gateway, "short-password");
    let started = Instant::now();
    pipeline(&mut short, &[&["GET", "k"], &["EVAL", SPIN, "0"]]);
    assert_eq!(read(&mut short), "$-1\r\n");
    killed_within(&read(&mut short), started, Duration::from_millis(1500));
    let mut direct = RawClient::connect(redis.port());
    assert_eq!(call(&mut direct, &["PING"]), "+PONG\r\n");
    drop(gateway);
    // A script allowed longer than the command timeout: the requests before it wait for it, as Redis makes
    // them, and are not failed at the command timeout (which left the script running with nobody to kill it).
    let gateway = short_and_long(
        one_worker().arg("--command-timeout-ms").arg("300"),
        &redis,
        1,
    );
    let mut long = client(&gateway, "long-password");
    pipeline(&mut long, &[&["GET", "k"], &["EVAL", ONE_SECOND, "0"]]);
    assert_eq!(read(&mut long), "$-1\r\n");
    assert_eq!(read(&mut long), ":1\r\n");
    let started = Instant::now();
    pipeline(&mut long, &[&["GET", "k"], &["EVAL", SPIN, "0"]]);
    assert_eq!(read(&mut long), "$-1\r\n");
    killed_within(&read(&mut long), started, Duration::from_millis(4500));
    assert_eq!(call(&mut direct, &["PING"]), "+PONG\r\n");
}
