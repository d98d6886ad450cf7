//! Today's default Python client, redis-py 8 (from PyPI; `scripts/test` installs it), with every option left as
//! it is: it speaks RESP3 (`HELLO 3 AUTH ...` on connect), and the first things an application does through the
//! gateway work, with the types a RESP3 client gets (maps as dicts, doubles as floats, nulls).

use std::process::Command;

use serde_json::json;
use switchyard_tests::{Gateway, RedisServer};

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
assert r.blpop(["empty"], timeout=0.1) is None
print("ok")
"#;

#[test]
fn redis_py_with_its_defaults_speaks_resp3_through_the_gateway() {
    for target in ["single", "sharded"] {
        let backends: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let route = match target {
            "single" => json!({"type": "single", "target": backends[0].url()}),
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
            {"name": "py", "passwords": ["py-password"], "route": route}
        ]}));
        let output = Command::new("python3")
            .arg("-c")
            .arg(SCRIPT)
            .env("PORT", gateway.port().to_string())
            .output()
            .expect("run python3 (scripts/test installs redis-py)");
        assert!(
            output.status.success() && output.stdout == b"ok\n",
            "[{target}] redis-py failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
