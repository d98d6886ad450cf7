//! Placement is pinned: these tables say which shard owns each key under every algorithm. A change that moves
//! keys fails here. Run with `SWITCHYARD_BLESS=1` only for a new table, never to paper over a moved key.

use std::collections::HashSet;
use std::path::Path;

use switchyard_schemas::placement::{BucketHash, Placement, bucket_of, java_hash};
use switchyard_schemas::{HashSpec, Shard, Target};

fn shards(names: &[&str], buckets: &[&[&str]]) -> Vec<Shard> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| Shard {
            name: name.to_string(),
            target: Target::Resource(format!("redis://127.0.0.1:{}", 7000 + i)),
            weight: 1,
            buckets: buckets
                .get(i)
                .map(|b| b.iter().map(|s| s.to_string()).collect())
                .unwrap_or_default(),
        })
        .collect()
}

fn sample_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..300).map(|i| format!("key:{i}").into_bytes()).collect();
    keys.extend(
        [
            "",
            "a",
            "{user1}.name",
            "{user1}.mail",
            "x{}y",
            "日本語キー",
            "ключ",
            "é",
            "\u{1F600}",
        ]
        .iter()
        .map(|k| k.as_bytes().to_vec()),
    );
    keys.push(vec![0xff, 0x80, 0x00, 0x7f]);
    keys
}

fn check_golden(name: &str, placement: &Placement) {
    let text: String = sample_keys()
        .iter()
        .map(|key| format!("{}\t{}\n", hex(key), placement.shard_of(key)))
        .collect();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.tsv"));
    if std::env::var_os("SWITCHYARD_BLESS").is_some() && !path.exists() {
        std::fs::write(&path, &text).expect("write golden table");
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing golden table {}", path.display()));
    for (line, (got, want)) in text.lines().zip(golden.lines()).enumerate() {
        assert_eq!(
            got,
            want,
            "{name}: key on line {} moved (hex key, shard)",
            line + 1
        );
    }
    assert_eq!(
        text.lines().count(),
        golden.lines().count(),
        "{name}: golden table length"
    );
}

fn hex(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn ring_placement_is_pinned() {
    check_golden(
        "ring-3",
        &Placement::new(&HashSpec::Ring, &shards(&["s0", "s1", "s2"], &[])),
    );
    check_golden(
        "ring-4",
        &Placement::new(&HashSpec::Ring, &shards(&["s0", "s1", "s2", "s3"], &[])),
    );
}

#[test]
fn bucket_placements_are_pinned() {
    let crc = shards(
        &["a", "b", "c"],
        &[&["0-5460"], &["5461-10922"], &["10923-16383"]],
    );
    check_golden(
        "crc16-3",
        &Placement::new(&HashSpec::Crc16 { buckets: 16384 }, &crc),
    );
    let camellia = shards(
        &["a", "b", "c"],
        &[&["0", "3", "6"], &["1", "4", "7"], &["2", "5"]],
    );
    check_golden(
        "camellia-8",
        &Placement::new(&HashSpec::Camellia { buckets: 8 }, &camellia),
    );
    check_golden(
        "camellia-hashtag-8",
        &Placement::new(&HashSpec::CamelliaHashtag { buckets: 8 }, &camellia),
    );
    let camellia6 = shards(&["a", "b", "c"], &[&["0-1"], &["2-3"], &["4-5"]]);
    check_golden(
        "camellia-6",
        &Placement::new(&HashSpec::Camellia { buckets: 6 }, &camellia6),
    );
}

/// camellia's bucket, computed independently from its definition with 64-bit arithmetic.
fn camellia_reference(key: &[u8], buckets: i64) -> i64 {
    let mut h: i64 = 0;
    for &b in key {
        h = (h * 31 + i64::from(b as i8)).rem_euclid(1 << 32);
    }
    let h = if h >= 1 << 31 { h - (1 << 32) } else { h };
    h.abs() % buckets
}

#[test]
fn camellia_buckets_follow_the_definition() {
    for key in sample_keys() {
        let h = java_hash(&key);
        if h == i32::MIN {
            continue;
        }
        for buckets in [6u32, 8, 1024] {
            let expected = camellia_reference(&key, i64::from(buckets));
            let got = bucket_of(BucketHash::Camellia, &key, buckets);
            assert_eq!(
                i64::from(got),
                expected,
                "key {:?} buckets {buckets}",
                String::from_utf8_lossy(&key)
            );
        }
    }
}

#[test]
fn the_ring_spreads_evenly_and_moves_little_on_reshard() {
    let keys: Vec<String> = (0..10_000).map(|i| format!("user:{i}")).collect();
    for n in [3usize, 4] {
        let names: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
        let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let placement = Placement::new(&HashSpec::Ring, &shards(&name_refs, &[]));
        let mut counts = vec![0usize; n];
        for key in &keys {
            counts[placement.shard_of(key.as_bytes())] += 1;
        }
        let even = keys.len() / n;
        for count in &counts {
            assert!(
                count.abs_diff(even) * 10 <= even,
                "{n} shards: {counts:?} is not within 10% of {even}"
            );
        }
    }
    let three = Placement::new(&HashSpec::Ring, &shards(&["s0", "s1", "s2"], &[]));
    let four = Placement::new(&HashSpec::Ring, &shards(&["s0", "s1", "s2", "s3"], &[]));
    let moved: HashSet<&String> = keys
        .iter()
        .filter(|k| three.shard_of(k.as_bytes()) != four.shard_of(k.as_bytes()))
        .collect();
    assert!(
        moved.len() * 4 <= keys.len() * 13 / 10,
        "adding a 4th shard moved {} of {} keys",
        moved.len(),
        keys.len()
    );
    // Only keys that went to the new shard moved.
    assert!(moved.iter().all(|k| four.shard_of(k.as_bytes()) == 3));
}
