use bytes::Bytes;

use super::*;
use crate::cmd::{lookup_by_name, resolve, words};
use crate::resp::RequestDecoder;

fn outbound(namespace: &str, args: &[&str]) -> Result<(Vec<String>, Option<Transform>), String> {
    let args = words(args);
    let spec = resolve(&args).unwrap();
    let (request, transform) =
        Namespace::new(namespace).outbound(spec, Request::from_args(args))?;
    // The raw frame is what is sent: it must say what the arguments say.
    assert_eq!(
        Request::from_args(request.args().to_vec()).raw(),
        request.raw()
    );
    let args = request
        .args()
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    Ok((args, transform))
}

fn sent(namespace: &str, args: &[&str]) -> Vec<String> {
    outbound(namespace, args).unwrap().0
}

#[test]
fn keys_are_prefixed_where_the_key_specs_say() {
    assert_eq!(sent("a:", &["GET", "k"]), ["GET", "a:k"]);
    assert_eq!(
        sent("a:", &["SET", "k", "v", "GET"]),
        ["SET", "a:k", "v", "GET"]
    );
    assert_eq!(
        sent("a:", &["MSET", "k1", "v1", "k2", "v2"]),
        ["MSET", "a:k1", "v1", "a:k2", "v2"]
    );
    assert_eq!(
        sent("a:", &["EVAL", "return 1", "2", "x", "y", "arg"]),
        ["EVAL", "return 1", "2", "a:x", "a:y", "arg"]
    );
    assert_eq!(
        sent(
            "a:",
            &["XREAD", "COUNT", "2", "STREAMS", "s1", "s2", "0", "$"]
        ),
        ["XREAD", "COUNT", "2", "STREAMS", "a:s1", "a:s2", "0", "$"]
    );
    assert_eq!(
        sent(
            "a:",
            &["ZUNIONSTORE", "d", "2", "x", "y", "WEIGHTS", "1", "2"]
        ),
        ["ZUNIONSTORE", "a:d", "2", "a:x", "a:y", "WEIGHTS", "1", "2"]
    );
    assert_eq!(sent("a:", &["RENAME", "x", "y"]), ["RENAME", "a:x", "a:y"]);
    assert_eq!(
        sent("a:", &["OBJECT", "ENCODING", "x"]),
        ["OBJECT", "ENCODING", "a:x"]
    );
    assert_eq!(
        sent("a:", &["GEORADIUS", "g", "1", "2", "3", "m", "STORE", "d"]),
        ["GEORADIUS", "a:g", "1", "2", "3", "m", "STORE", "a:d"]
    );
    // Keyless commands, and keys Redis would not find either (it refuses them): as they are.
    assert_eq!(sent("a:", &["TIME"]), ["TIME"]);
    assert_eq!(
        sent("a:", &["XREAD", "COUNT", "2", "s"]),
        ["XREAD", "COUNT", "2", "s"]
    );
}

#[test]
fn sort_patterns_are_prefixed_unless_they_look_nothing_up() {
    assert_eq!(
        sent(
            "a:",
            &[
                "SORT", "l", "BY", "w_*", "LIMIT", "0", "5", "GET", "#", "GET", "o_*->f", "ALPHA",
                "STORE", "d"
            ]
        ),
        [
            "SORT", "a:l", "BY", "a:w_*", "LIMIT", "0", "5", "GET", "#", "GET", "a:o_*->f",
            "ALPHA", "STORE", "a:d"
        ]
    );
    // `BY nosort` must stay a pattern without `*`, so that SORT still does not sort.
    assert_eq!(
        sent("a:", &["SORT_RO", "l", "BY", "nosort", "GET", "x"]),
        ["SORT_RO", "a:l", "BY", "nosort", "GET", "x"]
    );
    // A prefix with a `*` would be substituted instead of the pattern's.
    let Err(refused) = outbound("a*:", &["SORT", "l", "BY", "w_*"]) else {
        panic!("a prefix with a '*' in SORT patterns");
    };
    assert!(
        refused.starts_with("ERR SORT with BY or GET patterns is refused"),
        "{refused}"
    );
    assert_eq!(
        sent("a*:", &["SORT", "l", "BY", "nosort"]),
        ["SORT", "a*:l", "BY", "nosort"]
    );
}

#[test]
fn scan_and_keys_patterns_are_prefixed_with_glob_characters_escaped() {
    assert_eq!(
        sent("a:", &["SCAN", "0", "MATCH", "k*", "COUNT", "5"]),
        ["SCAN", "0", "MATCH", "a:k*", "COUNT", "5"]
    );
    assert_eq!(
        sent("a:", &["SCAN", "0", "TYPE", "string"]),
        ["SCAN", "0", "TYPE", "string", "MATCH", "a:*"]
    );
    assert_eq!(sent("a:", &["SCAN", "7"]), ["SCAN", "7", "MATCH", "a:*"]);
    // An option without its value is Redis' syntax error: left for Redis to answer as it would.
    assert_eq!(sent("a:", &["SCAN", "0", "COUNT"]), ["SCAN", "0", "COUNT"]);
    assert_eq!(sent("a:", &["SCAN", "0", "MATCH"]), ["SCAN", "0", "MATCH"]);
    assert_eq!(
        sent(r"x*?[y]\:", &["SCAN", "0", "match", "k?"]),
        ["SCAN", "0", "match", r"x\*\?\[y\]\\:k?"]
    );
    assert_eq!(sent("a:", &["KEYS", "*"]), ["KEYS", "a:*"]);
    assert_eq!(sent("{t}*:", &["KEYS", "k"]), ["KEYS", r"{t}\*:k"]);
}

#[test]
fn scan_walks_at_most_a_thousand_buckets_of_the_shared_database() {
    assert_eq!(
        sent(
            "a:",
            &[
                "SCAN",
                "0",
                "COUNT",
                "100000000",
                "MATCH",
                "k*",
                "count",
                "5000"
            ]
        ),
        [
            "SCAN", "0", "COUNT", "1000", "MATCH", "a:k*", "count", "1000"
        ]
    );
    assert_eq!(
        sent("a:", &["SCAN", "0", "COUNT", "1000"]),
        ["SCAN", "0", "COUNT", "1000", "MATCH", "a:*"]
    );
    // Not a number: Redis' own error.
    assert_eq!(
        sent("a:", &["SCAN", "0", "COUNT", "lots"]),
        ["SCAN", "0", "COUNT", "lots", "MATCH", "a:*"]
    );
}

#[test]
fn whole_database_commands_are_refused() {
    for name in [
        "flushdb",
        "flushall",
        "dbsize",
        "randomkey",
        "swapdb",
        "migrate",
    ] {
        let refusal = Namespace::refusal(lookup_by_name(name.as_bytes()).unwrap());
        let text = refusal.unwrap_or_default();
        assert!(
            text.starts_with(&format!(
                "ERR {} is refused for a tenant with a key namespace",
                name.to_uppercase()
            )) && text.ends_with(" instead"),
            "{text}"
        );
    }
    for name in ["get", "scan", "keys", "move", "copy", "eval", "info"] {
        assert_eq!(
            Namespace::refusal(lookup_by_name(name.as_bytes()).unwrap()),
            None
        );
    }
}

/// The reply as the tenant sees it, after the transform of `command`.
fn shown(command: &[&str], reply: &[u8]) -> Vec<u8> {
    let (_, transform) = outbound("a:", command).unwrap();
    let transform = transform.expect("the reply carries key names");
    transform(Bytes::copy_from_slice(reply)).to_vec()
}

#[test]
fn key_names_in_replies_lose_the_prefix() {
    assert_eq!(
        shown(&["KEYS", "*"], b"*2\r\n$3\r\na:x\r\n$4\r\na:yz\r\n"),
        b"*2\r\n$1\r\nx\r\n$2\r\nyz\r\n"
    );
    assert_eq!(
        shown(&["SCAN", "0"], b"*2\r\n$2\r\n17\r\n*1\r\n$3\r\na:k\r\n"),
        b"*2\r\n$2\r\n17\r\n*1\r\n$1\r\nk\r\n"
    );
    assert_eq!(
        shown(&["BLPOP", "l", "0"], b"*2\r\n$3\r\na:l\r\n$3\r\na:v\r\n"),
        b"*2\r\n$1\r\nl\r\n$3\r\na:v\r\n"
    );
    assert_eq!(shown(&["BLPOP", "l", "1"], b"*-1\r\n"), b"*-1\r\n");
    assert_eq!(shown(&["BLPOP", "l", "1"], b"_\r\n"), b"_\r\n");
    assert_eq!(
        shown(
            &["BZPOPMIN", "z", "0"],
            b"*3\r\n$3\r\na:z\r\n$1\r\nm\r\n,1\r\n"
        ),
        b"*3\r\n$1\r\nz\r\n$1\r\nm\r\n,1\r\n"
    );
    assert_eq!(
        shown(
            &["LMPOP", "2", "x", "l", "LEFT"],
            b"*2\r\n$3\r\na:l\r\n*1\r\n$3\r\na:v\r\n"
        ),
        b"*2\r\n$1\r\nl\r\n*1\r\n$3\r\na:v\r\n"
    );
    assert_eq!(
        shown(
            &["ZMPOP", "1", "z", "MIN"],
            b"*2\r\n$3\r\na:z\r\n*1\r\n*2\r\n$1\r\nm\r\n,1\r\n"
        ),
        b"*2\r\n$1\r\nz\r\n*1\r\n*2\r\n$1\r\nm\r\n,1\r\n"
    );
    let error = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    assert_eq!(shown(&["LMPOP", "1", "x", "LEFT"], error), error);
}

#[test]
fn stream_replies_lose_the_prefix_in_both_protocols() {
    let entries = "*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$3\r\na:v\r\n";
    let resp2 = format!("*2\r\n*2\r\n$3\r\na:s\r\n{entries}*2\r\n$4\r\na:s2\r\n{entries}");
    let want2 = format!("*2\r\n*2\r\n$1\r\ns\r\n{entries}*2\r\n$2\r\ns2\r\n{entries}");
    let command = ["XREAD", "STREAMS", "s", "s2", "0", "0"];
    assert_eq!(shown(&command, resp2.as_bytes()), want2.as_bytes());
    let resp3 = format!("%2\r\n$3\r\na:s\r\n{entries}$4\r\na:s2\r\n{entries}");
    let want3 = format!("%2\r\n$1\r\ns\r\n{entries}$2\r\ns2\r\n{entries}");
    assert_eq!(shown(&command, resp3.as_bytes()), want3.as_bytes());
    let group = ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"];
    assert_eq!(shown(&group, resp3.as_bytes()), want3.as_bytes());
    assert_eq!(shown(&group, b"*-1\r\n"), b"*-1\r\n");
}

#[test]
fn only_commands_with_key_names_in_replies_are_rewritten() {
    for command in [
        &["GET", "k"][..],
        &["MGET", "k", "j"],
        &["SORT", "l"],
        &["EVAL", "s", "0"],
    ] {
        assert!(outbound("a:", command).unwrap().1.is_none(), "{command:?}");
    }
}

/// The direct path's frame for `args`, as a list of arguments: written after other bytes already in the
/// buffer, as in a run.
fn direct(namespace: &str, args: &[&str]) -> Option<Vec<String>> {
    let mut decoder = RequestDecoder::new(crate::resp::Limits::default());
    let mut input = bytes::BytesMut::new();
    crate::resp::command(&mut input, args);
    let frame = decoder.decode(&mut input).unwrap().unwrap();
    let spec = resolve(&words(args)).unwrap();
    let keys = DirectKeys::of(spec, decoder.arg_count())?;
    let mut raw = Namespace::new(namespace)
        .direct_frame(&decoder, &frame, keys)
        .0;
    let mut again = RequestDecoder::new(crate::resp::Limits::default());
    let frame = again.decode(&mut raw).unwrap().unwrap();
    assert!(raw.is_empty());
    let args = again
        .request(frame)
        .args()
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    Some(args)
}

#[test]
fn the_direct_path_prefixes_fixed_keys_and_leaves_the_rest_to_dispatch() {
    assert_eq!(
        direct("a:", &["GET", "k"]),
        Some(vec!["GET".into(), "a:k".into()])
    );
    assert_eq!(
        direct("{t}:", &["MSET", "x", "1", "y", "2"]),
        Some(vec![
            "MSET".into(),
            "{t}:x".into(),
            "1".into(),
            "{t}:y".into(),
            "2".into()
        ])
    );
    let long = "v".repeat(300);
    assert_eq!(
        direct("ns:", &["SET", "key", &long, "EX", "10"]),
        Some(vec![
            "SET".into(),
            "ns:key".into(),
            long.clone(),
            "EX".into(),
            "10".into()
        ])
    );
    // Gaps short and long, with and without 32 bytes after them in the frame.
    let keys: Vec<String> = (0..12)
        .map(|i| format!("key:{}", "k".repeat(i * 3)))
        .collect();
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let stored: Vec<String> = keys.iter().map(|k| format!("{{ns}}:{k}")).collect();
    let mut expected = vec!["MGET".to_string()];
    expected.extend(stored);
    assert_eq!(direct("{ns}:", &mget), Some(expected));
    // A stored length of three digits, and of one.
    let long_key = "k".repeat(120);
    assert_eq!(
        direct("ns:", &["GET", &long_key]),
        Some(vec!["GET".into(), format!("ns:{long_key}")])
    );
    assert_eq!(
        direct("n", &["GET", ""]),
        Some(vec!["GET".into(), "n".into()])
    );
    // The longest prefix a namespace may have fills the whole block; a longer one (never compiled from a
    // valid policy) is copied as it is.
    for prefix in [
        "p".repeat(MAX_NAMESPACE_LEN),
        "q".repeat(MAX_NAMESPACE_LEN + 1),
    ] {
        assert_eq!(
            direct(&prefix, &["MGET", "a", "b"]),
            Some(vec![
                "MGET".into(),
                format!("{prefix}a"),
                format!("{prefix}b")
            ])
        );
    }
    assert_eq!(
        direct("ns:", &["HSET", "h", "f", "v"]),
        Some(vec!["HSET".into(), "ns:h".into(), "f".into(), "v".into()])
    );
    assert_eq!(direct("a:", &["EVAL", "s", "1", "k"]), None);
    assert_eq!(direct("a:", &["ZUNIONSTORE", "d", "1", "k"]), None);
    assert_eq!(direct("a:", &["DBSIZE"]), None);
    assert_eq!(direct("a:", &["SCAN", "0"]), None);
}

#[test]
fn fixed_keys_are_the_keys_key_indices_finds() {
    let mut keys = Vec::new();
    let mut checked = 0;
    for spec in crate::cmd::commands().iter() {
        for argc in 2..9 {
            let Some(direct) = DirectKeys::of(spec, argc) else {
                continue;
            };
            let mut args = vec![Bytes::from_static(b"x"); argc];
            args[0] = Bytes::from_static(spec.name.as_bytes());
            spec.key_indices(&args, &mut keys).unwrap();
            let fixed: Vec<usize> = direct.indices().collect();
            assert_eq!(keys, fixed, "{} with {argc} arguments", spec.name);
            checked += 1;
        }
    }
    assert!(checked > 500, "{checked}");
}
