//! Combining the backends' INFO fields, and the keyspace a tenant sees.

use super::*;

fn bulk(text: &str) -> Bytes {
    let mut out = BytesMut::new();
    resp::bulk(&mut out, text.as_bytes());
    out.freeze()
}

fn reply_text(local: &Local, replies: &[Bytes], own: Option<Range<u32>>) -> String {
    let reply = local.reply(replies, own, Protocol::Resp2);
    let body = keyspace::bulk_body(&reply).unwrap_or_default();
    String::from_utf8_lossy(body).into_owned()
}

fn asked(sections: &[&'static str]) -> Local {
    let args: Vec<Bytes> = std::iter::once("INFO")
        .chain(sections.iter().copied())
        .map(|s| Bytes::from_static(s.as_bytes()))
        .collect();
    Local::asked(&args)
}

#[test]
fn sections_are_asked_as_redis_reads_its_arguments() {
    let names = |local: &Local| local.sections.iter().map(|s| s.name).collect::<Vec<_>>();
    assert_eq!(
        names(&asked(&["CPU", "server", "nosuch"])),
        ["server", "cpu"]
    );
    assert!(!asked(&[]).wants("commandstats") && asked(&[]).wants("keyspace"));
    assert!(asked(&["default", "commandstats"]).wants("commandstats"));
    // Redis' sections: the gateway's own only by name.
    let redis = SECTIONS.iter().filter(|s| !s.own).count();
    assert_eq!(names(&asked(&["everything"])).len(), redis);
    assert!(!asked(&["all"]).wants("nearcache") && asked(&["NearCache"]).wants("nearcache"));
    assert!(asked(&["server", "cpu"]).backend_sections().is_empty());
    assert_eq!(
        asked(&["all"]).backend_sections(),
        ["memory", "persistence", "stats", "replication", "keyspace"]
    );
    // Several are asked of a backend as plain INFO (see `session::info`): its default set must hold them.
    let default = asked(&[]);
    assert!(
        asked(&["all"])
            .backend_sections()
            .iter()
            .all(|s| default.wants(s))
    );
}

#[test]
fn backend_fields_combine_field_by_field() {
    let replies = [
        bulk(
            "# Memory\r\nused_memory:1024\r\nmem_allocator:jemalloc-5.3.0\r\nmaxmemory_policy:allkeys-lru\r\n",
        ),
        Bytes::from_static(b"-ERR down\r\n"),
        bulk(
            "used_memory:2048\r\nmem_allocator:libc\r\nloading:1\r\nrdb_last_bgsave_status:err\r\n",
        ),
    ];
    let text = reply_text(&asked(&["memory", "persistence"]), &replies, None);
    for line in [
        "# Memory\r\nused_memory:3072\r\nused_memory_human:3.00K\r\n",
        "mem_allocator:jemalloc-5.3.0\r\n",
        "maxmemory_policy:allkeys-lru\r\n",
        // Nobody said: Redis' value on an idle server.
        "maxmemory:0\r\nmaxmemory_human:0B\r\n",
        "\r\n\r\n# Persistence\r\nloading:1\r\n",
        "rdb_last_bgsave_status:err\r\n",
        "aof_last_write_status:ok\r\n",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    // One cluster's masters combined, then with another shard: the same as all three at once.
    let partial = partial(&replies[..2], Protocol::Resp3);
    let again = reply_text(
        &asked(&["memory", "persistence"]),
        &[partial, replies[2].clone()],
        None,
    );
    assert_eq!(again, text);
}

#[test]
fn gateway_fields_and_lines_come_from_the_gateway() {
    let mut local = asked(&["stats", "errorstats"]);
    local.set("total_error_replies", 3);
    local.set_lines("errorstats", "errorstat_ERR:count=3\r\n".to_string());
    let text = reply_text(
        &local,
        &[bulk("total_error_replies:99\r\nexpired_keys:4\r\n")],
        None,
    );
    assert!(text.contains("\r\ntotal_error_replies:3\r\n"), "{text}");
    assert!(text.contains("\r\nexpired_keys:4\r\n"), "{text}");
    assert!(
        text.ends_with("# Errorstats\r\nerrorstat_ERR:count=3\r\n"),
        "{text}"
    );
}

#[test]
fn keyspaces_add_up() {
    let replies = [
        bulk(
            "# Keyspace\r\ndb0:keys=10,expires=2,avg_ttl=1000\r\ndb3:keys=1,expires=0,avg_ttl=0\r\n",
        ),
        bulk("# Keyspace\r\ndb0:keys=5,expires=2,avg_ttl=3000\r\n"),
        Bytes::from_static(b"-ERR down\r\n"),
    ];
    let local = asked(&["keyspace"]);
    assert_eq!(
        reply_text(&local, &replies, None),
        "# Keyspace\r\ndb0:keys=15,expires=4,avg_ttl=2000\r\ndb3:keys=1,expires=0,avg_ttl=0\r\n"
    );
    assert_eq!(
        reply_text(&local, &replies, Some(3..4)),
        "# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n"
    );
    // A tenant on database 0 does not see its neighbours' on 3; one that owns 0 to 3 sees both.
    assert_eq!(
        reply_text(&local, &replies, Some(0..1)),
        "# Keyspace\r\ndb0:keys=15,expires=4,avg_ttl=2000\r\n"
    );
    assert_eq!(
        reply_text(&local, &replies, Some(0..4)),
        "# Keyspace\r\ndb0:keys=15,expires=4,avg_ttl=2000\r\ndb3:keys=1,expires=0,avg_ttl=0\r\n"
    );
    assert_eq!(reply_text(&local, &[], None), "# Keyspace\r\n");
}

#[test]
fn human_sizes() {
    assert_eq!(human_bytes(512), "512B");
    assert_eq!(human_bytes(1536), "1.50K");
    assert_eq!(human_bytes(3 * 1024 * 1024), "3.00M");
}
