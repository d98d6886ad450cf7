//! The session's own decisions, driven through a real loopback socket with no Redis behind it: every tenant's
//! resource is a port where nothing listens, so whatever reaches a backend gets the gateway's "backend
//! unavailable" error, in its place. Each test checks the exact bytes a client gets.

mod harness;

use std::time::{Duration, Instant};

use crate::admission::FREE_FAILURES;
use harness::{TestGateway, config, run};

/// What a request that reaches the (absent) backend gets.
const UNREACHABLE: &[u8] = b"-ERR backend 127.0.0.1:1 unavailable: connection refused\r\n";
const NOAUTH: &[u8] = b"-NOAUTH Authentication required.\r\n";
const WRONGPASS: &[u8] = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";
const OUT_OF_RANGE: &[u8] = b"-ERR DB index is out of range\r\n";
const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";
const NO_EXEC: &[u8] = b"-ERR EXEC without MULTI\r\n";
const KEYS_REFUSED: &[u8] =
    b"-ERR KEYS is an admin command; this tenant may not run it (allow_admin)\r\n";

/// `HELLO`'s reply: Redis' 7 fields, a map in RESP3, a flat array in RESP2.
fn hello_reply(protocol: u8, id: u64) -> Vec<u8> {
    let version = crate::REDIS_VERSION;
    let header = if protocol == 3 { "%7" } else { "*14" };
    format!(
        "{header}\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n${}\r\n{version}\r\n\
         $5\r\nproto\r\n:{protocol}\r\n$2\r\nid\r\n:{id}\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
         $4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n",
        version.len()
    )
    .into_bytes()
}

#[test]
fn commands_before_auth_get_noauth_and_a_wrong_password_wrongpass() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.connect();
        client.roundtrip(b"PING\r\n", NOAUTH).await;
        client.roundtrip(b"SELECT 1\r\n", NOAUTH).await;
        client.roundtrip(b"GET k\r\n", NOAUTH).await;
        client.roundtrip(b"AUTH nope\r\n", WRONGPASS).await;
        // Another tenant's password under this tenant's name.
        client
            .roundtrip(b"AUTH shop dev-secret\r\n", WRONGPASS)
            .await;
        client
            .roundtrip(b"AUTH nobody shop-secret\r\n", WRONGPASS)
            .await;
        // The connection stays open, and still unauthenticated.
        client.roundtrip(b"PING\r\n", NOAUTH).await;
        client.roundtrip(b"AUTH shop-secret\r\n", b"+OK\r\n").await;
        client.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    });
}

#[test]
fn auth_names_a_tenant_or_finds_it_by_its_password() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.connect();
        client
            .roundtrip(b"AUTH dev dev-secret\r\n", b"+OK\r\n")
            .await;
        client.roundtrip(b"ACL WHOAMI\r\n", b"$3\r\ndev\r\n").await;
        // `default` is what clients send that only know a password: it matches any tenant.
        let switch = b"*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$11\r\nshop-secret\r\n";
        client.roundtrip(switch, b"+OK\r\n").await;
        client.roundtrip(b"ACL WHOAMI\r\n", b"$4\r\nshop\r\n").await;
        // A failed AUTH leaves the client who it was, as in Redis.
        client.roundtrip(b"AUTH dev-secretx\r\n", WRONGPASS).await;
        client.roundtrip(b"ACL WHOAMI\r\n", b"$4\r\nshop\r\n").await;
        client
            .roundtrip(b"AUTH a b c\r\n", b"-ERR syntax error\r\n")
            .await;
        let arity = b"-ERR wrong number of arguments for 'auth' command\r\n";
        client.roundtrip(b"AUTH\r\n", arity).await;
    });
}

#[test]
fn hello_3_switches_the_connection_to_resp3_and_hello_2_back() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.connect();
        let noauth = b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the \
            HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP \
            protocol version at the same time\r\n";
        client.roundtrip(b"HELLO 3\r\n", noauth).await;
        client
            .roundtrip(b"HELLO 3 AUTH shop nope\r\n", WRONGPASS)
            .await;
        // Every option is read before the credentials are tried, as Redis does: a bad one leaves the client out.
        let bad = b"-ERR Syntax error in HELLO option 'X'\r\n";
        client
            .roundtrip(b"HELLO 3 AUTH shop shop-secret X\r\n", bad)
            .await;
        client
            .roundtrip(
                b"HELLO 3 AUTH shop nope X\r\nPING\r\n",
                &[&bad[..], NOAUTH].concat(),
            )
            .await;
        client
            .roundtrip(b"HELLO 3 AUTH shop shop-secret\r\n", &hello_reply(3, 1))
            .await;
        client.roundtrip(b"CLIENT GETNAME\r\n", b"_\r\n").await;
        client.roundtrip(b"CLIENT ID\r\n", b":1\r\n").await;
        client.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
        let noproto = b"-NOPROTO unsupported protocol version\r\n";
        client.roundtrip(b"HELLO 4\r\n", noproto).await;
        let not_int = b"-ERR Protocol version is not an integer or out of range\r\n";
        client.roundtrip(b"HELLO x\r\n", not_int).await;
        // Failed HELLOs changed nothing.
        client.roundtrip(b"CLIENT GETNAME\r\n", b"_\r\n").await;
        client.roundtrip(b"HELLO 2\r\n", &hello_reply(2, 1)).await;
        client.roundtrip(b"CLIENT GETNAME\r\n", b"$-1\r\n").await;
        // The client id is the gateway's, one per connection.
        let mut second = gateway.client("dev-secret").await;
        second.roundtrip(b"CLIENT ID\r\n", b":2\r\n").await;
    });
}

#[test]
fn select_stays_within_the_databases_the_tenant_owns() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut shop = gateway.client("shop-secret").await;
        shop.roundtrip(b"SELECT 2\r\n", b"+OK\r\n").await;
        shop.roundtrip(b"SELECT 0\r\n", b"+OK\r\n").await;
        shop.roundtrip(b"SELECT 3\r\n", OUT_OF_RANGE).await;
        shop.roundtrip(b"SELECT -1\r\n", OUT_OF_RANGE).await;
        let not_int = b"-ERR value is not an integer or out of range\r\n";
        shop.roundtrip(b"SELECT x\r\n", not_int).await;
        // Commands naming databases are held to the same: MOVE within them goes on, past them is refused.
        shop.roundtrip(b"MOVE k 2\r\n", UNREACHABLE).await;
        shop.roundtrip(b"MOVE k 3\r\n", OUT_OF_RANGE).await;
        let mut dev = gateway.client("dev-secret").await;
        dev.roundtrip(b"SELECT 0\r\n", b"+OK\r\n").await;
        dev.roundtrip(b"SELECT 1\r\n", OUT_OF_RANGE).await;
        let mut ops = gateway.client("ops-secret").await;
        ops.roundtrip(b"SELECT 15\r\n", b"+OK\r\n").await;
        ops.roundtrip(b"SELECT 16\r\n", OUT_OF_RANGE).await;
    });
}

#[test]
fn echo_and_ping_are_answered_by_the_gateway() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.client("shop-secret").await;
        client.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
        client.roundtrip(b"PING hi\r\n", b"$2\r\nhi\r\n").await;
        let ping_arity = b"-ERR wrong number of arguments for 'ping' command\r\n";
        client.roundtrip(b"PING a b\r\n", ping_arity).await;
        client
            .roundtrip(b"ECHO hello\r\n", b"$5\r\nhello\r\n")
            .await;
        // Binary-safe: the argument comes back byte for byte, CRLF included.
        let echo = b"*2\r\n$4\r\necho\r\n$4\r\na\r\nb\r\n";
        client.roundtrip(echo, b"$4\r\na\r\nb\r\n").await;
        let echo_arity = b"-ERR wrong number of arguments for 'echo' command\r\n";
        client.roundtrip(b"ECHO\r\n", echo_arity).await;
    });
}

#[test]
fn quit_answers_ok_then_closes_leaving_later_requests_unanswered() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut anonymous = gateway.connect();
        anonymous.roundtrip(b"QUIT\r\n", b"+OK\r\n").await;
        anonymous.expect_closed().await;
        let mut client = gateway.client("shop-secret").await;
        client
            .roundtrip(b"PING\r\nQUIT\r\nPING\r\n", b"+PONG\r\n+OK\r\n")
            .await;
        client.expect_closed().await;
    });
}

#[test]
fn multi_queues_commands_until_discard() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.client("shop-secret").await;
        client.roundtrip(b"EXEC\r\n", NO_EXEC).await;
        client
            .roundtrip(b"DISCARD\r\n", b"-ERR DISCARD without MULTI\r\n")
            .await;
        client.roundtrip(b"MULTI\r\n", b"+OK\r\n").await;
        client.roundtrip(b"SET k v\r\n", b"+QUEUED\r\n").await;
        client.roundtrip(b"PING\r\n", b"+QUEUED\r\n").await;
        let nested = b"-ERR MULTI calls can not be nested\r\n";
        client.roundtrip(b"MULTI\r\n", nested).await;
        let watch = b"-ERR WATCH inside MULTI is not allowed\r\n";
        client.roundtrip(b"WATCH k\r\n", watch).await;
        client.roundtrip(b"DISCARD\r\n", b"+OK\r\n").await;
        // Out of the transaction: answered again, and EXEC has nothing to run.
        client.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
        client.roundtrip(b"EXEC\r\n", NO_EXEC).await;
    });
}

#[test]
fn errors_inside_multi_make_exec_abort() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.client("shop-secret").await;
        client.roundtrip(b"MULTI\r\n", b"+OK\r\n").await;
        client.roundtrip(b"SET k v\r\n", b"+QUEUED\r\n").await;
        let unknown = b"-ERR unknown command 'NOSUCH', with args beginning with: 'x' \r\n";
        client.roundtrip(b"NOSUCH x\r\n", unknown).await;
        let arity = b"-ERR wrong number of arguments for 'get' command\r\n";
        client.roundtrip(b"GET\r\n", arity).await;
        client.roundtrip(b"GET k\r\n", b"+QUEUED\r\n").await;
        client.roundtrip(b"EXEC\r\n", EXECABORT).await;
        client.roundtrip(b"EXEC\r\n", NO_EXEC).await;
        // A command the gateway refuses this tenant aborts the transaction as well.
        client.roundtrip(b"MULTI\r\n", b"+OK\r\n").await;
        client.roundtrip(b"KEYS *\r\n", KEYS_REFUSED).await;
        client.roundtrip(b"EXEC\r\n", EXECABORT).await;
    });
}

#[test]
fn exec_with_its_backend_down_gets_the_gateways_error() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.client("shop-secret").await;
        client
            .roundtrip(b"MULTI\r\nSET k v\r\n", b"+OK\r\n+QUEUED\r\n")
            .await;
        client.roundtrip(b"EXEC\r\n", UNREACHABLE).await;
        client.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    });
}

#[test]
fn a_pipeline_keeps_its_order_around_an_unreachable_backend() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.client("shop-secret").await;
        // Local replies, direct-path runs (two GETs read together make one), a refusal and a checked command
        // that is forwarded: each reply in its request's place.
        let pipeline =
            b"PING\r\nGET a\r\nGET b\r\nECHO x\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n\
            KEYS *\r\nMOVE k 1\r\nPING end\r\n";
        client.send(pipeline).await;
        let (pong, x, end) = (&b"+PONG\r\n"[..], b"$1\r\nx\r\n", b"$3\r\nend\r\n");
        let u = UNREACHABLE;
        let replies = [pong, u, u, x, u, KEYS_REFUSED, u, end];
        client.expect(&replies.concat()).await;
    });
}

#[test]
fn a_pipeline_deeper_than_the_outstanding_bound_is_answered_whole_and_in_order() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.client("shop-secret").await;
        let depth = 3 * super::MAX_OUTSTANDING;
        let (mut requests, mut expected) = (Vec::new(), Vec::new());
        for i in 0..depth {
            let n = i.to_string();
            requests.extend_from_slice(format!("ECHO {n}\r\nGET k\r\n").as_bytes());
            expected.extend_from_slice(format!("${}\r\n{n}\r\n", n.len()).as_bytes());
            expected.extend_from_slice(UNREACHABLE);
        }
        // Local commands only, as deep, are drained without a backend to wake the session.
        for _ in 0..depth {
            requests.extend_from_slice(b"PING\r\n");
            expected.extend_from_slice(b"+PONG\r\n");
        }
        client.roundtrip(&requests, &expected).await;
    });
}

#[test]
fn unknown_commands_and_wrong_arity_get_redis_texts() {
    run(async {
        let gateway = TestGateway::start(config());
        let unknown = b"-ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' \r\n";
        // Before AUTH too: Redis looks the command up before it checks authentication.
        let mut anonymous = gateway.connect();
        anonymous.roundtrip(b"NOSUCH a b\r\n", unknown).await;
        let mut client = gateway.client("shop-secret").await;
        client.roundtrip(b"NOSUCH a b\r\n", unknown).await;
        let lowercase = b"-ERR unknown command 'nosuch', with args beginning with: \r\n";
        client.roundtrip(b"nosuch\r\n", lowercase).await;
        let get = b"-ERR wrong number of arguments for 'get' command\r\n";
        client.roundtrip(b"GET\r\n", get).await;
        let set = b"-ERR wrong number of arguments for 'set' command\r\n";
        client.roundtrip(b"SET k\r\n", set).await;
        let sub = b"-ERR unknown subcommand 'NOPE'. Try CONFIG HELP.\r\n";
        client.roundtrip(b"CONFIG NOPE\r\n", sub).await;
        let sub_arity = b"-ERR wrong number of arguments for 'config|get' command\r\n";
        client.roundtrip(b"CONFIG GET\r\n", sub_arity).await;
        // Redis reports a rejected EXEC as an aborted transaction, even outside MULTI.
        let exec = b"-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n";
        client.roundtrip(b"EXEC x\r\n", exec).await;
    });
}

#[test]
fn a_protocol_error_is_answered_then_the_connection_closes() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.client("shop-secret").await;
        let multibulk = b"-ERR Protocol error: invalid multibulk length\r\n";
        let expected = [&b"+PONG\r\n"[..], multibulk].concat();
        // What follows the bad request is never answered.
        client.roundtrip(b"PING\r\n*x\r\nPING\r\n", &expected).await;
        client.expect_closed().await;
        let mut other = gateway.client("shop-secret").await;
        let dollar = b"-ERR Protocol error: expected '$', got '+'\r\n";
        other.roundtrip(b"*1\r\n+PING\r\n", dollar).await;
        other.expect_closed().await;
        let mut inline = gateway.client("shop-secret").await;
        let quotes = b"-ERR Protocol error: unbalanced quotes in request\r\n";
        inline.roundtrip(b"ECHO \"a\r\n", quotes).await;
        inline.expect_closed().await;
    });
}

#[test]
fn unauthenticated_clients_get_redis_stricter_request_limits() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut many = gateway.connect();
        let args = b"-ERR Protocol error: unauthenticated multibulk length\r\n";
        many.roundtrip(b"*11\r\n", args).await;
        many.expect_closed().await;
        let mut long = gateway.connect();
        let bulk = b"-ERR Protocol error: unauthenticated bulk length\r\n";
        long.roundtrip(b"*2\r\n$4\r\nECHO\r\n$16385\r\n", bulk)
            .await;
        long.expect_closed().await;
        // From the request after AUTH on, read in the same pipeline, the same sizes are read (and the command
        // judged on its own).
        let mut client = gateway.connect();
        let value = [b'v'; 16385];
        let echo = [&b"*2\r\n$4\r\nECHO\r\n$16385\r\n"[..], &value, b"\r\n"].concat();
        let ping = b"PING 1 2 3 4 5 6 7 8 9 10\r\n";
        let requests = [&b"AUTH shop-secret\r\n"[..], ping, &echo].concat();
        let arity = b"-ERR wrong number of arguments for 'ping' command\r\n";
        let expected = [&b"+OK\r\n"[..], arity, b"$16385\r\n", &value, b"\r\n"].concat();
        client.roundtrip(&requests, &expected).await;
    });
}

#[test]
fn a_tenant_at_its_connection_limit_refuses_the_next_auth_and_closes() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut first = gateway.client("capped-secret").await;
        let mut second = gateway.connect();
        let full = b"-ERR max number of clients reached\r\n";
        second
            .roundtrip(b"AUTH capped capped-secret\r\nPING\r\n", full)
            .await;
        second.expect_closed().await;
        // Other tenants are not concerned; and the place comes back when its connection ends.
        gateway.client("shop-secret").await;
        first.roundtrip(b"QUIT\r\n", b"+OK\r\n").await;
        first.expect_closed().await;
        let mut third = gateway.client("capped-secret").await;
        third.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    });
}

#[test]
fn failed_auths_past_the_free_ones_slow_the_connection_but_every_request_is_answered_in_order() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.connect();
        let failures = FREE_FAILURES as usize + 1;
        let mut requests = b"AUTH nope\r\n".repeat(failures);
        requests.extend_from_slice(b"AUTH shop-secret\r\nPING\r\n");
        let mut expected = WRONGPASS.repeat(failures);
        expected.extend_from_slice(b"+OK\r\n+PONG\r\n");
        let started = Instant::now();
        client.roundtrip(&requests, &expected).await;
        // The first failure past the free ones holds the rest back 100 ms (`admission`).
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
    });
}

#[test]
fn a_connection_that_does_not_authenticate_in_time_is_closed() {
    run(async {
        let mut config = config();
        config.auth_timeout = Duration::from_millis(100);
        let gateway = TestGateway::start(config);
        let mut authenticated = gateway.client("shop-secret").await;
        let mut silent = gateway.connect();
        let mut failing = gateway.connect();
        failing.roundtrip(b"AUTH nope\r\n", WRONGPASS).await;
        silent.expect_closed().await;
        failing.expect_closed().await;
        tokio::time::sleep(Duration::from_millis(150)).await;
        authenticated.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    });
}

#[test]
fn a_query_buffer_past_its_bound_closes_the_connection() {
    run(async {
        let mut config = config();
        config.clients.max_query_buffer = 8192;
        let gateway = TestGateway::start(config);
        let mut client = gateway.client("shop-secret").await;
        // Within the bound, a request is read whole.
        let value = [b'v'; 6000];
        let echo = [&b"*2\r\n$4\r\nECHO\r\n$6000\r\n"[..], &value, b"\r\n"].concat();
        let expected = [&b"$6000\r\n"[..], &value, b"\r\n"].concat();
        client.roundtrip(&echo, &expected).await;
        // A bulk string announced far larger than the bound, sent in part: the gateway buffers no more of it,
        // and closes the connection as Redis does, without a reply.
        let mut request = b"*2\r\n$4\r\nECHO\r\n$100000\r\n".to_vec();
        request.extend_from_slice(&[b'x'; 20_000]);
        client.send(&request).await;
        client.expect_closed().await;
    });
}

/// The steps run in their order (`session/steps.rs`): what the tenant's policies refuse never reaches its rate
/// limit, which counts every command after them, those the gateway answers itself included; a command unknown
/// to the table is answered before anything else, even without a tenant.
#[test]
fn steps_refuse_by_policy_before_the_rate_limit_counts() {
    run(async {
        let gateway = TestGateway::start(config());
        let mut client = gateway.connect();
        let unknown = b"-ERR unknown command 'NOSUCH', with args beginning with: \r\n";
        client.roundtrip(b"NOSUCH\r\n", unknown).await;
        client
            .roundtrip(b"AUTH metered-secret\r\n", b"+OK\r\n")
            .await;
        let noperm = b"-NOPERM this user has no permissions to run the 'flushall' command\r\n";
        for _ in 0..3 {
            client.roundtrip(b"FLUSHALL\r\n", noperm).await;
        }
        client.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
        let limited = b"-ERR tenant 'metered' rate limit exceeded\r\n";
        client.roundtrip(b"PING\r\n", limited).await;
    });
}
