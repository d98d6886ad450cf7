//! Key placement: which shard of a sharded route owns a key.
//!
//! The gateway's data path and the control plane's `explain` use this one implementation, so what an admin is
//! told is where the data is. Every algorithm is pinned by golden tables (`schemas/tests/golden/`): an upgrade
//! that would move keys fails the build instead of losing data.

use std::hash::{BuildHasher, Hash, Hasher};

use consistent_hash_ring::{Ring, RingBuilder};

use crate::validate::parse_bucket_range;
use crate::{HashSpec, RouteTable, Shard, Target};

pub mod moves;

/// Virtual nodes per unit of shard weight on the ring.
pub const VNODES_PER_WEIGHT: usize = 160;

/// Bits of a hash that index `Placement::Ring::starts` (1,024 entries: a few per arc of a three-shard ring).
const RING_INDEX_BITS: u32 = 10;

/// Maps keys to shard indices (positions in the route's `shards` list).
pub enum Placement {
    /// The ring, flattened: the arcs of the hash space in order, as the last hash of each (`ends`, ascending,
    /// the last one `u64::MAX`) and the shard that owns it. The `consistent_hash_ring` crate builds the ring and
    /// names the arcs; looking keys up in these two arrays instead of its 48-byte vnode entries keeps a
    /// 30-key MGET's lookups in a few cache lines.
    Ring {
        ends: Vec<u64>,
        owners: Vec<u16>,
        /// For each value of a hash's top `RING_INDEX_BITS` bits, the first arc that can hold such a hash: a
        /// lookup then searches one or two arcs instead of all of them.
        starts: Vec<u32>,
    },
    Buckets {
        hash: BucketHash,
        /// Owner shard of every bucket.
        owners: Vec<u16>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BucketHash {
    Crc16,
    Camellia,
    CamelliaHashtag,
}

/// A shard on the ring: placed by its name (so reordering the list moves nothing), answering its index.
#[derive(Clone, Debug)]
pub struct RingShard {
    name: String,
    index: usize,
}

impl Hash for RingShard {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl PartialEq for RingShard {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for RingShard {}

/// FNV-1a (64-bit) followed by a 64-bit finalizer: FNV alone spreads short, similar keys (`user:1`, `user:2`)
/// poorly over a ring, the avalanche step fixes that.
#[derive(Clone, Copy, Default)]
pub struct FnvFinalized;

pub struct FnvFinalizedHasher(fnv::FnvHasher);

impl BuildHasher for FnvFinalized {
    type Hasher = FnvFinalizedHasher;
    fn build_hasher(&self) -> FnvFinalizedHasher {
        FnvFinalizedHasher(fnv::FnvHasher::default())
    }
}

impl Hasher for FnvFinalizedHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    fn finish(&self) -> u64 {
        // The murmur3 fmix64 step.
        let mut h = self.0.finish();
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// A key as the ring hashes it: its bytes only (no length prefix), so placement is a function of the bytes.
struct KeyBytes<'a>(&'a [u8]);

impl Hash for KeyBytes<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0);
    }
}

impl Placement {
    /// Builds the placement of a validated sharded route.
    pub fn new(hash: &HashSpec, shards: &[Shard]) -> Placement {
        let Some(count) = hash.bucket_count() else {
            let ring: Ring<RingShard, FnvFinalized> = RingBuilder::new(FnvFinalized)
                .weighted_nodes_iter(shards.iter().enumerate().map(|(index, shard)| {
                    let node = RingShard {
                        name: shard.name.clone(),
                        index,
                    };
                    (node, VNODES_PER_WEIGHT * shard.weight.max(1) as usize)
                }))
                .build();
            let (ends, owners): (Vec<u64>, Vec<u16>) = ring
                .resident_ranges()
                .map(|arc| (*arc.keys().end(), arc.node().index as u16))
                .unzip();
            let starts = (0..1u64 << RING_INDEX_BITS)
                .map(|prefix| {
                    let lowest = prefix << (64 - RING_INDEX_BITS);
                    ends.partition_point(|&end| end < lowest) as u32
                })
                .collect();
            return Placement::Ring {
                ends,
                owners,
                starts,
            };
        };
        let mut owners = vec![0u16; count as usize];
        for (index, shard) in shards.iter().enumerate() {
            for range in &shard.buckets {
                if let Ok((first, last)) = parse_bucket_range(range, owners.len()) {
                    owners[first..=last].fill(index as u16);
                }
            }
        }
        let hash = match hash {
            HashSpec::Camellia { .. } => BucketHash::Camellia,
            HashSpec::CamelliaHashtag { .. } => BucketHash::CamelliaHashtag,
            _ => BucketHash::Crc16,
        };
        Placement::Buckets { hash, owners }
    }

    /// The index of the shard that owns `key`.
    pub fn shard_of(&self, key: &[u8]) -> usize {
        match self {
            Placement::Ring {
                ends,
                owners,
                starts,
            } => {
                // What `Ring::try_get` computes (the crate hashes with the ring's own hasher).
                let hash = FnvFinalized.hash_one(KeyBytes(hash_tag(key)));
                let arc = arc_of(ends, starts, hash);
                owners.get(arc).map_or(0, |&owner| usize::from(owner))
            }
            Placement::Buckets { hash, owners } => {
                let bucket = bucket_of(*hash, key, owners.len() as u32);
                owners
                    .get(bucket as usize)
                    .map_or(0, |&owner| owner as usize)
            }
        }
    }
}

/// Where a key falls inside a sharded table before its shard is chosen, as `explain` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyPoint {
    /// Its bucket (with `crc16` over 16,384 buckets: its Redis Cluster slot).
    Bucket(u32),
    /// Its hash on the ring, and the ring point that owns it: the first virtual node at or after the hash.
    Ring { hash: u64, point: u64 },
}

impl Placement {
    /// Where `key` falls; the same computation as [`Placement::shard_of`], which stays separate because it is on
    /// the data path and needs only the owner.
    pub fn point_of(&self, key: &[u8]) -> KeyPoint {
        match self {
            Placement::Ring { ends, starts, .. } => {
                let hash = FnvFinalized.hash_one(KeyBytes(hash_tag(key)));
                let point = ends
                    .get(arc_of(ends, starts, hash))
                    .copied()
                    .unwrap_or(u64::MAX);
                KeyPoint::Ring { hash, point }
            }
            Placement::Buckets { hash, owners } => {
                KeyPoint::Bucket(bucket_of(*hash, key, owners.len() as u32))
            }
        }
    }
}

/// The arc holding `hash`: the first whose end is not below it. It is not before the first arc that can hold the
/// hash's prefix, nor after the first that can hold the next prefix (which the search returns when every arc
/// before it ends below the hash).
fn arc_of(ends: &[u64], starts: &[u32], hash: u64) -> usize {
    let prefix = (hash >> (64 - RING_INDEX_BITS)) as usize;
    let first = starts.get(prefix).map_or(0, |&start| start as usize);
    let last = starts
        .get(prefix + 1)
        .map_or(ends.len(), |&start| start as usize);
    first
        + ends
            .get(first..last)
            .map_or(0, |arcs| arcs.partition_point(|&end| end < hash))
}

/// A route table with its placement built once: which target serves a key. A double-write table is placed by
/// its primary (where reads go).
pub struct TablePlacement<'a> {
    route: &'a RouteTable,
    placement: Option<Placement>,
}

impl<'a> TablePlacement<'a> {
    pub fn new(route: &'a RouteTable) -> TablePlacement<'a> {
        match route {
            RouteTable::DoubleWrite { primary, .. } => TablePlacement::new(primary),
            RouteTable::Single { .. } => TablePlacement {
                route,
                placement: None,
            },
            RouteTable::Sharded { hash, shards, .. } => TablePlacement {
                route,
                placement: Some(Placement::new(hash, shards)),
            },
        }
    }

    /// Where `key` falls inside the table; `None` for a single table (it has no buckets nor ring).
    pub fn point_of(&self, key: &[u8]) -> Option<KeyPoint> {
        self.placement.as_ref().map(|p| p.point_of(key))
    }

    /// The shard (none for a single table) and the target that serve `key`; `None` when there are no shards.
    pub fn target_of(&self, key: &[u8]) -> Option<(Option<&'a str>, &'a Target)> {
        match (self.route, &self.placement) {
            (RouteTable::Sharded { shards, .. }, Some(placement)) => shards
                .get(placement.shard_of(key))
                .map(|shard| (Some(shard.name.as_str()), &shard.target)),
            (RouteTable::Single { target, .. }, _) => Some((None, target)),
            _ => None,
        }
    }
}

/// The bucket of `key` among `count` (> 0) buckets.
pub fn bucket_of(hash: BucketHash, key: &[u8], count: u32) -> u32 {
    match hash {
        BucketHash::Crc16 => u32::from(crc16(hash_tag(key))) % count,
        BucketHash::Camellia => camellia_bucket(java_hash(key), count),
        // camellia's hash-tag rule is Redis Cluster's: first `{`, next `}`, and `{}` means the whole key.
        BucketHash::CamelliaHashtag => camellia_bucket(java_hash(hash_tag(key)), count),
    }
}

/// Hash slots of a Redis Cluster.
pub const SLOTS: usize = 16384;

/// The hash slot of a key (its `{hash tag}` if it has one), as Redis Cluster computes it.
#[inline]
pub fn slot_of(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS as u16
}

/// The slot of `key` stored under `prefix` (a tenant's key namespace), without building the stored key: a
/// leading `{tag}` of the prefix decides alone; otherwise the key's own tag, or the CRC of prefix and key in turn.
#[inline]
pub fn slot_of_prefixed(prefix: &[u8], key: &[u8]) -> u16 {
    let crc = if prefix.starts_with(b"{") {
        crc16(hash_tag(prefix))
    } else {
        let tag = hash_tag(key);
        if tag.len() < key.len() {
            crc16(tag)
        } else {
            crc16_continue(crc16(prefix), key)
        }
    };
    crc % SLOTS as u16
}

/// Redis Cluster's hash tag: the part between the first `{` and the first `}` after it, if not empty.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if !has_open_brace(key) {
        return key;
    }
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

/// Whether `key` holds a `{`, eight bytes at a time: most keys have no hash tag, and every cluster-routed
/// command asks.
fn has_open_brace(key: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const BRACES: u64 = u64::from_ne_bytes([b'{'; 8]);
    let (words, rest) = key.as_chunks::<8>();
    // A zero byte in `x` (a brace in the word) is one whose high bit survives `x - 1` but was not set in `x`.
    words.iter().any(|&word| {
        let x = u64::from_ne_bytes(word) ^ BRACES;
        x.wrapping_sub(ONES) & !x & HIGHS != 0
    }) || rest.contains(&b'{')
}

/// Java's `String.hashCode` shape over the key's bytes taken as signed: `h = 31*h + b`, wrapping at 32 bits.
pub fn java_hash(key: &[u8]) -> i32 {
    key.iter().fold(0i32, |h, &b| {
        h.wrapping_mul(31).wrapping_add(i32::from(b as i8))
    })
}

/// camellia's `abs(h) mod count`, with a mask when `count` is a power of two. `abs(i32::MIN)` is negative in Java;
/// with a mask that gives bucket 0 as in camellia; otherwise (where camellia itself would fail) its magnitude is
/// used.
fn camellia_bucket(h: i32, count: u32) -> u32 {
    if count.is_power_of_two() {
        (h.wrapping_abs() as u32) & (count - 1)
    } else {
        h.unsigned_abs() % count
    }
}

/// CRC16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster uses for slots. Two bytes per step: the
/// register is two bytes wide, so two byte steps come down to one lookup for each byte of `register ^ pair`.
pub fn crc16(bytes: &[u8]) -> u16 {
    crc16_continue(0, bytes)
}

/// The CRC16 of what gave `crc` followed by `bytes`: `crc16_continue(crc16(a), b) == crc16(a ++ b)`.
pub fn crc16_continue(crc: u16, bytes: &[u8]) -> u16 {
    let [one, two] = &CRC16_TABLES;
    let (pairs, rest) = bytes.as_chunks::<2>();
    let crc = pairs.iter().fold(crc, |crc, &pair| {
        let [high, low] = (crc ^ u16::from_be_bytes(pair)).to_be_bytes();
        two[usize::from(high)] ^ one[usize::from(low)]
    });
    rest.iter().fold(crc, |crc, &b| {
        (crc << 8) ^ one[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// `[0]`: the CRC step of one byte after each byte value (one lookup per byte instead of eight shifts); `[1]`:
/// the same over two bytes for a high byte `v` followed by a zero byte, `(T[v] << 8) ^ T[T[v] >> 8]`. The key
/// hash of every cluster-routed command goes through them.
const CRC16_TABLES: [[u16; 256]; 2] = {
    let mut tables = [[0u16; 256]; 2];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        tables[0][byte] = crc;
        byte += 1;
    }
    let mut byte = 0;
    while byte < 256 {
        let once = tables[0][byte];
        tables[1][byte] = (once << 8) ^ tables[0][(once >> 8) as usize];
        byte += 1;
    }
    tables
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // CLUSTER KEYSLOT on redis-server 7.0.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b""), 0);
    }

    /// The direct path places a namespaced key by the slot of the key as stored, computed without building it.
    #[test]
    fn the_slot_of_a_prefixed_key_is_the_slot_of_the_stored_key() {
        let keys = [
            "", "k", "key:1", "{user}:1", "a{b}c", "a{}b{c}", "{", "}", "a{b", "}{x}", "{{x}}",
            "x{y}{z}",
        ];
        for prefix in ["a:", "{shop}:", "ns", "x}y:", "{s}"] {
            for key in keys {
                assert_eq!(
                    slot_of_prefixed(prefix.as_bytes(), key.as_bytes()),
                    slot_of(format!("{prefix}{key}").as_bytes()),
                    "{prefix} {key}"
                );
            }
        }
    }

    #[test]
    fn crc16_matches_redis_cluster() {
        // Reference values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16_continue(crc16(b"1234"), b"56789"), 0x31C3);
        assert_eq!(crc16_continue(crc16(b"123"), b"456789"), 0x31C3);
        assert_eq!(crc16(b"foo") % 16384, 12182);
        assert_eq!(
            crc16(hash_tag(b"{user1000}.following")) % 16384,
            crc16(b"user1000") % 16384
        );
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        // A brace at every position of words and of the rest after them.
        for len in 1..20 {
            for at in 0..len {
                let mut key = vec![b'a'; len];
                key[at] = b'{';
                assert!(has_open_brace(&key), "{len} {at}");
                key[at] = b'{' ^ 0x80;
                assert!(!has_open_brace(&key), "{len} {at}");
            }
        }
    }

    /// The bit-by-bit definition the tables stand for.
    fn crc16_bitwise(bytes: &[u8]) -> u16 {
        bytes.iter().fold(0u16, |mut crc, &b| {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
            crc
        })
    }

    #[test]
    fn crc16_tables_agree_with_the_bitwise_definition() {
        let mut bytes: Vec<u8> = (0..=255).collect();
        bytes.extend((0..=255u8).rev());
        for start in 0..bytes.len() {
            for len in [0, 1, 2, 3, 7, 16, 33] {
                let input = &bytes[start..(start + len).min(bytes.len())];
                assert_eq!(crc16(input), crc16_bitwise(input), "{input:?}");
            }
        }
    }

    #[test]
    fn the_ring_index_finds_the_arc_a_full_search_finds() {
        let shards: Vec<Shard> = serde_json::from_value(serde_json::json!([
            {"name": "a", "target": "redis://127.0.0.1:1"},
            {"name": "b", "target": "redis://127.0.0.1:2", "weight": 3},
            {"name": "c", "target": "redis://127.0.0.1:3"}
        ]))
        .unwrap();
        let hash: HashSpec =
            serde_json::from_value(serde_json::json!({"algorithm": "ring"})).unwrap();
        let Placement::Ring { ends, starts, .. } = Placement::new(&hash, &shards) else {
            panic!("not a ring");
        };
        // Every arc's end and its neighbours, every prefix boundary and its neighbours, and a spread of others.
        let boundaries = (0..1u64 << RING_INDEX_BITS).map(|p| p << (64 - RING_INDEX_BITS));
        let spread = (0..100_000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for point in ends.iter().copied().chain(boundaries).chain(spread) {
            for hash in [point.wrapping_sub(1), point, point.wrapping_add(1)] {
                let full = ends.partition_point(|&end| end < hash);
                assert_eq!(arc_of(&ends, &starts, hash), full, "{hash:#x}");
            }
        }
    }

    #[test]
    fn java_hash_uses_signed_bytes() {
        assert_eq!(java_hash(b"abc"), 96354); // "abc".hashCode() in Java
        assert_eq!(java_hash("é".as_bytes()), 31 * -61 + -87); // 0xC3 0xA9 as signed bytes
        assert_eq!(camellia_bucket(i32::MIN, 8), 0);
        assert_eq!(camellia_bucket(-5, 3), 2);
    }
}
