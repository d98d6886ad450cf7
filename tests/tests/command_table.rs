//! Checks the gateway's generated command table against a live redis-server: the same commands with the same
//! arity, flags, ACL categories, key specs and subcommands; `COMMAND INFO`/`DOCS`/`LIST`/`GETKEYS` answered
//! byte-for-byte as Redis answers them, in RESP2 and in RESP3 (after `HELLO 3`); keys found where Redis finds
//! them; and Redis' error texts for unknown commands, unknown subcommands and wrong arity.
//!
//! When one of these fails after a Redis upgrade, regenerate the table with `scripts/gen-command-table`.

use bytes::{Bytes, BytesMut};
use switchyard_gateway::Protocol;
use switchyard_gateway::cmd::{
    self, ACL_CATEGORY_NAMES, BeginSearch, CommandError, CommandSpec, FLAG_NAMES, FindKeys,
    KEY_FLAG_NAMES, KeySpec, flag,
};
use switchyard_tests::{RawClient, RedisServer};

const PROTOCOLS: [Protocol; 2] = [Protocol::Resp2, Protocol::Resp3];

/// A live redis-server and a raw connection to it, speaking `protocol`.
struct Live {
    _server: RedisServer,
    client: RawClient,
    protocol: Protocol,
}

impl Live {
    fn start(protocol: Protocol) -> Live {
        let server = RedisServer::start();
        let mut client = RawClient::connect(server.port());
        if protocol == Protocol::Resp3 {
            let hello = client.request(&[b"HELLO", b"3"]);
            assert!(hello.starts_with(b"%7\r\n"), "HELLO 3: {}", show(&hello));
        }
        Live {
            _server: server,
            client,
            protocol,
        }
    }

    fn call(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.client.request(args)
    }
}

/// What the gateway answers for the same request in `protocol`: `COMMAND ...` through `command::reply`, anything
/// else through `lookup` (only requests that fail there are sent, so Redis never executes them).
fn ours(args: &[&[u8]], protocol: Protocol) -> Vec<u8> {
    let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
    let mut out = BytesMut::new();
    if args
        .first()
        .is_some_and(|name| name.eq_ignore_ascii_case(b"command"))
    {
        cmd::command::reply(&args, protocol, &mut out);
    } else {
        match cmd::lookup(&args) {
            Ok(spec) => panic!("{:?} unexpectedly resolves to {}", args, spec.name),
            Err(error) => error.write_reply(&mut out),
        }
    }
    out.to_vec()
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts Redis and the gateway answer `args` with the same bytes, up to the order of subcommands (see
/// `canonical`).
fn assert_same(live: &mut Live, args: &[&[u8]]) {
    let theirs = live.call(args);
    let mine = ours(args, live.protocol);
    assert!(
        canonical(&parse(&theirs)) == canonical(&parse(&mine)),
        "{:?}: reply to {:?} differs\nredis:   {}\ngateway: {}",
        live.protocol,
        args.iter().map(|a| show(a)).collect::<Vec<_>>(),
        show(&theirs),
        show(&mine)
    );
}

/// The reply's bytes with every list of subcommands sorted: Redis lists them in its dict's order, which depends
/// on a hash seed drawn at startup, so two Redis processes disagree with each other. Everything else is kept.
fn canonical(entry: &Entry<'_>) -> Vec<u8> {
    let Value::Array(Some(items)) = &entry.value else {
        return entry.raw.to_vec();
    };
    let mut parts: Vec<Vec<u8>> = items.iter().map(canonical).collect();
    let sorted = |list: &Entry<'_>, chunk: usize| {
        let items = list.items();
        let mut chunks: Vec<Vec<u8>> = items
            .chunks(chunk)
            .map(|c| c.iter().flat_map(canonical).collect())
            .collect();
        chunks.sort();
        let mut out = list.header().to_vec();
        out.extend(chunks.concat());
        out
    };
    // A `COMMAND INFO` entry: element 9 lists the subcommands' entries.
    let is_info_entry = items.len() == 10
        && matches!(items[0].value, Value::Bulk(Some(_)))
        && matches!(items[1].value, Value::Int(_))
        && matches!(items[9].value, Value::Array(Some(_)));
    if is_info_entry {
        parts[9] = sorted(&items[9], 1);
    }
    // A `COMMAND DOCS` map: `subcommands` maps each subcommand's name to its docs.
    for i in (0..items.len().saturating_sub(1)).step_by(2) {
        if matches!(items[i].value, Value::Bulk(Some(b"subcommands"))) {
            parts[i + 1] = sorted(&items[i + 1], 2);
        }
    }
    let mut out = entry.header().to_vec();
    out.extend(parts.concat());
    out
}

/// One parsed RESP2 or RESP3 value and the raw bytes it came from.
struct Entry<'a> {
    raw: &'a [u8],
    value: Value<'a>,
}

enum Value<'a> {
    Line(&'a [u8]),
    Int(i64),
    Bulk(Option<&'a [u8]>),
    /// RESP3's null.
    Null,
    /// An array, or in RESP3 a set or a map (flattened to `[k1, v1, k2, v2]`, as RESP2 sends maps).
    Array(Option<Vec<Entry<'a>>>),
}

fn parse(buf: &[u8]) -> Entry<'_> {
    let (entry, end) = parse_at(buf, 0);
    assert_eq!(end, buf.len(), "trailing bytes after the reply");
    entry
}

fn parse_at(buf: &[u8], start: usize) -> (Entry<'_>, usize) {
    let eol = start
        + buf[start..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("CRLF");
    let line = &buf[start + 1..eol];
    let number = || -> i64 { std::str::from_utf8(line).unwrap().parse().unwrap() };
    let mut end = eol + 2;
    let value = match buf[start] {
        b'+' | b'-' => Value::Line(line),
        b':' => Value::Int(number()),
        b'$' if number() < 0 => Value::Bulk(None),
        b'$' => {
            let len = number() as usize;
            end += len + 2;
            Value::Bulk(Some(&buf[eol + 2..eol + 2 + len]))
        }
        b'_' => Value::Null,
        b'*' if number() < 0 => Value::Array(None),
        kind @ (b'*' | b'~' | b'%') => {
            let per_entry = if kind == b'%' { 2 } else { 1 };
            let mut items = Vec::new();
            for _ in 0..number() * per_entry {
                let (item, next) = parse_at(buf, end);
                items.push(item);
                end = next;
            }
            Value::Array(Some(items))
        }
        other => panic!("unexpected RESP type {:?}", other as char),
    };
    (
        Entry {
            raw: &buf[start..end],
            value,
        },
        end,
    )
}

impl Entry<'_> {
    /// The first line, CRLF included: the type and, for an aggregate, its length as sent.
    fn header(&self) -> &[u8] {
        let end = self
            .raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("CRLF");
        &self.raw[..end + 2]
    }

    fn items(&self) -> &[Entry<'_>] {
        match &self.value {
            Value::Array(Some(items)) => items,
            _ => panic!("not an array: {}", show(self.raw)),
        }
    }

    fn text(&self) -> &str {
        match &self.value {
            Value::Line(text) | Value::Bulk(Some(text)) => std::str::from_utf8(text).unwrap(),
            _ => panic!("not a string: {}", show(self.raw)),
        }
    }

    fn int(&self) -> i64 {
        match self.value {
            Value::Int(n) => n,
            _ => panic!("not an integer: {}", show(self.raw)),
        }
    }

    /// A flattened map (`[k1, v1, k2, v2]`) as pairs.
    fn pairs(&self) -> Vec<(&str, &Entry<'_>)> {
        self.items()
            .chunks(2)
            .map(|kv| (kv[0].text(), &kv[1]))
            .collect()
    }

    fn field(&self, name: &str) -> &Entry<'_> {
        self.pairs()
            .into_iter()
            .find(|(key, _)| *key == name)
            .unwrap_or_else(|| panic!("no field {name} in {}", show(self.raw)))
            .1
    }

    fn int_field(&self, name: &str) -> i32 {
        self.field(name).int() as i32
    }
}

fn bits<T: Copy + std::ops::BitOr<Output = T> + Default>(
    names: &[Entry<'_>],
    table: &[(&str, T)],
    what: &str,
) -> T {
    names.iter().fold(T::default(), |acc, name| {
        let bit = table
            .iter()
            .find(|(known, _)| *known == name.text())
            .unwrap_or_else(|| panic!("{what} {:?} is not in the gateway's table", name.text()))
            .1;
        acc | bit
    })
}

/// A key spec as the live server describes it.
fn live_key_spec(spec: &Entry<'_>) -> KeySpec {
    let begin = spec.field("begin_search");
    let find = spec.field("find_keys");
    let begin = match begin.field("type").text() {
        "index" => BeginSearch::Index(begin.field("spec").int_field("index")),
        "keyword" => {
            let s = begin.field("spec");
            BeginSearch::Keyword {
                keyword: Box::leak(s.field("keyword").text().to_string().into_boxed_str()),
                startfrom: s.int_field("startfrom"),
            }
        }
        "unknown" => BeginSearch::Unknown,
        other => panic!("begin_search type {other}"),
    };
    let find = match find.field("type").text() {
        "range" => {
            let s = find.field("spec");
            FindKeys::Range {
                lastkey: s.int_field("lastkey"),
                keystep: s.int_field("keystep"),
                limit: s.int_field("limit"),
            }
        }
        "keynum" => {
            let s = find.field("spec");
            FindKeys::Keynum {
                keynumidx: s.int_field("keynumidx"),
                firstkey: s.int_field("firstkey"),
                keystep: s.int_field("keystep"),
            }
        }
        "unknown" => FindKeys::Unknown,
        other => panic!("find_keys type {other}"),
    };
    KeySpec {
        flags: bits(spec.field("flags").items(), KEY_FLAG_NAMES, "key flag"),
        begin,
        find,
    }
}

/// Compares one live `COMMAND INFO` entry with our spec, field by field, subcommands included.
fn check_entry(live: &Entry<'_>, ours: &CommandSpec) {
    let f = live.items();
    let name = f[0].text();
    assert_eq!(name, ours.name);
    assert_eq!(f[1].int(), i64::from(ours.arity), "{name}: arity");
    let mut flags: u32 = bits(f[2].items(), FLAG_NAMES, "flag");
    if f[8].items().is_empty() {
        flags |= flag::NO_KEYS;
    }
    for tip in f[7].items() {
        match tip.text() {
            "nondeterministic_output" => flags |= flag::NONDETERMINISTIC,
            "nondeterministic_output_order" => flags |= flag::NONDETERMINISTIC_ORDER,
            _ => {}
        }
    }
    assert_eq!(flags, ours.flags, "{name}: flags");
    let categories: Vec<&str> = f[6]
        .items()
        .iter()
        .map(|c| c.text().trim_start_matches('@'))
        .collect();
    let acl = categories.iter().fold(0, |acc, cat| {
        acc | ACL_CATEGORY_NAMES
            .iter()
            .find(|(known, _)| known == cat)
            .unwrap_or_else(|| panic!("{name}: ACL category {cat} unknown to the gateway"))
            .1
    });
    assert_eq!(acl, ours.acl_categories, "{name}: ACL categories");
    let specs: Vec<KeySpec> = f[8].items().iter().map(live_key_spec).collect();
    assert_eq!(specs, ours.key_specs, "{name}: key specs");
    let mut live_subs: Vec<&Entry<'_>> = f[9].items().iter().collect();
    live_subs.sort_by_key(|sub| sub.items()[0].text().to_string());
    let our_subs: Vec<&str> = ours.subcommands.iter().map(|s| s.name).collect();
    let their_subs: Vec<&str> = live_subs.iter().map(|s| s.items()[0].text()).collect();
    assert_eq!(their_subs, our_subs, "{name}: subcommands");
    for (live_sub, our_sub) in live_subs.iter().zip(ours.subcommands) {
        check_entry(live_sub, our_sub);
    }
}

/// Every command and subcommand, by full name.
fn all_specs() -> Vec<&'static CommandSpec> {
    cmd::commands()
        .iter()
        .flat_map(|c| std::iter::once(c).chain(c.subcommands))
        .collect()
}

#[test]
fn table_matches_the_live_command_set_field_by_field() {
    let mut live = Live::start(Protocol::Resp2);
    let reply = live.call(&[b"COMMAND"]);
    let everything = parse(&reply);
    let mut entries: Vec<&Entry<'_>> = everything.items().iter().collect();
    entries.sort_by_key(|e| e.items()[0].text().to_string());
    let names: Vec<&str> = entries.iter().map(|e| e.items()[0].text()).collect();
    let ours: Vec<&str> = cmd::commands().iter().map(|c| c.name).collect();
    assert_eq!(names, ours, "top-level command set");
    assert_eq!(names.len(), 240, "Redis 7.0.15 has 240 top-level commands");
    assert_eq!(all_specs().len(), 366, "and 366 with subcommands");
    for (entry, spec) in entries.iter().zip(cmd::commands()) {
        check_entry(entry, spec);
    }
    assert_same(&mut live, &[b"COMMAND", b"COUNT"]);
    let server_info = live.call(&[b"INFO", b"server"]);
    assert!(
        show(&server_info).contains(&format!("redis_version:{}\r\n", cmd::REDIS_VERSION)),
        "the table was generated from another Redis version"
    );
}

#[test]
fn info_and_docs_are_byte_identical_for_every_command() {
    for protocol in PROTOCOLS {
        info_and_docs_in(protocol);
    }
}

fn info_and_docs_in(protocol: Protocol) {
    let mut live = Live::start(protocol);
    assert_same(&mut live, &[b"COMMAND", b"COUNT"]);
    for spec in all_specs() {
        let name = spec.name.as_bytes();
        assert_same(&mut live, &[b"COMMAND", b"INFO", name]);
        assert_same(&mut live, &[b"COMMAND", b"DOCS", name]);
        assert_same(
            &mut live,
            &[b"command", b"info", spec.name.to_uppercase().as_bytes()],
        );
    }
    for names in [
        &[
            &b"get"[..],
            b"nosuch",
            b"SET",
            b"config|GET",
            b"config|get|x",
            b"get|x",
            b"",
            b"config",
            b"get",
        ][..],
        &[b"nosuch"],
        &[b"CONFIG|nosuch", b"|", b"config|"],
    ] {
        let mut info: Vec<&[u8]> = vec![b"COMMAND", b"INFO"];
        info.extend(names);
        assert_same(&mut live, &info);
        let mut docs: Vec<&[u8]> = vec![b"COMMAND", b"DOCS"];
        docs.extend(names);
        assert_same(&mut live, &docs);
    }
    assert_same(&mut live, &[b"COMMAND", b"HELP"]);
    for bad in [
        &[&b"COMMAND"[..], b"COUNT", b"x"][..],
        &[b"COMMAND", b"nosuch"],
        &[b"COMMAND", b"HELP", b"x"],
        &[b"COMMAND", b"GETKEYS"],
        &[b"COMMAND", b"GETKEYSANDFLAGS"],
    ] {
        assert_same(&mut live, bad);
    }
}

/// Redis lists every command in its hash table's random order, so these compare as sorted sets of entries
/// (with the header: the type of aggregate and its length).
fn sorted_elements(reply: &[u8], chunk: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
    let parsed = parse(reply);
    let items = parsed.items();
    let mut chunks: Vec<Vec<u8>> = items
        .chunks(chunk)
        .map(|c| c.iter().flat_map(canonical).collect())
        .collect();
    chunks.sort();
    (parsed.header().to_vec(), chunks)
}

#[test]
fn full_listings_match_as_sets() {
    for protocol in PROTOCOLS {
        full_listings_in(protocol);
    }
}

fn full_listings_in(protocol: Protocol) {
    let mut live = Live::start(protocol);
    let mut check = |args: &[&[u8]], chunk: usize| {
        let theirs = sorted_elements(&live.call(args), chunk);
        let mine = sorted_elements(&ours(args, protocol), chunk);
        assert!(
            !theirs.1.is_empty() || args.len() > 3,
            "{:?} listed nothing",
            args
        );
        assert!(
            theirs == mine,
            "{protocol:?}: {:?}: listings differ",
            args.iter().map(|a| show(a)).collect::<Vec<_>>()
        );
    };
    check(&[b"COMMAND"], 1);
    check(&[b"COMMAND", b"INFO"], 1);
    check(&[b"COMMAND", b"DOCS"], 2);
    check(&[b"COMMAND", b"LIST"], 1);
    for (category, _) in ACL_CATEGORY_NAMES {
        check(
            &[
                b"COMMAND",
                b"LIST",
                b"FILTERBY",
                b"ACLCAT",
                category.as_bytes(),
            ],
            1,
        );
        check(
            &[
                b"command",
                b"list",
                b"filterby",
                b"aclcat",
                category.to_uppercase().as_bytes(),
            ],
            1,
        );
    }
    for pattern in [
        "*",
        "config*",
        "CONFIG|*",
        "*|*",
        "?et",
        "x[a-c]*",
        "[^a-m]*",
        "c\\onfig*",
        "*get*",
        "nosuch",
        "[z-x]*",
        "client|[kl]*",
        "*[",
        "\\*",
        "g*t",
        "*a*e*",
    ] {
        check(
            &[
                b"COMMAND",
                b"LIST",
                b"FILTERBY",
                b"PATTERN",
                pattern.as_bytes(),
            ],
            1,
        );
    }
    check(&[b"COMMAND", b"LIST", b"FILTERBY", b"ACLCAT", b"nosuch"], 1);
    check(&[b"COMMAND", b"LIST", b"FILTERBY", b"MODULE", b"nosuch"], 1);
    for bad in [
        &[&b"COMMAND"[..], b"LIST", b"x"][..],
        &[b"COMMAND", b"LIST", b"FILTERBY", b"x", b"y"],
        &[b"COMMAND", b"LIST", b"FILTERBY", b"PATTERN"],
        &[b"COMMAND", b"LIST", b"FILTERBY", b"PATTERN", b"*", b"x"],
    ] {
        assert_same(&mut live, bad);
    }
}

/// Invocations with every special key shape, written by hand.
const SHAPES: &[&[&str]] = &[
    &["get", "k"],
    &["GET", "k"],
    &["Object", "ENCODING", "k"],
    &["XREAD", "Count", "1", "streams", "a", "0"],
    &["ZUNIONSTORE", "d", "1", "a"],
    &["set", "k", "v"],
    &["set", "k", "v", "GET"],
    &["set", "k", "v", "EX", "10", "get"],
    &["mset", "a", "1", "b", "2", "c", "3"],
    &["mset", "a", "1", "b"],
    &["msetnx", "a", "1", "b", "2"],
    &["mget", "a", "b", "c"],
    &["del", "a", "b", "c"],
    &["rename", "a", "b"],
    &["smove", "a", "b", "m"],
    &["lmove", "a", "b", "LEFT", "RIGHT"],
    &["blpop", "a", "b", "0"],
    &["brpoplpush", "a", "b", "0"],
    &["bitop", "AND", "d", "a", "b"],
    &["object", "encoding", "k"],
    &["xinfo", "stream", "k"],
    &["memory", "usage", "k"],
    &["eval", "s", "0"],
    &["eval", "s", "2", "a", "b", "x"],
    &["eval", "s", "3", "a", "b"],
    &["eval", "s", "-1", "a"],
    &["eval", "s", "abc", "a"],
    &["eval", "s", "2abc", "a", "b"],
    &["evalsha", "x", "1", "a"],
    &["eval_ro", "s", "1", "a"],
    &["fcall", "f", "2", "a", "b"],
    &["fcall_ro", "f", "1", "a", "x"],
    &["xread", "STREAMS", "a", "0"],
    &[
        "xread", "COUNT", "1", "BLOCK", "0", "STREAMS", "a", "b", "0", "0",
    ],
    &["xread", "STREAMS", "a", "b", "0"],
    &["xread", "COUNT", "1", "a", "b"],
    &["xread", "streams", "streams", "streams"],
    &["xreadgroup", "GROUP", "g", "c", "STREAMS", "a", ">"],
    &[
        "xreadgroup",
        "GROUP",
        "g",
        "c",
        "COUNT",
        "1",
        "NOACK",
        "STREAMS",
        "a",
        "b",
        ">",
        ">",
    ],
    &["xreadgroup", "GROUP", "STREAMS", "c", "STREAMS", "a", ">"],
    &["zunionstore", "d", "2", "a", "b"],
    &["zunionstore", "d", "2", "a", "b", "WEIGHTS", "1", "2"],
    &["zunionstore", "d", "3", "a", "b"],
    &["zunionstore", "d", "0", "a"],
    &["zunionstore", "d", "2abc", "a", "b"],
    &["zinterstore", "d", "1", "a"],
    &["zdiffstore", "d", "2", "a", "b"],
    &["zunion", "2", "a", "b"],
    &["zinter", "1", "a", "WITHSCORES"],
    &["zdiff", "2", "a", "b"],
    &["zintercard", "2", "a", "b", "LIMIT", "1"],
    &["sintercard", "2", "a", "b"],
    &["sintercard", "x", "a", "b"],
    &["lmpop", "2", "a", "b", "LEFT"],
    &["lmpop", "5", "a", "LEFT"],
    &["blmpop", "0", "2", "a", "b", "LEFT", "COUNT", "2"],
    &["zmpop", "1", "a", "MIN"],
    &["bzmpop", "0", "2", "a", "b", "MAX"],
    &["sort", "k"],
    &["sort", "k", "STORE", "d"],
    &[
        "sort", "k", "BY", "w_*", "GET", "o_*", "LIMIT", "0", "1", "STORE", "d",
    ],
    &["sort", "k", "STORE", "d", "STORE", "e"],
    &["sort", "k", "BY", "store", "STORE"],
    &["sort", "k", "STORE", "limit", "x", "y"],
    &["sort_ro", "k", "BY", "x", "GET", "y"],
    &["migrate", "h", "6379", "k", "0", "5000"],
    &["migrate", "h", "6379", "", "0", "5000", "KEYS", "a", "b"],
    &[
        "migrate", "h", "6379", "", "0", "5000", "COPY", "REPLACE", "AUTH", "keys", "KEYS", "a",
        "b",
    ],
    &[
        "migrate", "h", "6379", "", "0", "5000", "AUTH2", "u", "keys", "KEYS", "a",
    ],
    &["migrate", "h", "6379", "k", "0", "5000", "KEYS", "a", "b"],
    &["migrate", "h", "6379", "", "0", "5000", "KEYS"],
    &["georadius", "k", "1", "2", "3", "m"],
    &["georadius", "k", "1", "2", "3", "m", "STORE", "d"],
    &["georadius", "k", "1", "2", "3", "m", "STOREDIST", "d"],
    &[
        "georadius",
        "k",
        "1",
        "2",
        "3",
        "m",
        "STORE",
        "d",
        "STOREDIST",
        "e",
    ],
    &["georadius", "k", "1", "2", "3", "m", "WITHDIST", "STORE"],
    &["georadiusbymember", "k", "m", "3", "km", "STORE", "d"],
    &["georadius_ro", "k", "1", "2", "3", "m"],
    &[
        "geosearchstore",
        "d",
        "k",
        "FROMMEMBER",
        "m",
        "BYRADIUS",
        "1",
        "m",
    ],
    &["bitfield", "k", "GET", "u8", "0"],
    &["bitfield", "k", "SET", "u8", "0", "1"],
    &[
        "bitfield", "k", "OVERFLOW", "WRAP", "GET", "u8", "0", "INCRBY", "u8", "0", "1",
    ],
    &["bitfield", "k", "GET", "u8"],
    &["bitfield_ro", "k", "GET", "u8", "0"],
    &["lcs", "a", "b"],
    &["watch", "a", "b"],
    &["publish", "c", "m"],
    &["spublish", "c", "m"],
    &["ssubscribe", "c"],
    &["ping"],
    &["config", "get", "x"],
    &["client", "kill", "x"],
    &["nosuch", "a"],
    &["config", "nosuch"],
    &["get"],
    &["get", "a", "b"],
];

/// A deterministic pseudo-random sequence (a 64-bit LCG), so a failure is reproducible.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % below as u64) as usize
    }
}

/// Generated invocations: every command with keys at its arity and a few more arguments, then random argument
/// lists drawn from numbers and keywords that steer key extraction.
fn generated_corpus() -> Vec<Vec<String>> {
    let mut corpus = Vec::new();
    let specs: Vec<&CommandSpec> = all_specs().into_iter().filter(|s| s.takes_keys()).collect();
    for spec in &specs {
        let prefix: Vec<String> = spec.name.split('|').map(str::to_string).collect();
        let base = spec.arity.unsigned_abs() as usize;
        let extra = if spec.arity < 0 { 0..5 } else { 0..1 };
        for extra in extra {
            let mut args = prefix.clone();
            while args.len() < base + extra {
                args.push(format!("k{}", args.len()));
            }
            corpus.push(args);
        }
    }
    let words = [
        "0",
        "1",
        "2",
        "3",
        "-1",
        "5",
        "2abc",
        " 2",
        "+1",
        "01",
        "99999999999",
        "STREAMS",
        "STORE",
        "STOREDIST",
        "KEYS",
        "GET",
        "SET",
        "BY",
        "LIMIT",
        "AUTH",
        "AUTH2",
        "COPY",
        "REPLACE",
        "GROUP",
        "COUNT",
        "BLOCK",
        "NOACK",
        "OVERFLOW",
        "INCRBY",
        "WEIGHTS",
        "LEFT",
        "MIN",
        "k",
        "",
        "a\0b",
        "store\0x",
    ];
    let mut rng = Lcg(0x5eed);
    for _ in 0..4000 {
        let spec = specs[rng.next(specs.len())];
        let mut args: Vec<String> = spec.name.split('|').map(str::to_string).collect();
        for _ in 0..rng.next(12) {
            args.push(words[rng.next(words.len())].to_string());
        }
        corpus.push(args);
    }
    corpus
}

#[test]
fn getkeys_matches_redis_on_a_corpus() {
    let mut live = Live::start(Protocol::Resp2);
    let mut live3 = Live::start(Protocol::Resp3);
    let mut corpus: Vec<Vec<String>> = SHAPES
        .iter()
        .map(|shape| shape.iter().map(|w| w.to_string()).collect())
        .collect();
    corpus.extend(generated_corpus());
    let mut with_keys = 0;
    for invocation in &corpus {
        let words: Vec<&[u8]> = invocation.iter().map(|w| w.as_bytes()).collect();
        for sub in [&b"GETKEYS"[..], b"GETKEYSANDFLAGS"] {
            let mut request: Vec<&[u8]> = vec![b"COMMAND", sub];
            request.extend(&words);
            assert_same(&mut live, &request);
            assert_same(&mut live3, &request);
        }
        // And the session's own entry point, against the keys Redis listed.
        let mut request: Vec<&[u8]> = vec![b"COMMAND", b"GETKEYS"];
        request.extend(&words);
        let reply = live.call(&request);
        let args: Vec<Bytes> = invocation
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect();
        let Ok(spec) = cmd::lookup(&args) else {
            continue;
        };
        let mut indices = Vec::new();
        let result = spec.key_indices(&args, &mut indices);
        let parsed = parse(&reply);
        match &parsed.value {
            Value::Array(Some(keys)) => {
                assert_eq!(result, Ok(()), "{invocation:?}");
                let theirs: Vec<&str> = keys.iter().map(|k| k.text()).collect();
                let mine: Vec<&str> = indices.iter().map(|&i| invocation[i].as_str()).collect();
                assert_eq!(mine, theirs, "key_indices of {invocation:?}");
                with_keys += usize::from(!theirs.is_empty());
            }
            Value::Line(b"ERR Invalid arguments specified for command") => {
                assert_eq!(
                    result,
                    Err(CommandError::InvalidKeyArguments),
                    "{invocation:?}"
                );
            }
            _ => assert!(
                spec.has(flag::NO_KEYS) || !spec.takes_keys(),
                "{invocation:?}: {}",
                show(&reply)
            ),
        }
    }
    // The corpus must actually exercise key extraction, not just error paths.
    assert!(
        with_keys > corpus.len() / 3,
        "only {with_keys} of {} invocations had keys",
        corpus.len()
    );
}

#[test]
fn errors_are_byte_identical() {
    for protocol in PROTOCOLS {
        errors_in(protocol);
    }
}

fn errors_in(protocol: Protocol) {
    let mut live = Live::start(protocol);
    let long = "x".repeat(300);
    let many: Vec<String> = (0..200).map(|i| format!("arg{i}")).collect();
    let mut cases: Vec<Vec<Vec<u8>>> = vec![
        vec![b"foo".to_vec()],
        vec![b"foo".to_vec(), b"a".to_vec(), b"b".to_vec()],
        vec![b"FOO".to_vec(), b"A".to_vec()],
        vec![b"".to_vec()],
        vec![b"".to_vec(), b"".to_vec(), b"".to_vec()],
        vec![
            long.clone().into_bytes(),
            long.clone().into_bytes(),
            b"b".to_vec(),
        ],
        vec![
            b"foo".to_vec(),
            vec![b'y'; 127],
            b"more".to_vec(),
            b"andmore".to_vec(),
        ],
        vec![
            b"foo".to_vec(),
            vec![b'y'; 120],
            b"12345678".to_vec(),
            b"x".to_vec(),
        ],
        vec![b"f\r\noo".to_vec(), b"a\r\nb".to_vec(), b"c\nd".to_vec()],
        vec![
            b"f\0oo".to_vec(),
            b"a\0b".to_vec(),
            b"\0".to_vec(),
            b"c".to_vec(),
        ],
        vec![b"\xff\xfe".to_vec(), b"\xc3".to_vec()],
        vec![b"get_".to_vec(), b"k".to_vec()],
        vec![b"config".to_vec(), b"nosuch".to_vec()],
        vec![b"CoNfIg".to_vec(), b"NoSuch".to_vec(), b"x".to_vec()],
        vec![b"config".to_vec(), long.clone().into_bytes()],
        vec![b"config".to_vec(), b"a\0b".to_vec()],
        vec![b"config".to_vec(), b"a\r\nb".to_vec()],
        vec![b"config".to_vec(), b"".to_vec()],
        vec![b"object".to_vec(), b"get".to_vec(), b"k".to_vec()],
    ];
    let mut with_many = vec![b"nosuch".to_vec()];
    with_many.extend(many.iter().map(|a| a.clone().into_bytes()));
    cases.push(with_many);
    // Wrong arity for every command and subcommand, and every container without or with an unknown subcommand.
    for spec in all_specs() {
        let prefix: Vec<Vec<u8>> = spec
            .name
            .split('|')
            .map(|p| p.as_bytes().to_vec())
            .collect();
        let wrong = if spec.arity > 0 {
            Some(spec.arity as usize + 1)
        } else {
            (spec.arity.unsigned_abs() as usize)
                .checked_sub(1)
                .filter(|&n| n >= prefix.len())
        };
        if let Some(wrong) = wrong {
            let mut args = prefix.clone();
            while args.len() < wrong {
                args.push(b"x".to_vec());
            }
            cases.push(args);
        }
        if !spec.subcommands.is_empty() {
            cases.push(vec![
                spec.name.to_uppercase().into_bytes(),
                b"nosuch".to_vec(),
            ]);
        }
    }
    assert!(cases.len() > 300, "too few error cases: {}", cases.len());
    for case in &cases {
        let args: Vec<&[u8]> = case.iter().map(Vec::as_slice).collect();
        assert_same(&mut live, &args);
        // The connection still serves: Redis never closes it for these.
        assert_eq!(live.call(&[b"PING"]), b"+PONG\r\n");
    }
}
