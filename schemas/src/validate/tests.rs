//! The route-table rules, each with the error it gives.

use super::*;

fn errors(json: &str) -> Vec<String> {
    let route: RouteTable = serde_json::from_str(json).unwrap();
    match route.validate(&|name| (name == "main").then(|| "redis://127.0.0.1:6379".to_string())) {
        Ok(()) => Vec::new(),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn accepts_valid_tables() {
    assert!(errors(r#"{"type":"single","target":"main"}"#).is_empty());
    assert!(errors(r#"{"type":"sharded","hash":{"algorithm":"crc16","buckets":4},"shards":[
        {"name":"a","target":"redis://h:1","buckets":["0-1"]},{"name":"b","target":"main","buckets":["2","3"]}]}"#).is_empty());
    assert!(errors(r#"{"type":"single","target":{"read":{"resources":["redis-cluster-slaves://h:1"],"policy":"random"},
        "write":{"resources":["redis://h:1","redis://h:2"],"ack":"all"}}}"#).is_empty());
}

#[test]
fn names_the_path_of_each_error() {
    assert_eq!(
        errors(
            r#"{"type":"sharded","hash":{"algorithm":"camellia","buckets":4},"shards":[
            {"name":"a","target":"redis://h:1","buckets":["0-2"]},
            {"name":"a","target":"nowhere","buckets":["2"],"weight":0}]}"#
        ),
        vec![
            "/shards/1/name: duplicate shard name 'a'",
            "/shards/1/weight: must be greater than 0",
            "/shards/1/target: unknown resource 'nowhere'",
            "/shards/1/buckets/0: bucket 2 is also owned by shard 'a'",
            "/shards: bucket 3 is not owned by any shard (every bucket from 0 to 3 must be)",
        ]
    );
    assert_eq!(
        errors(
            r#"{"type":"single","target":{"write":{"resources":["redis-sentinel-slaves://h:1/m"]},"read":{"resources":[]}}}"#
        ),
        vec![
            "/target/write/resources/0: a -slaves resource only serves reads; it cannot be written to",
            "/target/read/resources: at least one read resource is required",
        ]
    );
    assert_eq!(
        errors(
            r#"{"type":"sharded","shards":[{"name":"a","target":"redis://h:1","buckets":["0"]}]}"#
        ),
        vec!["/shards/0/buckets: the ring algorithm has no buckets"]
    );
}

/// A sharded table of `shards` ring shards named s0, s1, ... with `weight` each.
fn ring(shards: usize, weight: u32) -> String {
    let shards: Vec<String> = (0..shards)
        .map(|i| format!(r#"{{"name":"s{i}","target":"main","weight":{weight}}}"#))
        .collect();
    format!(r#"{{"type":"sharded","shards":[{}]}}"#, shards.join(","))
}

#[test]
fn bucket_counts_are_bounded_before_anything_is_allocated() {
    // 2^32 - 1 buckets would have allocated 64 GiB for the ownership check (and 8 GiB for placement).
    for algorithm in ["crc16", "camellia", "camellia_hashtag"] {
        assert_eq!(
            errors(&format!(
                r#"{{"type":"sharded","hash":{{"algorithm":"{algorithm}","buckets":4294967295}},
                "shards":[{{"name":"a","target":"main","buckets":["0-4294967294"]}}]}}"#
            )),
            vec!["/hash/buckets: must be at most 65536"]
        );
    }
    let most = format!(
        r#"{{"type":"sharded","hash":{{"algorithm":"crc16","buckets":{MAX_BUCKETS}}},
        "shards":[{{"name":"a","target":"main","buckets":["0-{}"]}}]}}"#,
        MAX_BUCKETS - 1
    );
    assert!(errors(&most).is_empty());
    let double = format!(
        r#"{{"type":"double_write","primary":{{"type":"single","target":"main"}},"secondary":
        {{"type":"sharded","hash":{{"algorithm":"camellia","buckets":{}}},"shards":[]}}}}"#,
        MAX_BUCKETS + 1
    );
    assert_eq!(
        errors(&double),
        vec![
            "/secondary/shards: at least one shard is required",
            "/secondary/hash/buckets: must be at most 65536",
        ]
    );
}

#[test]
fn a_route_grants_between_one_and_max_databases() {
    assert!(errors(r#"{"type":"single","target":"main","databases":4}"#).is_empty());
    for databases in [0, MAX_DATABASES + 1] {
        assert_eq!(
            errors(&format!(
                r#"{{"type":"single","target":"main","databases":{databases}}}"#
            )),
            vec!["/databases: must be between 1 and 256"]
        );
    }
}

#[test]
fn a_shard_lists_at_most_one_entry_per_bucket() {
    let entries = [r#""0""#; 5].join(",");
    assert_eq!(
        errors(&format!(
            r#"{{"type":"sharded","hash":{{"algorithm":"crc16","buckets":4}},
            "shards":[{{"name":"a","target":"main","buckets":[{entries}]}}]}}"#
        )),
        vec![
            "/shards/0/buckets: at most 4 entries (one per bucket) are allowed",
            "/shards: bucket 0 is not owned by any shard (every bucket from 0 to 3 must be)",
        ]
    );
}

#[test]
fn ring_weights_are_bounded() {
    assert!(errors(&ring(2, 512)).is_empty());
    assert_eq!(
        errors(&ring(2, 513)),
        vec!["/shards: the shards' weights add up to 1026; at most 1024 is allowed"]
    );
    // The sum cannot overflow into something small.
    assert_eq!(
        errors(&ring(3, u32::MAX)),
        vec!["/shards: the shards' weights add up to 12884901885; at most 1024 is allowed"]
    );
}

#[test]
fn shard_counts_are_bounded() {
    assert!(errors(&ring(MAX_SHARDS, 1)).is_empty());
    assert_eq!(
        errors(&ring(MAX_SHARDS + 1, 1)),
        vec!["/shards: at most 1024 shards are allowed"]
    );
}

#[test]
fn resource_sets_and_strings_are_bounded() {
    let set = |n: usize| vec![r#""redis://h:1""#; n].join(",");
    assert!(
        errors(&format!(
            r#"{{"type":"single","target":{{"read":{{"resources":[{}]}},"write":{{"resources":[{}]}}}}}}"#,
            set(MAX_SET_RESOURCES),
            set(MAX_SET_RESOURCES)
        ))
        .is_empty()
    );
    assert_eq!(
        errors(&format!(
            r#"{{"type":"single","target":{{"read":{{"resources":[{}]}},"write":{{"resources":[{}]}}}}}}"#,
            set(MAX_SET_RESOURCES + 1),
            set(MAX_SET_RESOURCES + 1)
        )),
        vec![
            "/target/write/resources: at most 16 resources are allowed",
            "/target/read/resources: at most 16 resources are allowed",
        ]
    );
    let long_url = format!("redis://{}:1", "h".repeat(MAX_RESOURCE_LEN));
    assert_eq!(
        errors(&format!(r#"{{"type":"single","target":"{long_url}"}}"#)),
        vec!["/target: must be at most 4096 bytes"]
    );
    let long_name = "n".repeat(MAX_SHARD_NAME_LEN + 1);
    assert_eq!(
        errors(&format!(
            r#"{{"type":"sharded","shards":[{{"name":"{long_name}","target":"main"}}]}}"#
        )),
        vec!["/shards/0/name: must be at most 128 bytes"]
    );
}

#[test]
fn tenant_names_cannot_run_into_each_others_channel_prefix() {
    for name in ["alpha", "a", "team-1.cache_v2", "0"] {
        assert!(is_valid_tenant_name(name), "{name}");
    }
    for name in ["", "a:b", "a*", "-a", "a b", "é", &"t".repeat(65)] {
        assert!(!is_valid_tenant_name(name), "{name}");
    }
}

/// The validation errors of a routes file.
fn file_errors(json: &str) -> Vec<String> {
    let file: RoutesFile = serde_json::from_str(json).unwrap();
    match file.validate() {
        Ok(()) => Vec::new(),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn routes_file_strings_are_bounded() {
    let messages = file_errors(&format!(
        r#"{{"tenants":[{{"name":"{}","passwords":["{}"],"route":{{"type":"single","target":"redis://h:1"}}}}]}}"#,
        "t".repeat(MAX_TENANT_NAME_LEN + 1),
        "p".repeat(MAX_PASSWORD_LEN + 1)
    ));
    assert_eq!(
        messages,
        vec![
            "/tenants/0/name: must be a letter or digit, then letters, digits, '_', '.' or '-', at most 64 bytes",
            "/tenants/0/passwords/0: must be at most 1024 bytes",
        ]
    );
}

#[test]
fn a_misspelt_target_field_is_refused() {
    let misspelt = r#"{"type":"single","target":{"raed":{"resources":["redis://h:1"]},"write":{"resources":["redis://h:2"]}}}"#;
    assert!(serde_json::from_str::<RouteTable>(misspelt).is_err());
    let right = misspelt.replace("raed", "read");
    assert!(serde_json::from_str::<RouteTable>(&right).is_ok());
}

#[test]
fn routes_file_rules() {
    let messages = file_errors(
        r#"{"tenants":[
            {"name":"a","passwords":[],"route":{"type":"single","target":"redis://h:1"}},
            {"name":"a","passwords":["x","x"],"route":{"type":"single","target":"redis://h:1"}},
            {"name":"c","passwords":[],"route":{"type":"single","target":"redis:/h"}}]}"#,
    );
    assert_eq!(
        messages,
        vec![
            "/tenants/1/name: duplicate tenant name 'a'",
            "/tenants/1/passwords/1: the same password is also given to tenant 'a'",
            "/tenants/2/passwords: only one tenant may have no passwords, and 'a' already has none",
            "/tenants/2/route/target: unknown resource 'redis:/h'",
        ]
    );
}

#[test]
fn a_tenant_without_a_namespace_shares_no_database_with_namespaced_ones() {
    let file = |second: &str, third: &str| {
        file_errors(&format!(
            r#"{{"resources": {{"shared": "redis://H:1/2"}}, "tenants":[
                {{"name":"a","passwords":["pa"],"namespace":"a:","route":{{"type":"single","target":"shared"}}}},
                {{"name":"b","passwords":["pb"],{second}"route":{{"type":"single","target":"redis://h:1/2"}}}},
                {{"name":"c","passwords":["pc"],{third}"route":{{"type":"single","target":"redis://h:1/3"}}}}]}}"#
        ))
    };
    // b reaches a's database (the same server, named by a resource and by its URL) without a namespace.
    assert_eq!(
        file("", ""),
        vec![
            "/tenants/1/route: tenant 'b' has no key namespace, and tenant 'a' uses database h:1/2 with namespace \
             'a:': no namespace is the start of every namespace, so 'b' would see 'a''s keys"
        ]
    );
    // Namespaces of their own, another database, or an admin tenant: allowed.
    assert!(file(r#""namespace":"b:","#, "").is_empty());
    assert!(file(r#""allow_admin":true,"#, "").is_empty());
    let elsewhere = file_errors(
        r#"{"tenants":[
            {"name":"a","passwords":["pa"],"namespace":"a:","route":{"type":"single","target":"redis://h:1/2"}},
            {"name":"b","passwords":["pb"],"route":{"type":"single","target":"redis://h:1/3"}}]}"#,
    );
    assert!(elsewhere.is_empty(), "{elsewhere:?}");
}

#[test]
fn output_buffer_limits_hold_together_as_the_control_plane_requires() {
    let tenant = |limits: &str| {
        format!(
            r#"{{"tenants":[{{"name":"t","passwords":["p"],"limits":{limits},"route":{{"type":"single","target":"redis://h:1"}}}}]}}"#
        )
    };
    let fine = r#"{"output_buffer_limit":{"hard_bytes":0,"soft_bytes":10,"soft_seconds":5},
                   "pubsub_output_buffer_limit":{"hard_bytes":20,"soft_bytes":10,"soft_seconds":1}}"#;
    assert!(file_errors(&tenant(fine)).is_empty());
    let broken = r#"{"output_buffer_limit":{"hard_bytes":0,"soft_bytes":10,"soft_seconds":0},
                     "pubsub_output_buffer_limit":{"hard_bytes":5,"soft_bytes":10,"soft_seconds":1}}"#;
    assert_eq!(
        file_errors(&tenant(broken)),
        vec![
            "/tenants/0/limits/output_buffer_limit/soft_seconds: must be greater than 0 when soft_bytes is not 0: \
             a soft bound needs a duration (soft_bytes 0 turns it off)",
            "/tenants/0/limits/pubsub_output_buffer_limit/hard_bytes: must not be below soft_bytes (10): the hard \
             bound would close the connection before the soft one could apply (hard_bytes 0 turns it off)",
        ]
    );
}
