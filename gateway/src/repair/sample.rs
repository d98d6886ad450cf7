//! The divergence sampler: each second, for every tenant and double-write secondary of the routes served, a few
//! random keys of the tenant (`RANDOMKEY` on the primary nodes, each shard's in turn) are compared between the
//! primary and the secondary as the repair compares them (`key::equal`: `DUMP` and `PEXPIRETIME`, content for
//! collections dumped differently). The share that differs is the estimate (`missed::divergence`); a key that
//! differs is handed to the repair's record, so that divergence no failed write recorded (a write made on the
//! secondary behind the gateway's back, a lost replica's data) is repaired too.
//!
//! A key found different is compared again once the writes in flight had time to land (as the repair waits
//! before it compares a copied key), and counted only then: a write the primary applied and the secondary is
//! still about to apply is not divergence. Only the keys the primary holds are drawn: a key only the secondary
//! holds is found by a catch-up, not here. Keys are drawn on every node holding the primary's keys (a cluster's
//! every master, a sentinel set's master) and compared where the repair compares them (`Sides`); a side whose
//! topology is not known yet is not sampled until it is.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::key::{self, Trouble};
use super::links::{Links, nodes_of};
use super::sides::Sides;
use super::task::owns;
use crate::backend::NodeSpec;
use crate::backend::direct::Value;
use crate::missed::MissedKey;
use crate::route::Tenant;
use crate::state::Gateway;

/// How often the sampler takes its samples (`--divergence-samples` per tenant and secondary each time).
const ROUND: Duration = Duration::from_secs(1);

/// `RANDOMKEY`s drawn (in one round trip) per sample for a tenant with a key namespace, whose keys may be a small
/// share of the database: a tenant with fewer than about one key in 16 there is sampled more slowly.
const DRAWS: usize = 16;

/// Most keys waiting to be compared again per tenant and secondary.
const MAX_SUSPECTS: usize = 1000;

/// How long a tenant and secondary whose primary or secondary did not answer (or refused) is left alone, so that
/// one down node does not hold up the sampling of the others by its connect timeout every round.
const PAUSE: Duration = Duration::from_secs(10);

/// Rounds after which the sampler's connections are opened afresh (those to nodes no longer routed go).
const RELINK_ROUNDS: u32 = 300;

const RANDOMKEY: &[&[u8]] = &[b"RANDOMKEY"];

/// A node holding the tenant's keys on the primary side, with the client's database it serves.
type Source = (NodeSpec, u32);

/// Runs until the process ends (at once without `--divergence-samples`).
pub(super) async fn run(gateway: Arc<Gateway>) {
    let rate = gateway.config.divergence_samples as usize;
    if rate == 0 {
        return;
    }
    let mut sampler = Sampler {
        settle: gateway.config.command_timeout + ROUND,
        timeout: super::exchange_timeout(&gateway.config),
        links: Links::default(),
        sides: Sides::new(
            Arc::clone(&gateway.topologies),
            super::exchange_timeout(&gateway.config),
        ),
        pairs: HashMap::new(),
    };
    let mut ticks = tokio::time::interval(ROUND);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for round in 1u32.. {
        ticks.tick().await;
        if round % RELINK_ROUNDS == 0 {
            sampler.links.drop_all();
        }
        let snapshot = gateway.snapshot();
        let mut routed = HashSet::new();
        for tenant in snapshot.tenants().iter() {
            for resource in secondaries(tenant) {
                let pair = (tenant.name.clone(), resource);
                sampler.round(&gateway, tenant, &pair, rate).await;
                routed.insert(pair);
            }
        }
        sampler.pairs.retain(|pair, _| routed.contains(pair));
        sampler.sides.let_go();
        gateway.divergence.retain(&routed);
    }
}

struct Sampler {
    /// How long after a key was found different it is compared again.
    settle: Duration,
    /// Bounds every connect and exchange.
    timeout: Duration,
    links: Links,
    /// Where each side keeps a key now (the topologies of cluster and sentinel resources).
    sides: Sides,
    pairs: HashMap<(String, String), Pending>,
}

/// What the sampler keeps of one tenant and secondary between rounds.
#[derive(Default)]
struct Pending {
    /// The next source to draw from.
    turn: usize,
    /// Keys found different, with when to compare them again.
    suspects: VecDeque<(MissedKey, Instant)>,
    /// No sampling before then (see [`PAUSE`]).
    paused_until: Option<Instant>,
}

impl Pending {
    /// A side did not answer or refused: the pair waits [`PAUSE`].
    fn waits(&mut self, pair: &(String, String), trouble: &Trouble) {
        let why = match trouble {
            Trouble::Primary(e) | Trouble::Secondary(e) => e.to_string(),
            Trouble::Refused(reason) => reason.clone(),
        };
        tracing::debug!(tenant = %pair.0, resource = %pair.1, why, "divergence sampling waits for both sides");
        self.paused_until = Some(Instant::now() + PAUSE);
    }
}

impl Sampler {
    /// Compares the keys due again, then `rate` new ones; stops at the first side that does not answer.
    async fn round(
        &mut self,
        gateway: &Gateway,
        tenant: &Tenant,
        pair: &(String, String),
        rate: usize,
    ) {
        let Sampler {
            settle,
            timeout,
            links,
            sides,
            pairs,
        } = self;
        let sources = sources(tenant, &pair.1, sides);
        if sources.is_empty() {
            return;
        }
        let pending = pairs.entry(pair.clone()).or_default();
        let now = Instant::now();
        if pending.paused_until.is_some_and(|until| until > now) {
            return;
        }
        while let Some((key, due)) = pending.suspects.pop_front() {
            if due > now {
                pending.suspects.push_front((key, due));
                break;
            }
            match compare(tenant, &pair.1, &key, (links, sides), *timeout).await {
                Ok(Some(equal)) => conclude(gateway, pair, key, equal),
                // The route no longer places the key there.
                Ok(None) => {}
                Err(trouble) => {
                    pending.suspects.push_front((key, due));
                    return pending.waits(pair, &trouble);
                }
            }
        }
        for _ in 0..rate {
            let Some(source) = sources.get(pending.turn % sources.len()) else {
                return;
            };
            pending.turn = pending.turn.wrapping_add(1);
            let drawn = draw(tenant, &pair.1, source, (links, sides), *timeout).await;
            let key = match drawn {
                Ok(Some(key)) => key,
                Ok(None) => continue,
                Err(trouble) => return pending.waits(pair, &trouble),
            };
            match compare(tenant, &pair.1, &key, (links, sides), *timeout).await {
                Ok(Some(true)) => gateway.divergence.note(&pair.0, &pair.1, false),
                Ok(Some(false)) if pending.suspects.len() < MAX_SUSPECTS => {
                    pending.suspects.push_back((key, Instant::now() + *settle));
                }
                Ok(_) => {}
                Err(trouble) => return pending.waits(pair, &trouble),
            }
        }
    }
}

/// A sample's verdict: counted, and a key still different handed to the repair.
fn conclude(gateway: &Gateway, pair: &(String, String), key: MissedKey, equal: bool) {
    gateway.divergence.note(&pair.0, &pair.1, !equal);
    if !equal {
        let missed = gateway.repairs.missed(&pair.0, &pair.1);
        missed.compared(&key, true);
        missed.pending().insert(&missed, key);
    }
}

/// The double-write secondaries of `tenant`'s route, each once.
fn secondaries(tenant: &Tenant) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for target in &tenant.route.shards {
        for resource in target.write.iter().skip(1) {
            if !found.contains(&resource.name) {
                found.push(resource.name.clone());
            }
        }
    }
    found
}

/// The nodes holding the primary's keys (a cluster's every master) in the shards that double-write `tenant`'s
/// keys to `resource`, in each of its databases; none for a shard whose primary or secondary cannot be placed yet
/// (a topology not known yet, an unusable resource).
fn sources(tenant: &Tenant, resource: &str, sides: &mut Sides) -> Vec<Source> {
    let databases = u32::try_from(tenant.databases().end).unwrap_or(1);
    let mut found: Vec<Source> = Vec::new();
    for db in 0..databases {
        for target in &tenant.route.shards {
            let Some(secondary) = target.write.iter().skip(1).find(|r| r.name == resource) else {
                continue;
            };
            let Some(primary) = target.write.first() else {
                continue;
            };
            if sides
                .nodes(&secondary.spec, db, Trouble::Secondary)
                .is_err()
            {
                continue;
            }
            let Ok(nodes) = sides.nodes(&primary.spec, db, Trouble::Primary) else {
                continue;
            };
            for node in nodes {
                if !found.iter().any(|(n, _)| same_node(n, &node)) {
                    found.push((node, db));
                }
            }
        }
    }
    found
}

fn same_node(a: &NodeSpec, b: &NodeSpec) -> bool {
    a.addr == b.addr && a.db == b.db
}

/// A random key of the tenant on `source` that the route places there and double-writes to `resource`; none
/// when the draws found none (an empty database, a namespace with few keys there).
async fn draw(
    tenant: &Tenant,
    resource: &str,
    source: &Source,
    (links, sides): (&mut Links, &mut Sides),
    timeout: Duration,
) -> Result<Option<MissedKey>, Trouble> {
    let (node, db) = source;
    let draws = if tenant.namespace().is_some() {
        DRAWS
    } else {
        1
    };
    let connection = links.to(node, timeout).await.map_err(Trouble::Primary)?;
    let replies = match connection.pipeline(&vec![RANDOMKEY; draws]).await {
        Ok(replies) => replies,
        Err(e) => {
            links.drop(node);
            return Err(Trouble::Primary(e));
        }
    };
    for reply in replies {
        let Value::Bulk(name) = reply else {
            continue;
        };
        let key = (*db, name);
        if !owns(tenant, &key) {
            continue;
        }
        if let Some((primary, _)) = nodes_of(&tenant.route, resource, &key, sides)?
            && same_node(&primary, node)
        {
            return Ok(Some(key));
        }
    }
    Ok(None)
}

/// Whether both copies of `key` are equal; none when the route no longer double-writes it to `resource`.
async fn compare(
    tenant: &Tenant,
    resource: &str,
    key: &MissedKey,
    (links, sides): (&mut Links, &mut Sides),
    timeout: Duration,
) -> Result<Option<bool>, Trouble> {
    let Some(nodes) = nodes_of(&tenant.route, resource, key, sides)? else {
        return Ok(None);
    };
    let (primary, secondary) = links.pair(&nodes, timeout).await?;
    let equal = key::equal(primary, secondary, &key.1).await;
    links.forget(&nodes, &equal);
    equal.map(Some)
}
