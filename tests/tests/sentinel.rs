//! A sentinel-managed master behind the gateway, with real processes: a master, two replicas and three sentinels
//! (sentinels with their own password, data nodes reached as an ACL user). Replica reads spread over the replicas,
//! a `SENTINEL FAILOVER` under write load is followed within 2 s, and the old master, restarted as a replica,
//! never gets a write from the gateway. Both tests run for clients speaking RESP2 and RESP3.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_tests::{
    Gateway, SentinelGroup, assert_speaks, each_protocol_async, wait_for, wait_for_async,
};

/// Gateway clients (not the replication link) on a node whose last command was a write.
fn gateway_writers(group: &SentinelGroup, port: u16) -> Vec<String> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut group.client(port))
        .unwrap();
    list.lines()
        .filter(|line| line.contains("user=gateway") && !line.contains("cmd=role"))
        .filter(|line| {
            ["cmd=set", "cmd=incr", "cmd=del"]
                .iter()
                .any(|c| line.contains(c))
        })
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_failover_spreads_replica_reads_and_never_writes_to_a_demoted_master() {
    each_protocol_async(follows_a_failover_speaking).await;
}

async fn follows_a_failover_speaking(protocol: u8) {
    let mut group = SentinelGroup::start(2, 3);
    let old_master = group.master_port();
    let route = json!({"read": {"resources": [group.slaves_url(false)]},
                       "write": {"resources": [group.url()]}});
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(route));
    let mut client = gateway.client_speaking(None, protocol).await;
    assert_speaks(&mut client, protocol, "speaks").await;

    // Writes reach the master; reads spread over both replicas and never touch the master.
    for i in 0..100 {
        let () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query_async(&mut client)
            .await
            .unwrap();
    }
    let replicas: Vec<u16> = group
        .data_ports()
        .into_iter()
        .filter(|&p| p != old_master)
        .collect();
    wait_for("replicas to catch up", Duration::from_secs(10), || {
        replicas.iter().all(|&p| {
            redis::cmd("DBSIZE")
                .query::<i64>(&mut group.client(p))
                .unwrap_or(0)
                == 100
        })
    });
    for port in group.data_ports() {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut group.client(port))
            .unwrap();
    }
    for i in 0..100 {
        let value: i64 = redis::cmd("GET")
            .arg(format!("k{i}"))
            .query_async(&mut client)
            .await
            .unwrap();
        assert_eq!(value, i);
    }
    let reads: Vec<u64> = replicas
        .iter()
        .map(|&p| switchyard_tests::command_calls(&mut group.client(p), "get"))
        .collect();
    assert_eq!(reads.iter().sum::<u64>(), 100, "{reads:?}");
    assert!(
        reads.iter().all(|&r| r >= 25),
        "reads spread over the replicas: {reads:?}"
    );
    assert_eq!(
        switchyard_tests::command_calls(&mut group.client(old_master), "get"),
        0
    );

    // SENTINEL FAILOVER under write load.
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let writer = {
        let stop = Arc::clone(&stop);
        let acknowledged = Arc::clone(&acknowledged);
        let mut client = gateway.client_speaking(None, protocol).await;
        assert_speaks(&mut client, protocol, "speaks:writer").await;
        tokio::spawn(async move {
            let mut n = 0u64;
            let mut errors = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let set: redis::RedisResult<()> = redis::cmd("SET")
                    .arg("counter")
                    .arg(n)
                    .query_async(&mut client)
                    .await;
                match set {
                    Ok(()) => acknowledged.store(n, Ordering::Relaxed),
                    Err(_) => errors += 1,
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            errors
        })
    };
    wait_for_async("the writer under way", Duration::from_secs(10), || {
        acknowledged.load(Ordering::Relaxed) >= 20
    })
    .await;
    group.failover();
    let asked = Instant::now();
    let mut new_master = old_master;
    wait_for(
        "the sentinels to switch masters",
        Duration::from_secs(15),
        || {
            new_master = group.master_port();
            new_master != old_master
        },
    );
    let switched = Instant::now();
    let at_switch = acknowledged.load(Ordering::Relaxed);
    // Followed: a write acknowledged after the switch is on the new master (the old master's late writes never
    // reach it: it no longer replicates from there).
    let mut check = group.client(new_master);
    let followed = loop {
        let acked = acknowledged.load(Ordering::Relaxed);
        let stored: Option<u64> = redis::cmd("GET")
            .arg("counter")
            .query(&mut check)
            .unwrap_or(None);
        if acked > at_switch && stored.is_some_and(|v| v >= acked) {
            break switched.elapsed();
        }
        assert!(
            switched.elapsed() < Duration::from_secs(5),
            "the gateway did not follow the switch"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!(
        "sentinels switched {:?} after SENTINEL FAILOVER; gateway writes reached the new master {followed:?} after the switch",
        switched - asked
    );
    assert!(
        followed < Duration::from_secs(2),
        "followed after {followed:?}; gateway log:\n{}",
        gateway.log()
    );

    // The old master, restarted as a replica, gets no write from the gateway. A negative check, so a bounded
    // one: from when it answers again, for a little longer than the gateway's longest wait before reconnecting to
    // a node (1 s), and until a write 20 further on than the last acknowledged one is acknowledged too.
    group.kill(old_master);
    group.restart_as_replica(old_master, new_master);
    let restarted = Instant::now();
    let before = acknowledged.load(Ordering::Relaxed);
    while restarted.elapsed() < Duration::from_millis(1200)
        || acknowledged.load(Ordering::Relaxed) < before + 20
    {
        assert!(gateway_writers(&group, old_master).is_empty());
        assert!(
            restarted.elapsed() < Duration::from_secs(10),
            "the writer stalled after the old master came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let errors = writer.await.unwrap();
    let last = acknowledged.load(Ordering::Relaxed);
    let writers = gateway_writers(&group, old_master);
    assert!(
        writers.is_empty(),
        "gateway writes on the demoted master: {writers:?}"
    );
    let stored: u64 = redis::cmd("GET")
        .arg("counter")
        .query(&mut group.client(new_master))
        .unwrap();
    assert_eq!(
        stored, last,
        "the last acknowledged write is what the master holds"
    );
    eprintln!("{last} writes during the failover, {errors} failed");
}

/// The window camellia users hit: the master dies and comes back as a replica before the sentinels notice, so
/// they still name it. Its connections check `ROLE` on connect, so the gateway refuses to write there (a clear
/// error) instead of sending writes to a replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_came_back_as_a_replica_gets_no_writes() {
    each_protocol_async(a_master_that_came_back_as_a_replica_gets_no_writes_speaking).await;
}

async fn a_master_that_came_back_as_a_replica_gets_no_writes_speaking(protocol: u8) {
    let mut group = SentinelGroup::start(1, 3);
    let master = group.master_port();
    let replica = group
        .data_ports()
        .into_iter()
        .find(|&p| p != master)
        .unwrap();
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(group.url())));
    let mut client = gateway.client_speaking(None, protocol).await;
    assert_speaks(&mut client, protocol, "speaks").await;
    let () = redis::cmd("SET")
        .arg("before")
        .arg(1)
        .query_async(&mut client)
        .await
        .unwrap();
    // A pipeline to the master the sentinels named comes back whole and in order.
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.set(format!("p{i}"), i).ignore().get(format!("p{i}"));
    }
    let values: Vec<i64> = pipe.query_async(&mut client).await.unwrap();
    assert_eq!(values, (0..1000).collect::<Vec<i64>>());

    // Promote the replica behind the sentinels' back and bring the old master back as its replica at once.
    let () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut group.client(replica))
        .unwrap();
    group.kill(master);
    group.restart_as_replica(master, replica);
    let sentinels_say: u16 = group.master_port();
    assert_eq!(sentinels_say, master, "the sentinels have not noticed");

    let deadline = Instant::now() + Duration::from_secs(5);
    let refusal = loop {
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg("after")
            .arg(1)
            .query_async(&mut client)
            .await;
        match set {
            Err(e) if e.to_string().contains("not a master") => break e.to_string(),
            other => assert!(
                Instant::now() < deadline,
                "no ROLE refusal within 5 s: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("write refused: {refusal}");
    let writers = gateway_writers(&group, master);
    assert!(
        writers.is_empty(),
        "gateway writes on the replica: {writers:?}"
    );
    let after: Option<i64> = redis::cmd("GET")
        .arg("after")
        .query(&mut group.client(master))
        .unwrap();
    assert_eq!(after, None);
}
