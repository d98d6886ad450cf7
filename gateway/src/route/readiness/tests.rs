use std::sync::Arc;

use bytes::Bytes;
use switchyard_schemas::RouteTable;
use switchyard_schemas::api::ReadinessKind;

use super::*;
use crate::cmd::Command;
use crate::metrics::CommandCounters;
use crate::route::{ResourcePlan, RoutePlan};
use switchyard_schemas::placement::slot_of;

#[test]
fn key_patterns_hide_digits_and_odd_bytes() {
    assert_eq!(key_pattern(b"user:1042:cart"), "user:#:cart");
    assert_eq!(key_pattern(b"{order:7}:items:12a3"), "{order:#}:items:#a#");
    assert_eq!(key_pattern(b"plain"), "plain");
    assert_eq!(key_pattern(b"k\xff9\\"), "k\\xff#\\x5c");
    let long = [b'a'; 200];
    let pattern = key_pattern(&long);
    assert_eq!(pattern.len(), 128 + '…'.len_utf8());
    assert!(pattern.ends_with('…'));
}

fn plan(route: &str) -> RoutePlan {
    let route: RouteTable = serde_json::from_str(route).unwrap();
    RoutePlan::new(&route, &|r: &str| Arc::new(ResourcePlan::new(r)))
}

fn double_write(to: &str) -> String {
    format!(
        r#"{{"type":"double_write","primary":{{"type":"single","target":"redis://127.0.0.1:9"}},"secondary":{to}}}"#
    )
}

fn args(words: &[&str]) -> Vec<Bytes> {
    words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

#[test]
fn a_cluster_destination_separates_slots_and_honours_hash_tags() {
    let route = plan(&double_write(
        r#"{"type":"single","target":"redis-cluster://127.0.0.1:7000"}"#,
    ));
    let destination = route.secondary().unwrap();
    assert!(destination.splits_keys());
    assert_ne!(slot_of(b"a"), slot_of(b"b"));
    let mget = args(&["MGET", "a", "b"]);
    assert_eq!(apart(destination, &mget, &[1, 2]), Some((1, 2)));
    let tagged = args(&["MGET", "{u1}a", "{u1}b", "{u1}c"]);
    assert_eq!(apart(destination, &tagged, &[1, 2, 3]), None);
    let one = args(&["GET", "a"]);
    assert_eq!(apart(destination, &one, &[1]), None);
}

#[test]
fn a_sharded_destination_separates_shards_and_a_single_redis_nothing() {
    let ring = r#"{"type":"sharded","shards":[{"name":"a","target":"redis://127.0.0.1:1"},
        {"name":"b","target":"redis://127.0.0.1:2"},{"name":"c","target":"redis://127.0.0.1:3"}]}"#;
    let route = plan(&double_write(ring));
    let destination = route.secondary().unwrap();
    assert!(destination.splits_keys());
    // Keys of one shard go together whatever their slots: only the shard counts on plain Redis shards.
    let sharded = plan(ring);
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    let same = keys
        .iter()
        .find(|k| {
            sharded.shard_of(k.as_bytes()) == sharded.shard_of(b"k0")
                && slot_of(k.as_bytes()) != slot_of(b"k0")
                && *k != "k0"
        })
        .unwrap();
    let other = keys
        .iter()
        .find(|k| sharded.shard_of(k.as_bytes()) != sharded.shard_of(b"k0"))
        .unwrap();
    assert_eq!(
        apart(destination, &args(&["MGET", "k0", same]), &[1, 2]),
        None
    );
    assert_eq!(
        apart(destination, &args(&["MGET", "k0", other]), &[1, 2]),
        Some((1, 2))
    );
    let single = plan(&double_write(
        r#"{"type":"single","target":"redis://127.0.0.1:4"}"#,
    ));
    assert!(!single.secondary().unwrap().splits_keys());
    assert!(plan(ring).secondary().is_none());
}

#[test]
fn kinds_follow_what_the_gateway_does_with_the_command() {
    for (command, kind) in [
        (Command::Mget, ReadinessKind::Split),
        (Command::Del, ReadinessKind::Split),
        (Command::Sunionstore, ReadinessKind::CrossSlot),
        (Command::Rename, ReadinessKind::CrossSlot),
        (Command::Evalsha, ReadinessKind::Script),
        (Command::FcallRo, ReadinessKind::Script),
    ] {
        assert_eq!(kind_of(command.spec()), kind, "{command:?}");
    }
    assert!(!ReadinessKind::Split.fails() && ReadinessKind::Transaction.fails());
}

#[test]
fn counts_are_taken_once_with_bounded_examples() {
    let commands = CommandCounters::default();
    let counters = Counters::new(&commands);
    assert!(
        counters.take("t", &commands).is_none(),
        "nothing checked, nothing to report"
    );
    counters.checked(10);
    counters.found(
        ReadinessKind::CrossSlot,
        "rename",
        [b"ns:user:1", b"ns:user:2"],
        Some(b"ns:"),
    );
    counters.found(
        ReadinessKind::CrossSlot,
        "rename",
        [b"ns:user:3", b"ns:user:44"],
        Some(b"ns:"),
    );
    for i in 0..200 {
        let key = format!("k{}x{i}", "y".repeat(i));
        counters.found(ReadinessKind::Split, "mget", [b"a", key.as_bytes()], None);
    }
    let taken = counters.take("t", &commands).unwrap();
    assert_eq!(taken.checked, 10);
    assert_eq!((taken.counts.cross_slot, taken.counts.split), (2, 200));
    assert_eq!(taken.counts.failing(), 2);
    assert_eq!(taken.examples.len(), 20);
    let first = &taken.examples[0];
    assert_eq!(
        (first.kind, first.command.as_str(), first.count),
        (ReadinessKind::CrossSlot, "rename", 2)
    );
    assert_eq!(first.keys, ["user:#", "user:#"]);
    assert!(
        counters.take("t", &commands).is_none(),
        "taken: the next report starts from zero"
    );
}

/// The commands a report names are those the tenant ran since the last one (since readiness began, for the
/// first), the ones the gateway answers itself left out.
#[test]
fn commands_run_are_reported_as_the_difference_since_the_last_report() {
    let commands = CommandCounters::default();
    commands.add(Command::Get, 5);
    let counters = Counters::new(&commands);
    commands.add(Command::Get, 2);
    commands.add(Command::Strlen, 1);
    commands.add(Command::Ping, 9);
    commands.add(Command::ConfigGet, 1);
    let taken = counters.take("t", &commands).unwrap();
    assert_eq!(taken.checked, 0);
    let named: Vec<(&str, u64)> = taken
        .commands
        .iter()
        .map(|(name, calls)| (name.as_str(), *calls))
        .collect();
    assert_eq!(named, [("config|get", 1), ("get", 2), ("strlen", 1)]);
    assert!(counters.take("t", &commands).is_none());
    commands.add(Command::Strlen, 3);
    let taken = counters.take("t", &commands).unwrap();
    assert_eq!(taken.commands.get("strlen"), Some(&3));
    assert_eq!(taken.commands.len(), 1);
}

/// A readiness probe's destination is checked against while the route has none of its own; a migration's
/// destination comes first; without either there is no readiness, and counts made against one kind of
/// destination do not go on against the other.
#[test]
fn a_probe_is_the_destination_while_the_route_has_none() {
    let commands = CommandCounters::default();
    let cluster: RouteTable =
        serde_json::from_str(r#"{"type":"single","target":"redis-cluster://127.0.0.1:7000"}"#)
            .unwrap();
    let single = plan(r#"{"type":"single","target":"redis://127.0.0.1:9"}"#);
    assert!(Readiness::of(&single, None, None, &commands).is_none());
    let probed = Readiness::of(&single, Some(&cluster), None, &commands).unwrap();
    assert!(probed.places_apart);
    let destination = probed.probe.as_ref().unwrap();
    assert_eq!(
        apart(destination, &args(&["MGET", "a", "b"]), &[1, 2]),
        Some((1, 2))
    );
    let again = Readiness::of(&single, Some(&cluster), Some(&probed), &commands).unwrap();
    assert!(
        Arc::ptr_eq(&again.counters, &probed.counters),
        "kept across reloads"
    );

    let migrating = plan(&double_write(
        r#"{"type":"single","target":"redis://127.0.0.1:10"}"#,
    ));
    let migration = Readiness::of(&migrating, Some(&cluster), Some(&probed), &commands).unwrap();
    assert!(
        migration.probe.is_none(),
        "the migration's destination first"
    );
    assert!(
        !migration.places_apart,
        "one plain Redis places nothing apart"
    );
    assert!(!Arc::ptr_eq(&migration.counters, &probed.counters));
    assert!(Readiness::of(&single, None, Some(&probed), &commands).is_none());
}
