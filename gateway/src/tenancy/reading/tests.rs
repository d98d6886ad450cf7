use std::collections::HashSet;

use super::*;
use crate::cmd::spec::{BeginSearch, FindKeys, key_flag};
use crate::cmd::{lookup_by_name, resolve, words};

fn spec(name: &str) -> &'static CommandSpec {
    lookup_by_name(name.as_bytes()).unwrap_or_else(|| panic!("{name} is not in the table"))
}

/// `understand` for a request of words, as a namespaced tenant sends it.
fn understood(request: &[&str]) -> Result<(), String> {
    let args = words(request);
    let spec = resolve(&args).unwrap();
    understand(spec, &args, true)
}

#[test]
fn every_command_is_read_or_refused() {
    let mut filed = HashSet::new();
    let ids = SPECS
        .iter()
        .chain(KEYLESS)
        .chain(DATABASE)
        .chain(CHANNELS)
        .chain(SESSION)
        .chain(SERVER)
        .chain(REFUSED.iter().map(|(id, _)| id))
        .chain(PARSED.iter().map(|(id, _)| id));
    for id in ids {
        assert!(filed.insert(*id), "{id:?} is filed twice");
    }
    let unread: Vec<&str> = crate::cmd::commands()
        .iter()
        .flat_map(|spec| std::iter::once(spec).chain(spec.subcommands))
        .filter(|spec| matches!(reading(spec), Reading::Refused(NOT_READ)))
        .map(|spec| spec.name)
        .collect();
    assert!(unread.is_empty(), "commands nobody has read: {unread:?}");
}

#[test]
fn a_command_nobody_has_read_is_refused() {
    // A command a newer Redis adds: in none of the tables (which file it by its `Command`: here the tables are
    // skipped), and without the admin flag.
    let none = crate::cmd::spec::RawReply {
        resp2: b"",
        resp3: b"",
    };
    let new = CommandSpec {
        id: Command::Hdel,
        name: "hgetdel",
        arity: -4,
        flags: crate::cmd::flag::WRITE,
        acl_categories: 0,
        key_specs: spec("hdel").key_specs,
        subcommands: &[],
        keys_proc: crate::cmd::KeysProc::None,
        info: none,
        docs: none,
    };
    assert!(matches!(unfiled(&new), Reading::Refused(NOT_READ)));
}

#[test]
fn commands_read_by_their_specs_have_specs_that_say_exactly() {
    for id in SPECS {
        let (spec, name) = (id.spec(), id.spec().name);
        assert!(spec.takes_keys(), "{name} has no keys");
        for key_spec in spec.key_specs {
            assert!(
                matches!(key_spec.begin, BeginSearch::Index(_)),
                "{name}: a keyword search may find an argument that is not the keyword"
            );
            assert!(
                matches!(
                    key_spec.find,
                    FindKeys::Range { limit: 0, .. } | FindKeys::Keynum { .. }
                ),
                "{name}"
            );
            assert_eq!(key_spec.flags & key_flag::INCOMPLETE, 0, "{name}");
        }
    }
    for (id, _) in PARSED {
        assert!(id.spec().takes_keys(), "{id:?}");
    }
    for id in KEYLESS.iter().chain(DATABASE) {
        assert!(!id.spec().takes_keys(), "{id:?} takes keys");
    }
}

#[test]
fn a_repeated_option_that_names_a_key_is_refused() {
    for request in [
        &["SORT", "k", "STORE", "a", "STORE", "b"][..],
        &[
            "GEORADIUS",
            "k",
            "0",
            "0",
            "1",
            "km",
            "STORE",
            "a",
            "STORE",
            "b",
        ],
        &[
            "GEORADIUS",
            "k",
            "0",
            "0",
            "1",
            "km",
            "STORE",
            "a",
            "STOREDIST",
            "b",
        ],
        &[
            "GEORADIUSBYMEMBER",
            "k",
            "m",
            "1",
            "km",
            "STOREDIST",
            "a",
            "STORE",
            "b",
        ],
    ] {
        let refused = understood(request).expect_err("refused");
        assert!(refused.contains("more than once"), "{request:?}: {refused}");
    }
    assert_eq!(understood(&["SORT", "k", "STORE", "a"]), Ok(()));
    assert_eq!(
        understood(&[
            "GEORADIUS",
            "k",
            "0",
            "0",
            "1",
            "km",
            "COUNT",
            "3",
            "STORE",
            "a"
        ]),
        Ok(())
    );
}

#[test]
fn a_key_spelled_like_an_option_is_refused_where_the_specs_read_it_otherwise() {
    // sort.c stores into `x`; SORT's key finder skips the argument after GET and finds `get`.
    let refused = understood(&["SORT", "k", "STORE", "get", "STORE", "x"]).expect_err("refused");
    assert!(refused.contains("more than once"), "{refused}");
    // A pattern named like an option is a pattern, as sort.c reads it.
    assert_eq!(
        understood(&["SORT", "k", "LIMIT", "0", "1", "GET", "STORE"]),
        Ok(())
    );
    let refused = understood(&["SORT", "k", "LIMIT", "0"]).expect_err("refused");
    assert_eq!(refused, "ERR syntax error");
    // The key specs search for STREAMS from the fifth argument, which is the consumer's name here.
    let refused = understood(&[
        "XREADGROUP",
        "NOACK",
        "GROUP",
        "g",
        "STREAMS",
        "STREAMS",
        "mine",
        "victim",
        "0",
        "0",
    ])
    .expect_err("refused");
    assert!(
        refused.contains("differently from its key specs"),
        "{refused}"
    );
    assert_eq!(
        understood(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "COUNT",
            "2",
            "STREAMS",
            "a",
            "b",
            ">",
            ">"
        ]),
        Ok(())
    );
    assert_eq!(understood(&["XREAD", "STREAMS", "streams", "0"]), Ok(()));
}

#[test]
fn every_database_option_is_found() {
    let databases = |request: &[&str]| {
        let args = words(request);
        databases(resolve(&args).unwrap(), &args)
    };
    assert_eq!(
        databases(&["COPY", "mine", "victim", "DB", "0", "DB", "2", "REPLACE"]),
        vec![4, 6]
    );
    assert_eq!(databases(&["COPY", "db", "x", "db", "1"]), vec![4]);
    assert_eq!(databases(&["MOVE", "db", "1"]), vec![2]);
    assert_eq!(databases(&["SWAPDB", "1", "2"]), vec![1, 2]);
    assert_eq!(databases(&["GET", "db"]), Vec::<usize>::new());
    assert_eq!(
        parse::copy(&words(&["COPY", "a", "b", "DB"])),
        Err(parse::Ambiguity::Syntax)
    );
}

#[test]
fn a_namespaced_tenant_may_not_send_keys_nobody_can_find() {
    let refused = understood(&["ZUNIONSTORE", "dst", "0", "a"]).expect_err("refused");
    assert!(refused.contains("no key can be found"), "{refused}");
    let args = words(&["ZUNIONSTORE", "dst", "0", "a"]);
    assert_eq!(understand(resolve(&args).unwrap(), &args, false), Ok(()));
}

#[test]
fn what_would_freeze_or_reach_past_a_tenant_is_refused_to_tenants() {
    for name in [
        "script|debug",
        "restore-asking",
        "memory|purge",
        "keys",
        "swapdb",
    ] {
        assert!(
            crate::tenancy::refusal(spec(name), false).is_some(),
            "{name}"
        );
        assert_eq!(crate::tenancy::refusal(spec(name), true), None, "{name}");
    }
}
