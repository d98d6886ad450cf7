//! Today's default clients, redis-py 8 (from PyPI) and node-redis 6 (from npm; `scripts/test` installs both),
//! with every option left as it is: they speak RESP3 (`HELLO 3 AUTH ...` on connect), and the first things an
//! application does through the gateway work, with the types a RESP3 client gets (maps as dicts, doubles as
//! floats, nulls), pub/sub included, and the library name and version they send with `CLIENT SETINFO` show in
//! `CLIENT INFO`; through one Redis, a ring of three and a Redis Cluster.

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;
use switchyard_tests::{Gateway, RedisCluster, RedisServer, wait_for_slot_map_as};

const SCRIPT: &str = r#"
import os, redis
r = redis.Redis(host="127.0.0.1", port=int(os.environ["PORT"]), password="py-password")
connection = r.connection_pool.get_connection()
assert str(connection.protocol) == "3", connection.protocol
r.connection_pool.release(connection)
assert r.set("greeting", "hello") is True
assert r.get("greeting") == b"hello"
assert r.get("missing") is None
assert r.hset("user", mapping={"name": "ada", "lang": "en"}) == 2
assert r.hgetall("user") == {b"name": b"ada", b"lang": b"en"}
assert r.zadd("scores", {"ada": 1.5}) == 1
assert r.zrange("scores", 0, -1, withscores=True) == [(b"ada", 1.5)]
pipe = r.pipeline()
pipe.incr("counter").incr("counter").get("counter")
assert pipe.execute() == [1, 2, b"2"]
with r.pipeline(transaction=True) as tx:
    tx.set("a", "1").incr("a")
    assert tx.execute() == [True, 2]
limiter = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
assert limiter(keys=["quota"], args=[5]) == 5
assert r.config_get("maxmemory") == {"maxmemory": "0"}
assert r.info("keyspace")["db0"]["keys"] == 6
assert r.client_getname() is None
# redis-py sends CLIENT SETINFO on connect, and the gateway keeps what it said, as Redis 7.2 does.
info = r.client_info()
assert (info["lib-name"], info["lib-ver"]) == ("redis-py", redis.__version__), info
assert r.blpop(["empty"], timeout=0.1) is None
p = r.pubsub()
p.subscribe("news")
assert p.get_message(timeout=5)["type"] == "subscribe"
assert r.publish("news", "hi") == 1
assert p.get_message(timeout=5) == {"type": "message", "pattern": None, "channel": b"news", "data": b"hi"}
p.close()
print("ok")
"#;

const NODE_SCRIPT: &str = r#"
const assert = require('assert');
const { createClient } = require('redis');
(async () => {
  const client = createClient({ url: `redis://default:node-password@127.0.0.1:${process.env.PORT}` });
  await client.connect();
  // node-redis sends CLIENT SETINFO on connect, and the gateway keeps what it said, as Redis 7.2 does.
  const { version } = require('redis/package.json');
  assert.match(await client.sendCommand(['CLIENT', 'INFO']), new RegExp(` resp=3 lib-name=node-redis lib-ver=${version}\n$`));
  assert.equal(await client.set('greeting', 'hello'), 'OK');
  assert.equal(await client.get('greeting'), 'hello');
  assert.equal(await client.get('missing'), null);
  await client.hSet('user', { name: 'ada', lang: 'en' });
  assert.deepEqual({ ...(await client.hGetAll('user')) }, { name: 'ada', lang: 'en' });
  assert.deepEqual(await client.multi().set('a', '1').incr('a').exec(), ['OK', 2]);
  assert.equal(await client.eval("return redis.call('GET', KEYS[1])", { keys: ['greeting'] }), 'hello');
  const [x, y] = await Promise.all([client.incr('counter'), client.incr('counter')]);
  assert.deepEqual([x, y], [1, 2]);
  const subscriber = client.duplicate();
  await subscriber.connect();
  let received;
  const message = new Promise((resolve) => { received = resolve; });
  await subscriber.subscribe('news', (text, channel) => received([channel, text]));
  assert.equal(await subscriber.get('greeting'), 'hello');
  assert.equal(await client.publish('news', 'hi'), 1);
  assert.deepEqual(await message, ['news', 'hi']);
  await subscriber.quit();
  await client.quit();
  console.log('ok');
})().catch((e) => { console.error(e); process.exit(1); });
"#;

/// One tenant's gateway for each route kind: one Redis, a ring over three, a Redis Cluster of three masters.
fn each_route(password: &str, mut check: impl FnMut(&str, &Gateway)) {
    for target in ["single", "sharded", "cluster"] {
        let backends: Vec<RedisServer> = match target {
            "cluster" => Vec::new(),
            _ => (0..3).map(|_| RedisServer::start()).collect(),
        };
        let cluster = (target == "cluster").then(|| RedisCluster::start(3, 0, None));
        let route = match (target, &cluster) {
            (_, Some(cluster)) => json!({"type": "single", "target": cluster.url()}),
            ("single", _) => json!({"type": "single", "target": backends[0].url()}),
            _ => {
                let shards: Vec<_> = backends
                    .iter()
                    .enumerate()
                    .map(|(i, b)| json!({"name": format!("s{i}"), "target": b.url()}))
                    .collect();
                json!({"type": "sharded", "shards": shards})
            }
        };
        let gateway = Gateway::start(&json!({"tenants": [
            {"name": "app", "passwords": [password], "route": route}
        ]}));
        wait_for_slot_map_as(gateway.port(), Some(password));
        check(target, &gateway);
    }
}

/// Runs `command` against `gateway` and asserts that it printed `ok`.
fn assert_ok(mut command: Command, client: &str, target: &str, gateway: &Gateway) {
    let output = command
        .env("PORT", gateway.port().to_string())
        .output()
        .unwrap_or_else(|e| panic!("run {client} (scripts/test installs it): {e}"));
    assert!(
        output.status.success() && output.stdout == b"ok\n",
        "[{target}] {client} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn redis_py_with_its_defaults_speaks_resp3_through_the_gateway() {
    each_route("py-password", |target, gateway| {
        let mut python = Command::new("python3");
        python.arg("-c").arg(SCRIPT);
        assert_ok(python, "redis-py", target, gateway);
    });
}

#[test]
fn node_redis_with_its_defaults_speaks_resp3_through_the_gateway() {
    let modules =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/node-clients/node_modules");
    each_route("node-password", |target, gateway| {
        let mut node = Command::new("node");
        node.arg("-e").arg(NODE_SCRIPT).env("NODE_PATH", &modules);
        assert_ok(node, "node-redis", target, gateway);
    });
}
