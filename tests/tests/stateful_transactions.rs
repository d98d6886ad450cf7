//! Transactions end to end: replies compared byte for byte with a plain redis-server over a single shard, a ring
//! of three and a Redis Cluster (errors included); WATCH conflicts; CROSSSLOT inside a transaction; double-write.

use std::time::Duration;

use serde_json::json;
use switchyard_tests::compare::{Topology, each_topology};
use switchyard_tests::{
    Gateway, RawClient, RedisServer, connections_received, open_tenant, wait_for, wait_for_slot_map,
};

#[test]
fn transactions_answer_as_redis_does() {
    each_topology(|c| {
        wait_for_slot_map(c.gateway().port());
        c.all_same(&[
            &["MULTI"],
            &["SET", "{t}a", "1"],
            &["INCR", "{t}a"],
            &["LPUSH", "{t}l", "x", "y"],
            &["GET", "{t}a"],
            &["PING"],
            &["ECHO", "hi"],
            &["EXEC"],
            &["GET", "{t}a"],
            // An empty transaction, and one whose only commands are keyless.
            &["MULTI"],
            &["EXEC"],
            &["MULTI"],
            &["PING", "x"],
            &["EXEC"],
            // A command failing at run time fails alone, inside EXEC's reply.
            &["MULTI"],
            &["SET", "{t}s", "abc"],
            &["INCR", "{t}s"],
            &["GET", "{t}s"],
            &["EXEC"],
            // DISCARD throws the queue away.
            &["MULTI"],
            &["SET", "{t}a", "discarded"],
            &["DISCARD"],
            &["GET", "{t}a"],
            // The errors Redis gives outside and inside a transaction.
            &["EXEC"],
            &["DISCARD"],
            &["MULTI"],
            &["MULTI"],
            &["WATCH", "{t}a"],
            &["SET", "{t}a", "2"],
            &["EXEC"],
            &["GET", "{t}a"],
            // Refused at queue time: the transaction is aborted.
            &["MULTI"],
            &["SET", "{t}a", "3"],
            &["NOSUCHCOMMAND", "x"],
            &["EXEC"],
            &["MULTI"],
            &["GET"],
            &["SET", "{t}a", "4"],
            &["EXEC"],
            &["MULTI"],
            &["SET", "{t}a", "5"],
            &["WATCH", "{t}a"],
            &["EXEC"],
            &["GET", "{t}a"],
            // WATCH without a conflict, UNWATCH.
            &["WATCH", "{t}a", "{t}b"],
            &["MULTI"],
            &["SET", "{t}b", "1"],
            &["EXEC"],
            &["WATCH", "{t}a"],
            &["UNWATCH"],
            &["UNWATCH"],
            &["MULTI"],
            &["GET", "{t}b"],
            &["EXEC"],
            &["WATCH", "{t}a"],
            &["DEL", "{t}b"],
            &["GET", "{t}a"],
            &["MULTI"],
            &["EXISTS", "{t}b"],
            &["EXEC"],
        ]);
        // RESET leaves the transaction and forgets the client's name.
        c.all_same(&[
            &["CLIENT", "SETNAME", "named"],
            &["WATCH", "{t}a"],
            &["MULTI"],
            &["SET", "{t}r", "1"],
            &["RESET"],
            &["CLIENT", "GETNAME"],
            &["EXEC"],
            &["GET", "{t}r"],
        ]);
        // A whole transaction in one pipeline, with the commands around it in order.
        c.pipeline_same(&[
            &["SET", "{p}n", "1"],
            &["MULTI"],
            &["INCR", "{p}n"],
            &["INCRBY", "{p}n", "10"],
            &["EXEC"],
            &["GET", "{p}n"],
            &["WATCH", "{p}n"],
            &["MULTI"],
            &["DECR", "{p}n"],
            &["EXEC"],
            &["GET", "{p}n"],
        ]);
        // Keys of another shard or slot inside a transaction: CROSSSLOT, and the transaction fails, as on a
        // Redis Cluster ("a" and "b" are on different slots and, on the ring, different shards).
        let crossslot = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";
        let split = c.topology() != Topology::Single;
        c.same(&["MULTI"]);
        c.same(&["SET", "a", "1"]);
        if split {
            let why =
                "docs/stateful.md#transactions: keys of one transaction share a shard and slot";
            c.differs(&["SET", "b", "1"], crossslot, why);
            c.differs(
                &["EXEC"],
                b"-EXECABORT Transaction discarded because of previous errors.\r\n",
                why,
            );
            c.differs(&["WATCH", "a", "b"], crossslot, why);
        } else {
            c.same(&["SET", "b", "1"]);
            c.same(&["EXEC"]);
            c.same(&["WATCH", "a", "b"]);
        }
        c.same(&["UNWATCH"]);
    });
}

#[test]
fn a_watch_conflict_aborts_exec() {
    each_topology(|c| {
        let gateway_port = c.gateway().port();
        wait_for_slot_map(gateway_port);
        c.same(&["SET", "{w}k", "1"]);
        c.same(&["WATCH", "{w}k"]);
        // Another client of the gateway changes the key.
        let mut other = RawClient::connect(gateway_port);
        assert_eq!(other.request(&[b"SET", b"{w}k", b"2"]), b"+OK\r\n");
        let (_, gateway) = c.both(&["MULTI"]);
        assert_eq!(gateway, b"+OK\r\n");
        c.both(&["SET", "{w}k", "3"]);
        let (_, exec) = c.both(&["EXEC"]);
        // Nil: RESP2's null array, RESP3's null.
        let aborted: &[u8] = if c.protocol() == 3 {
            b"_\r\n"
        } else {
            b"*-1\r\n"
        };
        assert_eq!(exec, aborted, "[{}] EXEC after a conflict", c.topology());
        assert_eq!(other.request(&[b"GET", b"{w}k"]), b"$1\r\n2\r\n");
        // The next transaction, without a conflict, runs.
        c.both(&["WATCH", "{w}k"]);
        c.both(&["MULTI"]);
        c.both(&["SET", "{w}k", "4"]);
        let (_, exec) = c.both(&["EXEC"]);
        assert_eq!(exec, b"*1\r\n+OK\r\n");
    });
}

/// How many clients the backend has.
fn backend_clients(backend: &RedisServer) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut backend.client())
        .unwrap();
    list.lines().count()
}

#[test]
fn a_transaction_on_a_double_written_route_reaches_the_secondaries_after_exec() {
    let (primary, secondary) = (RedisServer::start(), RedisServer::start());
    let route = json!({"type": "single", "target": {
        "write": {"resources": [primary.url(), secondary.url()], "ack": "primary"}}});
    let gateway = Gateway::start(&open_tenant(route));
    let mut client = RawClient::connect(gateway.port());
    let idle = backend_clients(&primary);
    client.send(
        b"MULTI\r\nSET a 1\r\nRPUSH l x y\r\nGET a\r\nINCR a\r\nEXEC\r\nMULTI\r\nSET b 1\r\nDISCARD\r\n",
    );
    client.expect(
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*4\r\n+OK\r\n:2\r\n$1\r\n1\r\n:2\r\n",
    );
    client.expect(b"+OK\r\n+QUEUED\r\n+OK\r\n");
    let mut on_secondary = secondary.client();
    wait_for(
        "the writes on the secondary",
        Duration::from_secs(20),
        || {
            redis::cmd("GET")
                .arg("a")
                .query::<Option<String>>(&mut on_secondary)
                .unwrap()
                .as_deref()
                == Some("2")
        },
    );
    let list: Vec<String> = redis::cmd("LRANGE")
        .arg("l")
        .arg(0)
        .arg(-1)
        .query(&mut on_secondary)
        .unwrap();
    assert_eq!(list, ["x", "y"]);
    let discarded: Option<String> = redis::cmd("GET").arg("b").query(&mut on_secondary).unwrap();
    assert_eq!(discarded, None);

    // A write with a random effect cannot be replayed on the secondaries: refused at queue time.
    client.send(b"MULTI\r\nSET d 1\r\nSPOP s\r\nEXEC\r\nEXISTS d\r\n");
    client.expect(
        b"+OK\r\n+QUEUED\r\n-ERR SPOP is refused on a double-written route: its effect is random and the copies would diverge\r\n\
          -EXECABORT Transaction discarded because of previous errors.\r\n:0\r\n",
    );

    // An aborted transaction reaches no secondary either.
    client.send(b"WATCH a\r\n");
    client.expect(b"+OK\r\n");
    let _: () = redis::cmd("SET")
        .arg("a")
        .arg("changed")
        .query(&mut primary.client())
        .unwrap();
    client.send(b"MULTI\r\nSET c 1\r\nEXEC\r\nSET marker 1\r\n");
    client.expect(b"+OK\r\n+QUEUED\r\n*-1\r\n+OK\r\n");
    wait_for(
        "the marker on the secondary",
        Duration::from_secs(20),
        || {
            redis::cmd("EXISTS")
                .arg("marker")
                .query::<i64>(&mut on_secondary)
                .unwrap()
                == 1
        },
    );
    assert_eq!(
        redis::cmd("EXISTS")
            .arg("c")
            .query::<i64>(&mut on_secondary)
            .unwrap(),
        0
    );
    // Every dedicated connection is gone once the transactions are over, but for the spare the worker keeps
    // ready for the next (`--dedicated-spares`, 1).
    wait_for(
        "dedicated connections released",
        Duration::from_secs(20),
        || backend_clients(&primary) == idle + 1,
    );
}

#[test]
fn a_transaction_without_watch_rides_the_shared_connection() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(backend.url())));
    let mut client = RawClient::connect(gateway.port());
    assert_eq!(client.request(&[b"GET", b"a"]), b"$-1\r\n");
    let mut probe = backend.client();
    let before = connections_received(&mut probe);
    client.send(b"SET a 0\r\nMULTI\r\nINCR a\r\nINCR a\r\nEXEC\r\nGET a\r\n");
    client.expect(b"+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n:2\r\n$1\r\n2\r\n");
    assert_eq!(
        connections_received(&mut probe),
        before,
        "no new connection"
    );
    // WATCH needs a connection of its own (and the worker makes a spare for the next one).
    client.send(b"WATCH a\r\nMULTI\r\nINCR a\r\nEXEC\r\n");
    client.expect(b"+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n:3\r\n");
    wait_for(
        "the WATCH connection and a spare",
        Duration::from_secs(20),
        || connections_received(&mut probe) == before + 2,
    );
}

#[test]
fn a_cluster_transaction_without_watch_rides_the_shared_connection_to_its_master() {
    let comparison = switchyard_tests::compare::Comparison::start(Topology::Cluster);
    let port = comparison.gateway().port();
    wait_for_slot_map(port);
    let switchyard_tests::compare::Backends::Cluster(cluster) = comparison.backends() else {
        panic!("a cluster");
    };
    let total = || -> i64 {
        cluster
            .live_ports()
            .into_iter()
            .map(|p| connections_received(&mut cluster.client(p)))
            .sum()
    };
    let mut client = RawClient::connect(port);
    assert_eq!(client.request(&[b"SET", b"{x}a", b"0"]), b"+OK\r\n");
    let nodes = cluster.live_ports().len() as i64;
    let before = total();
    client.send(b"MULTI\r\nINCR {x}a\r\nINCR {x}b\r\nEXEC\r\nMULTI\r\nGET {x}a\r\nEXEC\r\n");
    client.expect(
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n:1\r\n+OK\r\n+QUEUED\r\n*1\r\n$1\r\n1\r\n",
    );
    assert_eq!(total(), before + nodes, "no connection but the ones asking");
}
