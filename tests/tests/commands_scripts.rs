//! Scripts and functions through the gateway, compared with a plain redis-server (see
//! `switchyard_tests::compare`): EVAL/EVALSHA/FCALL routed by their declared keys, SCRIPT LOAD and FUNCTION LOAD
//! sent to every shard and every cluster master so that EVALSHA and FCALL work wherever a key lands, SCRIPT
//! EXISTS true only where the script exists everywhere, and CROSSSLOT for keys that would need two backends.

use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_tests::compare::{Backends, Comparison, Topology, each_topology};
use switchyard_tests::{Gateway, RawClient, RedisServer, wait_for};

const SCRIPT: &str = "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])";
/// SHA1 of `SCRIPT`, as Redis prints it.
const SHA: &str = "18d788194860a281b19910d462b1e96dabf3c984";
const LIBRARY: &str = "#!lua name=lib\nredis.register_function('put', function(keys, args) \
    redis.call('SET', keys[1], args[1]) return args[1] end)\n\
    redis.register_function{function_name='peek', callback=function(keys) return redis.call('GET', keys[1]) end, \
    flags={'no-writes'}}";
const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";
const WHY_CROSSSLOT: &str =
    "docs/commands.md#scripts-and-functions: a script's keys must live on one shard or slot";

/// Every node that holds data behind the gateway (shards, or cluster masters), as raw clients.
fn data_nodes(c: &Comparison) -> Vec<RawClient> {
    let ports: Vec<u16> = match c.backends() {
        Backends::Servers(servers) => servers.iter().map(|s| s.port()).collect(),
        Backends::Cluster(cluster) => cluster.masters().iter().map(|m| m.port).collect(),
    };
    ports.into_iter().map(RawClient::connect).collect()
}

#[test]
fn script_load_then_evalsha_works_on_keys_of_every_shard() {
    each_topology(|c| {
        c.all_same(&[
            &["EVALSHA", SHA, "1", "k"],
            &[
                "SCRIPT",
                "EXISTS",
                SHA,
                "0000000000000000000000000000000000000000",
            ],
            &["SCRIPT", "LOAD", SCRIPT],
            &[
                "SCRIPT",
                "EXISTS",
                SHA,
                "0000000000000000000000000000000000000000",
            ],
        ]);
        let keys: Vec<String> = (0..60).map(|i| format!("script:{i}")).collect();
        for key in &keys {
            c.same(&["EVALSHA", SHA, "1", key, key]);
            c.same(&["EVALSHA_RO", SHA, "1", key, key]);
            c.same(&["EVAL", SCRIPT, "1", key, "again"]);
            c.same(&["EVAL_RO", "return redis.call('GET', KEYS[1])", "1", key]);
        }
        // The keys really are spread: every data node got some of them, and each node runs the script itself.
        for mut node in data_nodes(c) {
            let size = node.request(&[b"DBSIZE"]);
            assert_ne!(size, b":0\r\n", "[{}] a node got no key", c.topology());
            let exists = node.request(&[b"SCRIPT", b"EXISTS", SHA.as_bytes()]);
            assert_eq!(
                exists,
                b"*1\r\n:1\r\n",
                "[{}] the script is on every node",
                c.topology()
            );
        }
        c.all_same(&[
            &["EVAL", "return {KEYS[1], ARGV[1]}", "1", "{t}a", "x"],
            &[
                "EVAL",
                "return redis.call('MGET', KEYS[1], KEYS[2])",
                "2",
                "{t}a",
                "{t}b",
            ],
            &["EVAL", "return 1", "0"],
            &["EVAL", "return ARGV[1]", "0", "only-args"],
            &["EVAL", "return 1", "5", "a"],
            &["EVAL", "return 1", "-1"],
            &["EVAL", "syntax error here", "0"],
            &["EVAL", "return redis.call('NOSUCH')", "0"],
            &["EVALSHA", "nothex", "0"],
            &["SCRIPT", "FLUSH"],
            &["SCRIPT", "EXISTS", SHA],
            &["EVALSHA", SHA, "1", "k", "v"],
        ]);
        let many: Vec<String> = (0..20).map(|i| format!("spread:{i}")).collect();
        let mut eval = vec!["EVAL", "return 1", "20"];
        eval.extend(many.iter().map(String::as_str));
        if c.topology() == Topology::Single {
            c.same(&eval);
        } else {
            c.differs(&eval, CROSSSLOT, WHY_CROSSSLOT);
        }
    });
}

#[test]
fn functions_are_loaded_everywhere_and_called_by_key() {
    each_topology(|c| {
        c.all_same(&[
            &["FCALL", "put", "1", "f:a", "1"],
            &["FUNCTION", "LOAD", LIBRARY],
            &["FUNCTION", "LOAD", LIBRARY],
            &["FUNCTION", "LOAD", "REPLACE", LIBRARY],
        ]);
        for i in 0..40 {
            let key = format!("f:{i}");
            c.same(&["FCALL", "put", "1", &key, &i.to_string()]);
            c.same(&["FCALL_RO", "peek", "1", &key]);
        }
        c.all_same(&[
            &["FCALL_RO", "put", "1", "f:1", "x"],
            &["FCALL", "nosuch", "0"],
            &["FUNCTION", "DELETE", "lib"],
            &["FUNCTION", "DELETE", "lib"],
            &["FCALL_RO", "peek", "1", "f:1"],
            &["FUNCTION", "LOAD", LIBRARY],
            &["FUNCTION", "FLUSH"],
            &["FUNCTION", "LIST"],
        ]);
        // DUMP from one node, RESTORE everywhere.
        c.same(&["FUNCTION", "LOAD", LIBRARY]);
        let (_, dump) = c.both(&["FUNCTION", "DUMP"]);
        let body = dump
            .splitn(2, |&b| b == b'\n')
            .nth(1)
            .and_then(|rest| rest.strip_suffix(b"\r\n"))
            .expect("a bulk FUNCTION DUMP reply")
            .to_vec();
        c.same(&["FUNCTION", "FLUSH"]);
        c.same(&[&b"FUNCTION"[..], b"RESTORE", &body]);
        for i in 0..20 {
            c.same(&["FCALL_RO", "peek", "1", &format!("f:{i}")]);
        }
    });
}

#[test]
fn script_exists_is_true_only_when_every_node_has_the_script() {
    for topology in [Topology::Sharded, Topology::Cluster] {
        let c = Comparison::start(topology);
        // Loaded behind the gateway's back on every node but one: whichever it is, the script does not exist.
        let mut nodes = data_nodes(&c);
        let mut client = RawClient::connect(c.gateway().port());
        for missing in 0..nodes.len() {
            assert_eq!(client.request(&[b"SCRIPT", b"FLUSH"]), b"+OK\r\n");
            for (i, node) in nodes.iter_mut().enumerate().filter(|(i, _)| *i != missing) {
                let loaded = node.request(&[b"SCRIPT", b"LOAD", SCRIPT.as_bytes()]);
                assert_eq!(loaded, format!("$40\r\n{SHA}\r\n").as_bytes(), "node {i}");
            }
            let exists = client.request(&[b"SCRIPT", b"EXISTS", SHA.as_bytes()]);
            assert_eq!(
                exists, b"*1\r\n:0\r\n",
                "[{topology}] missing on node {missing}"
            );
        }
        let loaded = client.request(&[b"SCRIPT", b"LOAD", SCRIPT.as_bytes()]);
        assert_eq!(loaded, format!("$40\r\n{SHA}\r\n").as_bytes());
        let exists = client.request(&[b"SCRIPT", b"EXISTS", SHA.as_bytes(), b"ff"]);
        assert_eq!(exists, b"*2\r\n:1\r\n:0\r\n", "[{topology}]");
    }
}

/// Under double-write, scripts are loaded on the secondary too, EVALSHA runs on both copies, and SCRIPT EXISTS
/// hears from both even when the ack mode waits only for the primary.
#[test]
fn double_written_routes_load_scripts_on_every_copy() {
    let primary = RedisServer::start();
    let secondary = RedisServer::start();
    let route = json!({"type": "single", "target": {"write": {
        "resources": [primary.url(), secondary.url()], "ack": "primary"
    }}});
    let gateway = Gateway::start(&switchyard_tests::open_tenant(route));
    let mut client = RawClient::connect(gateway.port());
    let mut direct = RawClient::connect(secondary.port());

    // Only the primary has it: not usable everywhere.
    let mut on_primary = RawClient::connect(primary.port());
    on_primary.request(&[b"SCRIPT", b"LOAD", SCRIPT.as_bytes()]);
    let exists = client.request(&[b"SCRIPT", b"EXISTS", SHA.as_bytes()]);
    assert_eq!(exists, b"*1\r\n:0\r\n");

    let loaded = client.request(&[b"SCRIPT", b"LOAD", SCRIPT.as_bytes()]);
    assert_eq!(loaded, format!("$40\r\n{SHA}\r\n").as_bytes());
    wait_for(
        "the secondary to have the script",
        Duration::from_secs(10),
        || direct.request(&[b"SCRIPT", b"EXISTS", SHA.as_bytes()]) == b"*1\r\n:1\r\n",
    );
    let exists = client.request(&[b"SCRIPT", b"EXISTS", SHA.as_bytes()]);
    assert_eq!(exists, b"*1\r\n:1\r\n");
    let reply = client.request(&[b"EVALSHA", SHA.as_bytes(), b"1", b"dw", b"copied"]);
    assert_eq!(reply, b"$6\r\ncopied\r\n");
    wait_for(
        "the secondary to run the script",
        Duration::from_secs(10),
        || direct.request(&[b"GET", b"dw"]) == b"$6\r\ncopied\r\n",
    );
}

/// A script without keys runs on the first shard, and on a cluster on the master of slot 0, every time.
#[test]
fn zero_key_scripts_run_on_a_fixed_node() {
    const PORT: &str = "return redis.call('INFO', 'server'):match('tcp_port:(%d+)')";
    for topology in [Topology::Sharded, Topology::Cluster] {
        let c = Comparison::start(topology);
        let expected = match c.backends() {
            Backends::Servers(servers) => servers[0].port(),
            Backends::Cluster(cluster) => cluster.slot_owners()[0],
        };
        let mut client = RawClient::connect(c.gateway().port());
        for _ in 0..10 {
            let reply = client.request(&[b"EVAL", PORT.as_bytes(), b"0"]);
            let port = expected.to_string();
            assert_eq!(
                String::from_utf8_lossy(&reply),
                format!("${}\r\n{port}\r\n", port.len()),
                "[{topology}]"
            );
        }
    }
}

/// While a script keeps its Redis busy past the node's `busy-reply-threshold`, `PING` from another client gets
/// Redis' own `BUSY` through the gateway as from Redis (which a test suite checks before it kills the script), and
/// `PONG` again once the script is killed.
#[test]
fn ping_says_busy_while_a_script_keeps_redis_busy() {
    let busy_redis = || {
        RedisServer::builder()
            .arg("--busy-reply-threshold")
            .arg("200")
            .start()
    };
    let (reference, backend) = (busy_redis(), busy_redis());
    let gateway = Gateway::start(&json!({"tenants": [
        {"name": "t", "passwords": [], "allow_admin": true,
         "route": {"type": "single", "target": backend.url()}}
    ]}));
    let mut transcripts = Vec::new();
    for port in [reference.port(), gateway.port()] {
        let (mut runner, mut other) = (RawClient::connect(port), RawClient::connect(port));
        let mut seen = vec![other.request(&[b"PING"])];
        runner.send_command(&[b"EVAL", b"while true do end", b"0"]);
        // Redis answers nothing until the script has run for the threshold; the gateway answers PONG until then.
        let started = Instant::now();
        let busy = loop {
            let reply = other.request(&[b"PING"]);
            if reply.starts_with(b"-BUSY") {
                break reply;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "PING never said BUSY: {}",
                String::from_utf8_lossy(&reply)
            );
        };
        seen.push(busy);
        seen.push(other.request(&[b"PING", b"hello"]));
        seen.push(other.request(&[b"SCRIPT", b"KILL"]));
        seen.push(runner.read_reply());
        seen.push(other.request(&[b"PING"]));
        transcripts.push(
            seen.iter()
                .map(|r| String::from_utf8_lossy(r).into_owned())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(
        transcripts[1], transcripts[0],
        "the gateway (right) against Redis (left)"
    );
}
