//! Only Redis steers the gateway: a tenant's script may return any error text, `MOVED` and `ASK` included, and
//! the gateway follows such a redirect only once the cluster itself confirms it (real processes: a Redis Cluster,
//! the gateway binary, a client; the backend is checked, not only the reply). A forged redirect to a stranger gets
//! it no connection and no credential; one to another member does not run a script twice; a genuine `MOVED`
//! after a slot moved is still followed, for scripts and plain commands alike, and so is one to a master that
//! joined the cluster after the gateway read its slot map (once a known member lists it). A blocking command's
//! own connection follows a redirect only to a member too (its reply forged by a relay in front of the node).

use std::io::Read;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use switchyard_schemas::placement::{crc16, hash_tag};
use switchyard_tests::{Gateway, RawClient, RedisCluster, RedisServer, Relay, allocate_port};

const PASSWORD: &str = "cluster-secret";

fn slot(key: &str) -> usize {
    usize::from(crc16(hash_tag(key.as_bytes())) % 16384)
}

/// A listener that accepts every connection and records what it is sent, never answering.
struct Recorder {
    port: u16,
    received: Arc<Mutex<(usize, Vec<u8>)>>,
}

impl Recorder {
    fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new((0, Vec::new())));
        let record = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                record.lock().unwrap().0 += 1;
                let record = Arc::clone(&record);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 {
                            return;
                        }
                        record.lock().unwrap().1.extend_from_slice(&buf[..n]);
                    }
                });
            }
        });
        Recorder { port, received }
    }

    /// Checks, a moment after the fact, that the gateway never connected (so sent no credential).
    fn assert_untouched(&self) {
        std::thread::sleep(Duration::from_millis(300));
        let (connections, bytes) = self.received();
        assert_eq!(
            (connections, bytes.as_str()),
            (0, ""),
            "the gateway reached the stranger"
        );
    }

    /// Connections accepted and bytes received so far.
    fn received(&self) -> (usize, String) {
        let received = self.received.lock().unwrap();
        (
            received.0,
            String::from_utf8_lossy(&received.1).into_owned(),
        )
    }
}

fn eval(client: &mut RawClient, script: &str, key: &str) -> Vec<u8> {
    client.request(&[b"EVAL", script.as_bytes(), b"1", key.as_bytes()])
}

#[test]
fn a_script_cannot_steer_the_gateway_with_a_forged_redirect() {
    let cluster = RedisCluster::start(3, 0, Some(PASSWORD));
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(cluster.url())));
    switchyard_tests::wait_for_slot_map(gateway.port());
    let mut client = RawClient::connect(gateway.port());
    let recorder = Recorder::start();
    let key = "steer:1";
    let stranger = format!("127.0.0.1:{}", recorder.port);

    // A redirect to a stranger, as MOVED and as ASK: the client gets the script's error as it is.
    for kind in ["MOVED", "ASK"] {
        let forged = format!("{kind} {} {stranger}", slot(key));
        let script = format!("return redis.error_reply('{forged}')");
        assert_eq!(
            String::from_utf8_lossy(&eval(&mut client, &script, key)),
            format!("-{forged}\r\n")
        );
    }
    // Nor inside a transaction: EXEC's array holds the script's error as it is.
    let forged = format!("MOVED {} {stranger}", slot(key));
    let script = format!("return redis.error_reply('{forged}')");
    assert_eq!(client.request(&[b"MULTI"]), b"+OK\r\n");
    assert_eq!(eval(&mut client, &script, key), b"+QUEUED\r\n");
    assert_eq!(
        String::from_utf8_lossy(&client.request(&[b"EXEC"])),
        format!("*1\r\n-{forged}\r\n")
    );
    // The slot map is not poisoned: the key's commands still go to its owner.
    assert_eq!(client.request(&[b"SET", key.as_bytes(), b"v"]), b"+OK\r\n");
    assert_eq!(client.request(&[b"GET", key.as_bytes()]), b"$1\r\nv\r\n");
    recorder.assert_untouched();

    // A forged MOVED to another member, from a script that writes: the script ran once, and its error is the
    // client's.
    let counter = "steer:counter";
    let owner = cluster.slot_owners()[slot(counter)];
    let other = cluster
        .masters()
        .into_iter()
        .find(|m| m.port != owner)
        .unwrap()
        .port;
    let forged = format!("MOVED {} {}", slot(counter), cluster.address(other));
    let script = format!("redis.call('INCR', KEYS[1]); return redis.error_reply('{forged}')");
    assert_eq!(
        String::from_utf8_lossy(&eval(&mut client, &script, counter)),
        format!("-{forged}\r\n")
    );
    let count: Option<i64> = redis::cmd("GET")
        .arg(counter)
        .query(&mut cluster.client(owner))
        .unwrap();
    assert_eq!(count, Some(1), "the script ran once");
    // A forged MOVED that names the node that answered is never Redis' own either.
    let itself = format!("MOVED {} {}", slot(counter), cluster.address(owner));
    let script = format!("redis.call('INCR', KEYS[1]); return redis.error_reply('{itself}')");
    assert_eq!(
        String::from_utf8_lossy(&eval(&mut client, &script, counter)),
        format!("-{itself}\r\n")
    );
    let count: Option<i64> = redis::cmd("GET")
        .arg(counter)
        .query(&mut cluster.client(owner))
        .unwrap();
    assert_eq!(count, Some(2), "the script ran once more, not twice");
    assert_eq!(recorder.received().0, 0);
}

#[test]
fn a_genuine_moved_is_still_followed_by_scripts_and_commands() {
    let cluster = RedisCluster::start(3, 0, Some(PASSWORD));
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(cluster.url())));
    switchyard_tests::wait_for_slot_map(gateway.port());
    let mut client = RawClient::connect(gateway.port());
    let (counter, plain) = ("moved:{a}counter", "moved:{a}plain");
    assert_eq!(
        client.request(&[b"SET", counter.as_bytes(), b"10"]),
        b"+OK\r\n"
    );
    assert_eq!(
        client.request(&[b"SET", plain.as_bytes(), b"v"]),
        b"+OK\r\n"
    );

    // The slot moves from A to B behind the gateway's back (its map still says A).
    let masters = cluster.masters();
    let a = cluster.slot_owners()[slot(counter)];
    let id = |port: u16| masters.iter().find(|m| m.port == port).unwrap().id.clone();
    let b = masters.iter().find(|m| m.port != a).unwrap().port;
    cluster.set_slot(b, slot(counter), &["IMPORTING", &id(a)]);
    cluster.set_slot(a, slot(counter), &["MIGRATING", &id(b)]);
    cluster.migrate(a, b, &[counter, plain]);
    for master in &masters {
        cluster.set_slot(master.port, slot(counter), &["NODE", &id(b)]);
    }

    let script = "return redis.call('INCR', KEYS[1])";
    assert_eq!(eval(&mut client, script, counter), b":11\r\n");
    assert_eq!(client.request(&[b"GET", plain.as_bytes()]), b"$1\r\nv\r\n");
    let count: Option<i64> = redis::cmd("GET")
        .arg(counter)
        .query(&mut cluster.client(b))
        .unwrap();
    assert_eq!(
        count,
        Some(11),
        "the script ran once, on the slot's new master"
    );
    assert!(
        cluster.errorstat(a, "MOVED") > 0,
        "A answered MOVED (the gateway's map was stale)"
    );
}

#[test]
fn a_redirect_to_a_master_that_joined_later_is_followed_once_the_cluster_lists_it() {
    let cluster = RedisCluster::start(3, 0, Some(PASSWORD));
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(cluster.url())));
    switchyard_tests::wait_for_slot_map(gateway.port());
    let mut client = RawClient::connect(gateway.port());
    let key = "joined:{b}key";
    assert_eq!(client.request(&[b"SET", key.as_bytes(), b"v"]), b"+OK\r\n");

    // A fourth node joins as an empty master, and the key's slot moves to it: the gateway has never heard of it.
    let newcomer = RedisServer::builder()
        .arg("--cluster-enabled")
        .arg("yes")
        .arg("--cluster-config-file")
        .arg("nodes.conf")
        .arg("--cluster-node-timeout")
        .arg("1000")
        .password(PASSWORD)
        .arg("--masterauth")
        .arg(PASSWORD)
        .start();
    let a = cluster.slot_owners()[slot(key)];
    let () = redis::cmd("CLUSTER")
        .arg("MEET")
        .arg("127.0.0.1")
        .arg(newcomer.port())
        .query(&mut cluster.client(a))
        .unwrap();
    let mut new = redis::Client::open(format!("redis://:{PASSWORD}@127.0.0.1:{}", newcomer.port()))
        .unwrap()
        .get_connection()
        .unwrap();
    let new_id: String = redis::cmd("CLUSTER").arg("MYID").query(&mut new).unwrap();
    switchyard_tests::wait_for(
        "every node to know the newcomer",
        Duration::from_secs(20),
        || {
            cluster
                .live_ports()
                .iter()
                .all(|&port| cluster.nodes_seen_by(port).iter().any(|n| n.id == new_id))
        },
    );
    switchyard_tests::wait_for(
        "the newcomer to see the cluster up",
        Duration::from_secs(20),
        || {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut new).unwrap();
            info.contains("cluster_state:ok")
        },
    );
    let a_id = cluster
        .masters()
        .into_iter()
        .find(|m| m.port == a)
        .unwrap()
        .id;
    let set_slot = |con: &mut redis::Connection, how: &[&str]| {
        let () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot(key))
            .arg(how)
            .query(con)
            .unwrap();
    };
    set_slot(&mut new, &["IMPORTING", &a_id]);
    cluster.set_slot(a, slot(key), &["MIGRATING", &new_id]);
    let () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(newcomer.port())
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("AUTH")
        .arg(PASSWORD)
        .arg("KEYS")
        .arg(key)
        .query(&mut cluster.client(a))
        .unwrap();
    set_slot(&mut new, &["NODE", &new_id]);
    for master in cluster.masters() {
        cluster.set_slot(master.port, slot(key), &["NODE", &new_id]);
    }

    // A's MOVED names the newcomer, which a known member lists: followed.
    assert_eq!(client.request(&[b"GET", key.as_bytes()]), b"$1\r\nv\r\n");
    let script = "return redis.call('GET', KEYS[1])";
    assert_eq!(eval(&mut client, script, key), b"$1\r\nv\r\n");
    assert!(cluster.errorstat(a, "MOVED") > 0, "A answered MOVED");
}

/// A blocking command has a connection of its own, which follows a redirect of its reply itself (see
/// `stateful_blocking`): only to a member, as the shared connections do. A one-node cluster announces the port of
/// a relay in front of it, so the gateway reaches the node through the relay, which forges the command's reply.
#[test]
fn a_blocking_command_connection_follows_no_redirect_to_a_stranger() {
    let port = allocate_port();
    let relay = Relay::start(port);
    let _node = RedisServer::builder()
        .password(PASSWORD)
        .arg("--cluster-enabled")
        .arg("yes")
        .arg("--cluster-announce-port")
        .arg(&relay.port().to_string())
        .start_on(port);
    let mut admin = redis::Client::open(format!("redis://:{PASSWORD}@127.0.0.1:{port}"))
        .and_then(|c| c.get_connection())
        .unwrap();
    let () = redis::cmd("CLUSTER")
        .arg(&["ADDSLOTSRANGE", "0", "16383"])
        .query(&mut admin)
        .unwrap();
    switchyard_tests::wait_for("the one-node cluster", Duration::from_secs(10), || {
        redis::cmd("CLUSTER")
            .arg("INFO")
            .query::<String>(&mut admin)
            .is_ok_and(|info| info.contains("cluster_state:ok"))
    });
    let url = format!("redis-cluster://:{PASSWORD}@127.0.0.1:{}", relay.port());
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(url)));
    switchyard_tests::wait_for_slot_map(gateway.port());
    let mut client = RawClient::connect(gateway.port());
    let recorder = Recorder::start();
    let key = "queue:1";
    assert_eq!(client.request(&[b"RPUSH", key.as_bytes(), b"a"]), b":1\r\n");

    let forged = format!("MOVED {} 127.0.0.1:{}", slot(key), recorder.port);
    relay.answer("BLPOP", format!("-{forged}\r\n").as_bytes());
    assert_eq!(
        String::from_utf8_lossy(&client.request(&[b"BLPOP", key.as_bytes(), b"1"])),
        format!(
            "-ERR cluster redirect to a node that is not a member of the cluster ({forged})\r\n"
        )
    );
    recorder.assert_untouched();
    // The connection goes on with its node: the next blocking command is the node's to answer.
    assert_eq!(
        client.request(&[b"BLPOP", key.as_bytes(), b"1"]),
        b"*2\r\n$7\r\nqueue:1\r\n$1\r\na\r\n"
    );
}
