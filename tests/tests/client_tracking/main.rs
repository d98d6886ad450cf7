//! `CLIENT TRACKING` for the gateway's own clients against a real redis-server (docs/near-cache.md "Client-side
//! caching through the gateway"): default mode (told once per read, with the client's own key names, never a
//! co-tenant's), `BCAST` with prefixes, `OPTIN`/`OPTOUT` with `CLIENT CACHING`, a RESP2 `REDIRECT` to a
//! `__redis__:invalidate` subscriber (on the same worker or another) and a broken redirect, `FLUSHDB` and a killed watch (null invalidations),
//! Redis' error texts; which nodes are watched (`topology`: a cluster, a sharded route, a new route); why a
//! client's cache stays exact (`exactness`); node-redis 6 with `clientSideCache` (`node_redis`).

use std::time::Duration;

use switchyard_tests::{RawClient, RedisServer, client_with_flag, wait_for};

mod exactness;
mod harness;
mod node_redis;
mod topology;

use harness::*;

#[test]
fn a_resp3_client_is_told_once_of_a_key_it_read_by_its_own_name_and_never_of_a_co_tenants() {
    let (_backend, gateway, mut redis, mut client) = tracking(&[]);
    assert_eq!(client.request(&[b"GET", b"k"]), b"_\r\n");
    // Written on Redis itself, twice: told once.
    set(&mut redis, "ns:k", "v1");
    assert_eq!(client.read_reply(), invalidate(&["k"]));
    set(&mut redis, "ns:k", "v2");
    nothing_pending(&mut client);
    // Read again, written through the gateway by another client of the tenant.
    assert_eq!(client.request(&[b"GET", b"k"]), b"$2\r\nv2\r\n");
    let mut writer = authed(&gateway, PASSWORD, 2);
    assert_eq!(writer.request(&[b"SET", b"k", b"v3"]), b"+OK\r\n");
    assert_eq!(client.read_reply(), invalidate(&["k"]));
    // The co-tenant writes its own `k` (and a key named as this tenant's, under its own namespace): nothing.
    assert_eq!(
        client.request(&[b"MGET", b"k", b"j"]),
        b"*2\r\n$2\r\nv3\r\n_\r\n"
    );
    let mut other = authed(&gateway, OTHER, 3);
    assert_eq!(other.request(&[b"SET", b"k", b"x"]), b"+OK\r\n");
    assert_eq!(other.request(&[b"SET", b"ns:k", b"x"]), b"+OK\r\n");
    nothing_pending(&mut client);
    set(&mut redis, "ns:j", "1");
    assert_eq!(client.read_reply(), invalidate(&["j"]));
    assert_eq!(
        client.request(&[b"CLIENT", b"TRACKINGINFO"]),
        b"%3\r\n$5\r\nflags\r\n~1\r\n$2\r\non\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n"
    );
    assert_eq!(client.request(&[b"CLIENT", b"GETREDIR"]), b":0\r\n");
    // Off: told nothing more.
    assert_eq!(
        client.request(&[b"CLIENT", b"TRACKING", b"off"]),
        b"+OK\r\n"
    );
    set(&mut redis, "ns:k", "v4");
    nothing_pending(&mut client);
    assert_eq!(client.request(&[b"CLIENT", b"GETREDIR"]), b":-1\r\n");
}

#[test]
fn bcast_tells_every_change_under_the_clients_prefixes_in_its_namespace() {
    let (backend, _gateway, mut redis, mut client) = tracking(&[b"BCAST", b"PREFIX", b"user:"]);
    set(&mut redis, "ns:order:1", "x");
    set(&mut redis, "b:user:1", "x"); // the co-tenant's
    set(&mut redis, "ns:user:1", "x");
    assert_eq!(client.read_reply(), invalidate(&["user:1"]));
    nothing_pending(&mut client);
    assert_eq!(
        client.request(&[b"CLIENT", b"TRACKINGINFO"]),
        b"%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$5\r\nbcast\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*1\r\n$5\r\nuser:\r\n"
    );
    // A tenant without a namespace gets no BCAST: Redis would broadcast other databases' keys.
    let plain = start(&backend, None);
    let mut client = authed(&plain, PASSWORD, 3);
    let refused = track(&mut client, &[b"BCAST"]);
    assert!(refused.starts_with(b"-ERR CLIENT TRACKING BCAST is not supported by the gateway for a tenant without a key namespace"), "{}", String::from_utf8_lossy(&refused));
}

#[test]
fn optin_and_optout_track_what_client_caching_selects() {
    let backend = RedisServer::start();
    let gateway = start(&backend, None);
    let mut redis = backend.client();
    let mut optin = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut optin, &[b"OPTIN"]), b"+OK\r\n");
    assert_eq!(optin.request(&[b"GET", b"a"]), b"_\r\n");
    assert_eq!(optin.request(&[b"CLIENT", b"CACHING", b"yes"]), b"+OK\r\n");
    assert_eq!(optin.request(&[b"GET", b"b"]), b"_\r\n");
    assert_eq!(optin.request(&[b"GET", b"c"]), b"_\r\n");
    let mut optout = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut optout, &[b"OPTOUT"]), b"+OK\r\n");
    assert_eq!(optout.request(&[b"CLIENT", b"CACHING", b"no"]), b"+OK\r\n");
    assert_eq!(optout.request(&[b"GET", b"a"]), b"_\r\n");
    assert_eq!(optout.request(&[b"GET", b"b"]), b"_\r\n");
    for key in ["a", "b", "c"] {
        set(&mut redis, key, "1");
    }
    assert_eq!(optin.read_reply(), invalidate(&["b"]));
    assert_eq!(optout.read_reply(), invalidate(&["b"]));
    nothing_pending(&mut optin);
    nothing_pending(&mut optout);
}

#[test]
fn a_resp2_client_redirects_to_a_subscriber_and_a_resp3_client_is_told_its_redirect_broke() {
    let backend = RedisServer::start();
    let gateway = start(&backend, Some("ns:"));
    let mut redis = backend.client();
    let (mut subscriber, id) = invalidations_subscriber(&gateway);
    let mut client = authed(&gateway, PASSWORD, 2);
    assert_eq!(
        track(&mut client, &[b"REDIRECT", id.as_bytes()]),
        b"+OK\r\n"
    );
    assert_eq!(
        client.request(&[b"CLIENT", b"GETREDIR"]),
        format!(":{id}\r\n").as_bytes()
    );
    assert_eq!(client.request(&[b"GET", b"k"]), b"$-1\r\n");
    set(&mut redis, "ns:k", "1");
    let message = b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n";
    subscriber.expect(&[&message[..], b"*1\r\n$1\r\nk\r\n"].concat());
    // A flush: the null of the tracking client's protocol, as Redis sends it.
    let _: () = redis::cmd("FLUSHDB").query(&mut redis).unwrap();
    subscriber.expect(&[&message[..], b"$-1\r\n"].concat());
    // A client of another tenant cannot be redirected to, nor can one that does not exist.
    let mut other = authed(&gateway, OTHER, 2);
    let other_id = client_id(&mut other);
    for missing in [other_id.as_bytes(), b"999999"] {
        assert_eq!(
            String::from_utf8_lossy(&track(&mut client, &[b"REDIRECT", missing])),
            "-ERR The client ID you want redirect to does not exist\r\n"
        );
    }
    // The subscriber goes: a RESP3 client redirecting to it is told so.
    let mut resp3 = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut resp3, &[b"REDIRECT", id.as_bytes()]), b"+OK\r\n");
    assert_eq!(resp3.request(&[b"GET", b"k"]), b"_\r\n");
    drop(subscriber);
    wait_for("the subscriber gone", Duration::from_secs(5), || {
        !String::from_utf8_lossy(&resp3.request(&[b"CLIENT", b"LIST"]))
            .contains(&format!("id={id} "))
    });
    set(&mut redis, "ns:k", "2");
    assert_eq!(
        resp3.read_reply(),
        format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{id}\r\n").as_bytes()
    );
    let info = resp3.request(&[b"CLIENT", b"TRACKINGINFO"]);
    assert!(String::from_utf8_lossy(&info).contains("broken_redirect"));
}

#[test]
fn a_redirect_reaches_a_subscriber_on_another_worker_and_breaks_when_it_goes() {
    let backend = RedisServer::start();
    let gateway = start_workers(&backend, Some("ns:"), 2);
    let mut redis = backend.client();
    // Two workers take the connections in turn: the subscriber on one, the tracking clients on the other, then
    // on the subscriber's.
    let (mut subscriber, id) = invalidations_subscriber(&gateway);
    let mut elsewhere = authed(&gateway, PASSWORD, 2);
    let mut here = authed(&gateway, PASSWORD, 2);
    let mut resp3 = authed(&gateway, PASSWORD, 3);
    let clients = [
        (&mut elsewhere, "k1", &b"$-1\r\n"[..]),
        (&mut here, "k2", b"$-1\r\n"),
        (&mut resp3, "k3", b"_\r\n"),
    ];
    for (client, key, null) in clients {
        assert_eq!(track(client, &[b"REDIRECT", id.as_bytes()]), b"+OK\r\n");
        assert_eq!(client.request(&[b"GET", key.as_bytes()]), null);
    }
    // A co-tenant's clients, one on each worker, cannot be redirected to.
    let mut others = [authed(&gateway, OTHER, 2), authed(&gateway, OTHER, 2)];
    for other in &mut others {
        let other_id = client_id(other);
        assert_eq!(
            String::from_utf8_lossy(&track(&mut elsewhere, &[b"REDIRECT", other_id.as_bytes()])),
            "-ERR The client ID you want redirect to does not exist\r\n"
        );
    }
    let message = b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n";
    for key in ["k1", "k2", "k3"] {
        set(&mut redis, &format!("ns:{key}"), "1");
        let told = [&message[..], format!("*1\r\n$2\r\n{key}\r\n").as_bytes()].concat();
        subscriber.expect(&told);
    }
    // The subscriber goes: the RESP3 client, on the other worker, is told so.
    drop(subscriber);
    wait_for("the subscriber gone", Duration::from_secs(5), || {
        !String::from_utf8_lossy(&resp3.request(&[b"CLIENT", b"LIST"]))
            .contains(&format!("id={id} "))
    });
    assert_eq!(resp3.request(&[b"GET", b"k3"]), b"$1\r\n1\r\n");
    set(&mut redis, "ns:k3", "2");
    assert_eq!(
        resp3.read_reply(),
        format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{id}\r\n").as_bytes()
    );
    nothing_pending(&mut elsewhere);
    nothing_pending(&mut here);
}

#[test]
fn a_flush_or_a_lost_watch_tells_the_client_to_drop_everything() {
    let (_backend, _gateway, mut redis, mut client) = tracking(&[]);
    assert_eq!(client.request(&[b"GET", b"k"]), b"_\r\n");
    let _: () = redis::cmd("FLUSHDB").query(&mut redis).unwrap();
    assert_eq!(client.read_reply(), FLUSHED);
    // The watch is killed on Redis: the client drops everything, and is told again once it is back.
    let id = client_with_flag(&mut redis, 'B').expect("a broadcasting connection");
    let kill: redis::RedisResult<()> = redis::cmd("CLIENT")
        .arg(&["KILL", "ID", &id])
        .query(&mut redis);
    kill.unwrap();
    assert_eq!(client.read_reply(), FLUSHED);
    wait_for("the watch back", Duration::from_secs(10), || {
        client_with_flag(&mut redis, 'B').is_some_and(|new| new != id)
    });
    told_again(&mut client, &mut redis, "k", "ns:k");
}

#[test]
fn bad_combinations_get_redis_errors() {
    let backend = RedisServer::start();
    let gateway = start(&backend, Some("ns:"));
    let mut client = authed(&gateway, PASSWORD, 3);
    let mut direct = RawClient::connect_speaking(backend.port(), 3);
    let cases: &[&[&[u8]]] = &[
        &[b"CLIENT", b"TRACKING", b"on", b"PREFIX", b"a"],
        &[b"CLIENT", b"TRACKING", b"on", b"OPTIN", b"OPTOUT"],
        &[b"CLIENT", b"TRACKING", b"on", b"BCAST", b"OPTIN"],
        &[
            b"CLIENT",
            b"TRACKING",
            b"on",
            b"BCAST",
            b"PREFIX",
            b"a",
            b"PREFIX",
            b"ab",
        ],
        &[b"CLIENT", b"TRACKING", b"on", b"REDIRECT", b"x"],
        &[b"CLIENT", b"TRACKING", b"maybe"],
        &[b"CLIENT", b"CACHING", b"yes"],
        &[b"CLIENT", b"TRACKINGINFO"],
        &[b"CLIENT", b"GETREDIR"],
        &[b"CLIENT", b"TRACKING", b"on", b"OPTIN"],
        &[b"CLIENT", b"CACHING", b"no"],
        &[b"CLIENT", b"TRACKING", b"on", b"OPTOUT"],
        &[b"CLIENT", b"TRACKING", b"on", b"BCAST"],
        &[b"CLIENT", b"CACHING", b"yes"],
        &[b"CLIENT", b"TRACKINGINFO"],
    ];
    for case in cases {
        assert_eq!(
            String::from_utf8_lossy(&client.request(case)),
            String::from_utf8_lossy(&direct.request(case)),
            "{:?}",
            case.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
        );
    }
}
