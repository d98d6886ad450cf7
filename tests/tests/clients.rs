//! Today's default clients, redis-py 8 (from PyPI) and node-redis 6 (from npm; `scripts/test` installs both),
//! with every option left as it is: they speak RESP3 (`HELLO 3 AUTH ...` on connect), and the first things an
//! application does through the gateway work, with the types a RESP3 client gets (maps as dicts, doubles as
//! floats, nulls), pub/sub included, and the library name and version they send with `CLIENT SETINFO` show in
//! `CLIENT INFO`; through one Redis, a ring of three, a Redis Cluster, and one Redis over TLS on both hops (the
//! gateway's TLS listener, a `rediss://` route). Over TLS too: redis-py presenting a client certificate to a
//! gateway that requires one, and refused without it; `redis-cli --tls` and `redis-benchmark --tls`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use switchyard_tests::{
    CertFiles, Gateway, Pki, RedisCluster, RedisServer, Validity, wait_for_slot_map_as,
};

/// redis-py's connection options from the environment: TLS trusting `CA` when set, presenting `CERT` and `KEY`
/// when set too.
const PY_CONNECT: &str = r#"
import os, redis
tls = {}
if "CA" in os.environ:
    tls = {"ssl": True, "ssl_ca_certs": os.environ["CA"]}
if "CERT" in os.environ:
    tls.update(ssl_certfile=os.environ["CERT"], ssl_keyfile=os.environ["KEY"])
r = redis.Redis(host="127.0.0.1", port=int(os.environ["PORT"]), password="py-password", **tls)
"#;

const SCRIPT: &str = r#"
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
const fs = require('fs');
const { createClient } = require('redis');
(async () => {
  // TLS trusting CA when it is set.
  const tls = process.env.CA !== undefined;
  const client = createClient({
    url: `${tls ? 'rediss' : 'redis'}://default:node-password@127.0.0.1:${process.env.PORT}`,
    socket: tls ? { tls: true, ca: fs.readFileSync(process.env.CA) } : {},
  });
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

/// Where a client connects: a gateway's plain port, or its TLS listener with the CA that signed its certificate.
struct Endpoint<'a> {
    port: u16,
    ca: Option<&'a Path>,
}

impl Endpoint<'_> {
    fn plain(gateway: &Gateway) -> Endpoint<'_> {
        Endpoint {
            port: gateway.port(),
            ca: None,
        }
    }

    /// The environment the client scripts read: `PORT`, and `CA` over TLS.
    fn configure(&self, command: &mut Command) {
        command.env("PORT", self.port.to_string());
        if let Some(ca) = self.ca {
            command.env("CA", ca);
        }
    }
}

fn tenant(password: &str, route: Value) -> Value {
    json!({"tenants": [{"name": "app", "passwords": [password], "route": route}]})
}

/// A redis-server with a TLS port, and a gateway with a TLS listener routing the tenant to that port
/// (`rediss://`); `client_ca` makes the gateway require client certificates signed by it.
fn tls_gateway(pki: &Pki, password: &str, client_ca: Option<&Path>) -> (RedisServer, Gateway) {
    let backend = RedisServer::builder().tls(pki, false).start();
    let target = format!(
        "rediss://127.0.0.1:{}?tlsCaFile={}",
        backend.tls_port(),
        pki.ca_file().display()
    );
    let gateway = Gateway::builder()
        .tls(&pki.server("gateway", &["127.0.0.1"]), client_ca)
        .start(&tenant(
            password,
            json!({"type": "single", "target": target}),
        ));
    (backend, gateway)
}

/// One tenant's gateway for each route kind: one Redis, a ring over three, a Redis Cluster of three masters, and
/// one Redis over TLS on both hops.
fn each_route(password: &str, mut check: impl FnMut(&str, &Endpoint)) {
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
        let gateway = Gateway::start(&tenant(password, route));
        wait_for_slot_map_as(gateway.port(), Some(password));
        check(target, &Endpoint::plain(&gateway));
    }
    let pki = Pki::new("clients");
    let (_backend, gateway) = tls_gateway(&pki, password, None);
    let ca = pki.ca_file();
    let endpoint = Endpoint {
        port: gateway.tls_port(),
        ca: Some(&ca),
    };
    check("single over TLS", &endpoint);
}

/// Runs `command`, waiting for it to finish (`client` names it in a panic).
fn run(command: &mut Command, client: &str) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("run {client} (scripts/test installs it): {e}"))
}

/// Runs `command` against `endpoint` and asserts that it printed `ok`.
fn assert_ok(mut command: Command, client: &str, target: &str, endpoint: &Endpoint) {
    endpoint.configure(&mut command);
    let output = run(&mut command, client);
    assert!(
        output.status.success() && output.stdout == b"ok\n",
        "[{target}] {client} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn python(script: &str) -> Command {
    let mut python = Command::new("python3");
    python.arg("-c").arg(format!("{PY_CONNECT}{script}"));
    python
}

#[test]
fn redis_py_with_its_defaults_speaks_resp3_through_the_gateway() {
    each_route("py-password", |target, endpoint| {
        assert_ok(python(SCRIPT), "redis-py", target, endpoint);
    });
}

#[test]
fn node_redis_with_its_defaults_speaks_resp3_through_the_gateway() {
    let modules =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/node-clients/node_modules");
    each_route("node-password", |target, endpoint| {
        let mut node = Command::new("node");
        node.arg("-e").arg(NODE_SCRIPT).env("NODE_PATH", &modules);
        assert_ok(node, "node-redis", target, endpoint);
    });
}

/// redis-py with a client certificate (`ssl_certfile`/`ssl_keyfile`) through a gateway that requires one
/// (`--tls-client-ca`): a certificate its CA signed gets in; none, or one another CA signed, does not.
#[test]
fn redis_py_presents_a_client_certificate_to_a_gateway_that_requires_one() {
    let pki = Pki::new("py-mtls");
    let clients = Pki::new("py-clients");
    let strangers = Pki::new("py-strangers");
    let (_backend, gateway) = tls_gateway(&pki, "py-password", Some(&clients.ca_file()));
    let ca = pki.ca_file();
    let endpoint = Endpoint {
        port: gateway.tls_port(),
        ca: Some(&ca),
    };
    let with = |certificate: Option<&CertFiles>, script: &str| {
        let mut command = python(script);
        if let Some(files) = certificate {
            command.env("CERT", &files.cert).env("KEY", &files.key);
        }
        command
    };
    let app = clients.issue("app", &["app"], Validity::Current);
    assert_ok(
        with(
            Some(&app),
            "assert r.set('k', 'v') and r.get('k') == b'v'\nprint('ok')",
        ),
        "redis-py",
        "client certificate",
        &endpoint,
    );
    let stranger = strangers.issue("stranger", &["stranger"], Validity::Current);
    for certificate in [None, Some(&stranger)] {
        // The handshake fails, or (TLS 1.3: the client's certificate is checked after its side of the handshake
        // is done) the first read does; either way redis-py raises ConnectionError and nothing is written.
        let refused = "try:\n    r.set('k', 'intruder')\nexcept redis.exceptions.ConnectionError as e:\n    print('ok')\n";
        assert_ok(
            with(certificate, refused),
            "redis-py",
            &format!("certificate {certificate:?}"),
            &endpoint,
        );
    }
    assert_ok(
        with(Some(&app), "assert r.get('k') == b'v'\nprint('ok')"),
        "redis-py",
        "client certificate, after the refusals",
        &endpoint,
    );
}

/// `redis-cli --tls` and `redis-benchmark --tls` (a short run of every default test, 50 clients) through the
/// gateway's TLS listener to a TLS Redis: every command answered, none with an error.
#[test]
fn redis_cli_and_redis_benchmark_speak_tls_to_the_gateway() {
    let pki = Pki::new("tools");
    let (backend, gateway) = tls_gateway(&pki, "tools-password", None);
    let tls_options = |command: &mut Command| {
        command
            .args(["-h", "127.0.0.1", "-p", &gateway.tls_port().to_string()])
            .args(["--tls", "--cacert"])
            .arg(pki.ca_file())
            .args(["-a", "tools-password"]);
    };
    let mut cli = Command::new("redis-cli");
    tls_options(&mut cli);
    cli.args(["--no-auth-warning", "--pipe"]);
    let mut cli = cli
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run redis-cli");
    {
        use std::io::Write;
        let mut stdin = cli.stdin.take().expect("redis-cli's stdin");
        for i in 0..1000 {
            write!(stdin, "SET cli:{i} {i}\r\n").expect("write to redis-cli");
        }
    }
    let output = cli.wait_with_output().expect("redis-cli --pipe");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && report.contains("errors: 0, replies: 1000"),
        "redis-cli --pipe: {report}"
    );
    let mut cli = Command::new("redis-cli");
    tls_options(&mut cli);
    cli.args(["--no-auth-warning", "MGET", "cli:0", "cli:999", "missing"]);
    let output = run(&mut cli, "redis-cli");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "0\n999\n\n",
        "{output:?}"
    );

    let mut benchmark = Command::new("redis-benchmark");
    tls_options(&mut benchmark);
    benchmark.args(["-n", "1000", "-c", "50", "-r", "1000", "--csv"]);
    let output = run(&mut benchmark, "redis-benchmark");
    let csv = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // redis-benchmark asks CONFIG GET of the server first; the gateway answers it only for admin tenants.
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|line| *line != "WARNING: Could not fetch server CONFIG")
        .collect();
    let tests = csv.lines().skip(1).count();
    assert!(
        output.status.success() && errors.is_empty() && tests >= 15,
        "redis-benchmark --tls: {tests} tests, errors {errors:?}:\n{csv}"
    );
    // Its SETs reached the Redis behind the gateway.
    let dbsize: i64 = redis::cmd("DBSIZE")
        .query(&mut backend.client())
        .expect("DBSIZE");
    assert!(dbsize > 1000, "{dbsize} keys on the backend");
}
