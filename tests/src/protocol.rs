//! The two protocols a client can speak to the gateway, for tests that must hold in each: which they are, what a
//! reply looks like in each, and a check that a connection really speaks the one its test says.

use redis::Value;
use redis::aio::MultiplexedConnection;

/// RESP2 (what a connection speaks until `HELLO 3`) and RESP3.
pub const PROTOCOLS: [u8; 2] = [2, 3];

/// The null reply: `$-1` in RESP2, `_` in RESP3.
pub fn null_reply(protocol: u8) -> &'static [u8] {
    match protocol {
        2 => b"$-1\r\n",
        3 => b"_\r\n",
        _ => panic!("no protocol {protocol}"),
    }
}

/// Asserts that `con` speaks `protocol` with the gateway and that the replies of the backends serving `key`
/// reach it in that protocol, so that a test meant for RESP3 cannot pass in RESP2 unnoticed: the gateway's
/// `CLIENT INFO` says `resp=N`, a read's reply (HGETALL of a missing key: a map in RESP3, an array in RESP2) and a
/// write's (ZINCRBY's score: a double in RESP3, a bulk string in RESP2) come through untouched. `key` must be
/// a key nothing else uses; it is deleted again.
pub async fn assert_speaks(con: &mut MultiplexedConnection, protocol: u8, key: &str) {
    let info: String = redis::cmd("CLIENT")
        .arg("INFO")
        .query_async(con)
        .await
        .expect("CLIENT INFO");
    assert!(
        info.split_whitespace()
            .any(|f| f == format!("resp={protocol}")),
        "the gateway says the connection does not speak RESP{protocol}: {info}"
    );
    let read: Value = redis::cmd("HGETALL")
        .arg(key)
        .query_async(con)
        .await
        .expect("HGETALL");
    let write: Value = redis::cmd("ZINCRBY")
        .arg(key)
        .arg(1)
        .arg("member")
        .query_async(con)
        .await
        .expect("ZINCRBY");
    let _: Value = redis::cmd("DEL")
        .arg(key)
        .query_async(con)
        .await
        .expect("DEL");
    let in_protocol = match protocol {
        2 => {
            matches!(read, Value::Array(ref a) if a.is_empty())
                && matches!(write, Value::BulkString(ref s) if s == b"1")
        }
        3 => {
            matches!(read, Value::Map(ref m) if m.is_empty())
                && matches!(write, Value::Double(d) if d == 1.0)
        }
        _ => panic!("no protocol {protocol}"),
    };
    assert!(
        in_protocol,
        "backend replies not in RESP{protocol}: HGETALL {read:?}, ZINCRBY {write:?}"
    );
}

/// Runs `test` once per protocol, saying which on stderr (shown with a failure).
pub fn each_protocol(mut test: impl FnMut(u8)) {
    for protocol in PROTOCOLS {
        eprintln!("--- RESP{protocol}");
        test(protocol);
    }
}

/// [`each_protocol`] for an async test.
pub async fn each_protocol_async<F: std::future::Future<Output = ()>>(
    mut test: impl FnMut(u8) -> F,
) {
    for protocol in PROTOCOLS {
        eprintln!("--- RESP{protocol}");
        test(protocol).await;
    }
}
