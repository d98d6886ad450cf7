//! node-redis 6's own client-side cache (`clientSideCache`) through the gateway.

use std::path::PathBuf;
use std::process::Command;

use switchyard_tests::{RedisServer, command_calls};

use crate::harness::*;

/// node-redis 6 with `clientSideCache`: the second read is answered from its cache (no second `GET` reaches
/// Redis), and a write by another client invalidates it.
const NODE_SCRIPT: &str = r#"
const assert = require('assert');
const { createClient, BasicClientSideCache } = require('redis');
(async () => {
  const url = `redis://default:${process.env.PASSWORD}@127.0.0.1:${process.env.PORT}`;
  const cache = new BasicClientSideCache();
  const client = createClient({ url, RESP: 3, clientSideCache: cache });
  const writer = createClient({ url });
  await client.connect();
  await writer.connect();
  await writer.set('k', 'v1');
  for (let i = 0; i < 5; i++) assert.equal(await client.get('k'), 'v1');
  assert.equal(cache.stats().hitCount, 4);
  await writer.set('k', 'v2');
  const deadline = Date.now() + 2000;
  let value;
  while ((value = await client.get('k')) !== 'v2' && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  assert.equal(value, 'v2');
  for (let i = 0; i < 5; i++) assert.equal(await client.get('k'), 'v2');
  await client.quit();
  await writer.quit();
  console.log('ok');
})().catch((e) => { console.error(e); process.exit(1); });
"#;

#[test]
fn node_redis_client_side_cache_works_through_the_gateway() {
    let backend = RedisServer::start();
    let gateway = start(&backend, Some("ns:"));
    let mut redis = backend.client();
    let modules =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/node-clients/node_modules");
    let before = command_calls(&mut redis, "get");
    let output = Command::new("node")
        .arg("-e")
        .arg(NODE_SCRIPT)
        .env("NODE_PATH", &modules)
        .env("PORT", gateway.port().to_string())
        .env("PASSWORD", PASSWORD)
        .output()
        .expect("run node (scripts/test installs node-redis)");
    assert!(
        output.status.success() && output.stdout == b"ok\n",
        "node-redis failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // One GET before the write, one after it: every other read was a hit.
    assert_eq!(command_calls(&mut redis, "get"), before + 2);
}
