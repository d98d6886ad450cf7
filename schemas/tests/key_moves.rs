//! The route guard's arithmetic: which share of a tenant's keys a route change leaves where they are no longer
//! looked for, checked against the keys the data path's placement actually moves.

use serde_json::{Value, json};
use switchyard_schemas::RouteTable;
use switchyard_schemas::placement::TablePlacement;
use switchyard_schemas::placement::moves::{Estimate, key_moves, same_data};

fn table(value: Value) -> RouteTable {
    serde_json::from_value(value).unwrap()
}

fn no_names(_: &str) -> Option<String> {
    None
}

/// The share of `count` keys whose write primary differs between the two tables, by the placement code itself.
fn counted(old: &RouteTable, new: &RouteTable, count: u32) -> f64 {
    let (a, b) = (TablePlacement::new(old), TablePlacement::new(new));
    let primary =
        |p: &TablePlacement, key: &[u8]| p.target_of(key).unwrap().1.write_resources()[0].clone();
    let moved = (0..count)
        .filter(|i| {
            let key = format!("user:{i}:{}", i.wrapping_mul(2_654_435_761));
            primary(&a, key.as_bytes()) != primary(&b, key.as_bytes())
        })
        .count();
    moved as f64 / f64::from(count)
}

fn ring(weights: &[(&str, u32)]) -> RouteTable {
    let shards: Vec<Value> = weights
        .iter()
        .enumerate()
        .map(|(i, (name, weight))| {
            json!({"name": name, "target": format!("redis://127.0.0.1:{}", 7000 + i), "weight": weight})
        })
        .collect();
    table(json!({"type": "sharded", "shards": shards}))
}

#[test]
fn a_ring_weight_change_moves_the_keys_its_arcs_hand_over() {
    let old = ring(&[("a", 1), ("b", 1), ("c", 1)]);
    let new = ring(&[("a", 1), ("b", 2), ("c", 1)]);
    let moves = key_moves(&old, &new, &no_names);
    assert_eq!(moves.estimate, Estimate::Exact);
    // b's weight doubles: it takes about a quarter of the keys (1/2 - 1/3 = 1/6 at the ideal), all from a and c.
    let share = moves.share();
    assert!((0.1..0.3).contains(&share), "{share}");
    assert!(
        moves
            .moves
            .iter()
            .all(|m| m.to.shard.as_deref() == Some("b")),
        "{moves:?}"
    );
    let measured = counted(&old, &new, 200_000);
    assert!(
        (share - measured).abs() < 0.005,
        "exact {share}, measured {measured}"
    );
}

#[test]
fn adding_a_ring_shard_moves_about_one_in_n() {
    let old = ring(&[("a", 1), ("b", 1), ("c", 1)]);
    let new = ring(&[("a", 1), ("b", 1), ("c", 1), ("d", 1)]);
    let share = key_moves(&old, &new, &no_names).share();
    assert!((0.18..0.32).contains(&share), "{share}");
    assert!((share - counted(&old, &new, 200_000)).abs() < 0.005);
}

#[test]
fn bucket_tables_are_compared_bucket_by_bucket() {
    let shards = |split: &str, first_end: u32| {
        table(
            json!({"type": "sharded", "hash": {"algorithm": "crc16", "buckets": 16384}, "shards": [
            {"name": "a", "target": "redis://127.0.0.1:7000", "buckets": [format!("0-{first_end}")]},
            {"name": "b", "target": split, "buckets": [format!("{}-16383", first_end + 1)]}]}),
        )
    };
    let old = shards("redis://127.0.0.1:7001", 8191);
    let moves = key_moves(&old, &shards("redis://127.0.0.1:7001", 4095), &no_names);
    assert_eq!(moves.estimate, Estimate::Exact);
    assert!((moves.share() - 0.25).abs() < 1e-9, "{}", moves.share());
    // The same buckets on the same node, under a password: nothing moves.
    let same = key_moves(
        &old,
        &shards("redis://:secret@127.0.0.1:7001", 8191),
        &no_names,
    );
    assert!(same.moves.is_empty(), "{same:?}");
}

#[test]
fn the_same_deployment_by_name_or_url_moves_nothing_another_moves_everything() {
    let urls = |name: &str| (name == "main").then(|| "redis://127.0.0.1:7000/0".to_string());
    let old = table(json!({"type": "single", "target": "main"}));
    let same = table(
        json!({"type": "single", "target": {"read": {"resources": ["redis://127.0.0.1:7100"]},
        "write": {"resources": ["rediss://u:p@127.0.0.1:7000", "redis://127.0.0.1:7200"]}}}),
    );
    assert!(key_moves(&old, &same, &urls).moves.is_empty());
    let other_db = table(json!({"type": "single", "target": "redis://127.0.0.1:7000/1"}));
    assert_eq!(key_moves(&old, &other_db, &urls).share(), 1.0);
    let other = table(json!({"type": "single", "target": "redis-cluster://127.0.0.1:7000"}));
    assert_eq!(key_moves(&old, &other, &urls).share(), 1.0);
    // A cluster named by another of its seeds is the same cluster.
    let cluster =
        table(json!({"type": "single", "target": "redis-cluster://127.0.0.1:7000,127.0.0.1:7001"}));
    let seed = table(json!({"type": "single", "target": "redis-cluster://127.0.0.1:7001"}));
    assert!(key_moves(&cluster, &seed, &urls).moves.is_empty());
}

#[test]
fn double_write_secondaries_hold_no_keys_and_a_primary_does() {
    let old = table(json!({"type": "single", "target": "redis://127.0.0.1:7000"}));
    let double = table(json!({"type": "double_write",
        "primary": {"type": "single", "target": "redis://127.0.0.1:7000"},
        "secondary": {"type": "single", "target": "redis://127.0.0.1:7001"}}));
    assert!(key_moves(&old, &double, &no_names).moves.is_empty());
    // Cutting over by hand: the secondary becomes where keys are looked for.
    let cut = table(json!({"type": "single", "target": "redis://127.0.0.1:7001"}));
    assert_eq!(key_moves(&double, &cut, &no_names).share(), 1.0);
}

#[test]
fn another_algorithm_is_sampled_and_one_shard_against_single_is_exact() {
    let old = ring(&[("a", 1), ("b", 1)]);
    let crc = table(
        json!({"type": "sharded", "hash": {"algorithm": "crc16", "buckets": 2}, "shards": [
        {"name": "a", "target": "redis://127.0.0.1:7000", "buckets": ["0"]},
        {"name": "b", "target": "redis://127.0.0.1:7001", "buckets": ["1"]}]}),
    );
    let moves = key_moves(&old, &crc, &no_names);
    assert_eq!(moves.estimate, Estimate::Sampled);
    assert!((moves.share() - 0.5).abs() < 0.05, "{}", moves.share());
    let single = table(json!({"type": "single", "target": "redis://127.0.0.1:7000"}));
    let to_single = key_moves(&old, &single, &no_names);
    assert_eq!(to_single.estimate, Estimate::Exact);
    assert!((to_single.share() - counted(&old, &single, 200_000)).abs() < 0.005);
}

#[test]
fn fewer_databases_are_reported() {
    let old = table(json!({"type": "single", "target": "redis://127.0.0.1:7000", "databases": 4}));
    let new = table(json!({"type": "single", "target": "redis://127.0.0.1:7000", "databases": 2}));
    let moves = key_moves(&old, &new, &no_names);
    assert_eq!(moves.databases, Some((4, 2)));
    assert!(key_moves(&new, &old, &no_names).databases.is_none());
}

#[test]
fn a_share_is_never_shown_as_none_or_all_when_it_is_not() {
    use switchyard_schemas::api::percent;
    assert_eq!(percent(0.152295), "15.2%");
    assert_eq!(percent(0.00001), "0.1%");
    assert_eq!(percent(0.99999), "99.9%");
    assert_eq!(
        (percent(0.0), percent(1.0)),
        ("0.0%".to_string(), "100.0%".to_string())
    );
}

#[test]
/// A resource URL change moves keys only where the data is elsewhere (`guard::UrlChange` in the control plane).
fn a_url_keeps_its_data_whatever_its_credentials_and_parameters() {
    let same = [
        ("redis://127.0.0.1:6379/0", "redis://:pw@127.0.0.1:6379"),
        ("redis://127.0.0.1:6379/2", "rediss://u:pw@127.0.0.1:6379/2"),
        (
            "redis://127.0.0.1:6379",
            "redis://127.0.0.1:6379?scripts=deny",
        ),
        (
            "redis-sentinel://127.0.0.1:26379/m",
            "redis-sentinel://127.0.0.1:26379,127.0.0.1:26380/m",
        ),
        (
            "redis-cluster://127.0.0.1:7000",
            "redis-cluster://127.0.0.1:7001,127.0.0.1:7000",
        ),
    ];
    for (from, to) in same {
        assert!(same_data(from, to), "{from} -> {to}");
    }
    let moved = [
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6380"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1"),
        ("redis://127.0.0.1:6379", "redis-cluster://127.0.0.1:6379"),
        (
            "redis-sentinel://127.0.0.1:26379/m",
            "redis-sentinel://127.0.0.1:26379/n",
        ),
        (
            "redis-cluster://127.0.0.1:7000",
            "redis-cluster://127.0.0.1:8000",
        ),
    ];
    for (from, to) in moved {
        assert!(!same_data(from, to), "{from} -> {to}");
    }
}
