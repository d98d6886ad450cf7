//! The repair task: a few times a second, for each tenant and secondary with missed keys, repairs a batch of them
//! while the secondary answers, and advances the catch-up a record asks for by a few pages.
//!
//! A key that was copied stays recorded until a later comparison, made once the writes in flight when it was
//! copied had time to land (longer than the backend command timeout), finds both sides equal: a live write that
//! the primary had applied before the copy read it, and that reached the secondary only after the copy, would
//! otherwise count twice there (an `INCR`). A key still different then is repaired again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::key::{self, Outcome, Trouble};
use super::links::{Links, Nodes, nodes_of, resources_of};
use super::restarts::Restarts;
use super::scan::Walk;
use super::sides::Sides;
use crate::backend::NodeSpec;
use crate::missed::{Missed, MissedKey};
use crate::route::Tenant;
use crate::state::Gateway;

/// How often the task looks at the records.
const ROUND: Duration = Duration::from_millis(200);

/// Most recorded keys one round repairs per tenant and secondary.
const BATCH: usize = 512;

/// Rounds between two readings of the secondaries' identities (see `restarts`).
const IDENTITY_ROUNDS: u32 = 5;

/// Catch-up pages (of about 500 keys each) one round walks per tenant and secondary.
const PAGES: usize = 4;

/// Times a key is copied and found different again before the repair gives up on it (counted as a failure, and
/// logged).
const MAX_ATTEMPTS: u8 = 8;

/// Runs until the process ends.
pub(super) async fn run(gateway: Arc<Gateway>) {
    let timeout = super::exchange_timeout(&gateway.config);
    let mut repairer = Repairer {
        settle: gateway.config.command_timeout + ROUND,
        timeout,
        records: HashMap::new(),
        sides: Sides::new(Arc::clone(&gateway.topologies), timeout),
    };
    let mut ticks = tokio::time::interval(ROUND);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut restarts = Restarts::kept_in(gateway.config.state_dir.as_deref());
    for round in 0u32.. {
        ticks.tick().await;
        let snapshot = gateway.snapshot();
        if round % IDENTITY_ROUNDS == 0 {
            let timeout = repairer.timeout;
            let sides = &mut repairer.sides;
            restarts
                .check(&snapshot, &gateway.repairs, sides, timeout)
                .await;
            sides.let_go();
        }
        for missed in gateway.repairs.all() {
            if let Some(tenant) = snapshot.tenant_by_name(&missed.tenant) {
                repairer.round(tenant, &missed).await;
            }
            missed.compact();
        }
    }
}

/// A key the repair copied or was refused: when to look at it again, and how often this happened.
struct Attempts {
    due: Instant,
    count: u8,
}

/// What the task keeps of one record between rounds.
#[derive(Default)]
struct RecordState {
    attempts: HashMap<MissedKey, Attempts>,
    walk: Option<Walk>,
    /// Why the last repair was refused, until one succeeds (logged when it changes).
    refused: Option<String>,
}

struct Repairer {
    /// How long after a copy the key is compared again.
    settle: Duration,
    /// Bounds every connect and exchange.
    timeout: Duration,
    records: HashMap<(String, String), RecordState>,
    /// Where each resource keeps a key now.
    sides: Sides,
}

impl Repairer {
    async fn round(&mut self, tenant: &Tenant, missed: &Missed) {
        let mut links = Links::default();
        let id = (missed.tenant.clone(), missed.resource.clone());
        let (settle, timeout) = (self.settle, self.timeout);
        let sides = &mut self.sides;
        let state = self.records.entry(id).or_default();
        let now = Instant::now();
        let batch: Vec<MissedKey> = missed
            .pending()
            .keys
            .iter()
            .filter(|key| state.attempts.get(*key).is_none_or(|a| a.due <= now))
            .take(BATCH)
            .cloned()
            .collect();
        // Nodes that did not answer this round: their keys wait for the next one, the others' go on (one master
        // of a cluster down holds only its own slots' keys).
        let mut down: HashSet<(String, u32)> = HashSet::new();
        let mut waiting = false;
        for key in batch {
            if !owns(tenant, &key) {
                // Taken back from disk, for a namespace or databases the tenant no longer has.
                missed.settled(&key);
                continue;
            }
            let nodes = match nodes_of(&tenant.route, &missed.resource, &key, sides) {
                // The route no longer writes the key there.
                Ok(None) => {
                    state.note(missed, key, Outcome::Equal, settle);
                    continue;
                }
                Ok(Some(nodes)) => nodes,
                Err(trouble) => {
                    waiting = true;
                    match not_now(trouble, tenant, missed, &key, sides) {
                        Some(reason) => return state.refused(missed, &reason),
                        None => continue,
                    }
                }
            };
            let id = |node: &NodeSpec| (node.addr.clone(), node.db);
            if down.contains(&id(&nodes.0)) || down.contains(&id(&nodes.1)) {
                continue;
            }
            match repair(&nodes, &key.1, &mut links, timeout).await {
                Ok(outcome) => state.note(missed, key, outcome, settle),
                // A secondary that refuses (read-only, out of memory, a user denied RESTORE) refuses the other
                // keys too: they wait for the next round.
                Err(Trouble::Refused(reason)) => return state.refused(missed, &reason),
                // The secondary (or the primary) does not answer: its keys wait for the next round.
                Err(trouble) => {
                    waiting = true;
                    down.insert(id(match trouble {
                        Trouble::Primary(_) => &nodes.0,
                        _ => &nodes.1,
                    }));
                    not_now(trouble, tenant, missed, &key, sides);
                }
            }
        }
        if !waiting {
            state
                .catch_up(tenant, missed, (&mut links, sides), timeout)
                .await;
        }
    }
}

/// A key whose primary or secondary cannot serve it now (see `key::NOT_NOW`): the resource's topology looks
/// again. A refusal is returned, for the caller to note.
fn not_now(
    trouble: Trouble,
    tenant: &Tenant,
    missed: &Missed,
    key: &MissedKey,
    sides: &mut Sides,
) -> Option<String> {
    let (error, primary) = match trouble {
        Trouble::Refused(reason) => return Some(reason),
        Trouble::Primary(error) => (error, true),
        Trouble::Secondary(error) => (error, false),
    };
    if let Some((p, s)) = resources_of(&tenant.route, &missed.resource, &key.1) {
        sides.stale(&if primary { p } else { s }.spec);
    }
    tracing::debug!(tenant = %missed.tenant, resource = %missed.resource, %error, primary,
        "double-write repair waits for both sides to answer");
    None
}

/// Whether a recorded key is the tenant's own: in one of its databases, under its namespace prefix when it has
/// one.
pub(super) fn owns(tenant: &Tenant, key: &MissedKey) -> bool {
    let in_databases = i64::from(key.0) < tenant.databases().end;
    in_databases
        && tenant
            .namespace()
            .is_none_or(|namespace| key.1.starts_with(namespace.prefix()))
}

/// Repairs one key on its nodes.
async fn repair(
    nodes: &Nodes,
    key: &[u8],
    links: &mut Links,
    timeout: Duration,
) -> Result<Outcome, Trouble> {
    let (primary, secondary) = links.pair(nodes, timeout).await?;
    let outcome = key::repair(primary, secondary, key).await;
    links.forget(nodes, &outcome);
    outcome
}

impl RecordState {
    /// What a repair of a recorded key did: equal (after a copy: repaired) takes it off the record; copied or
    /// raced, it is looked at again after `settle`.
    fn note(&mut self, missed: &Missed, key: MissedKey, outcome: Outcome, settle: Duration) {
        self.refused = None;
        match outcome {
            Outcome::Equal => {
                if self.attempts.remove(&key).is_some() {
                    Missed::add(&missed.repaired, 1);
                }
                missed.settled(&key);
            }
            // Another write came first: read again next round.
            Outcome::Raced => missed.compared(&key, true),
            Outcome::Copied => {
                missed.compared(&key, false);
                let why = "copied again and again, the copies still differ";
                self.again(missed, key, settle, why);
            }
        }
    }

    /// A repair refused: counted once per round, logged when the reason changes.
    fn refused(&mut self, missed: &Missed, reason: &str) {
        Missed::add(&missed.failures, 1);
        if self.refused.as_deref() != Some(reason) {
            tracing::warn!(tenant = %missed.tenant, resource = %missed.resource, reason,
                "double-write repair refused; the keys wait");
            self.refused = Some(reason.to_string());
        }
    }

    /// Notes one more copy of a key, looked at again after `settle`; past [`MAX_ATTEMPTS`], the key is given up
    /// (a failure, logged with `why`).
    fn again(&mut self, missed: &Missed, key: MissedKey, settle: Duration, why: &str) {
        let attempts = self.attempts.entry(key.clone()).or_insert(Attempts {
            due: Instant::now(),
            count: 0,
        });
        attempts.count += 1;
        attempts.due = Instant::now() + settle;
        if attempts.count > MAX_ATTEMPTS {
            self.attempts.remove(&key);
            Missed::add(&missed.failures, 1);
            missed.settled(&key);
            tracing::warn!(tenant = %missed.tenant, resource = %missed.resource, reason = why,
                "double-write repair gave up on a key");
        }
    }

    /// Walks a few pages of the catch-up the record asks for, repairing what differs (a copied key is recorded,
    /// to be compared again like the others); done, the catch-up is taken off the record unless asked again
    /// meanwhile (then it starts over).
    async fn catch_up(
        &mut self,
        tenant: &Tenant,
        missed: &Missed,
        (links, sides): (&mut Links, &mut Sides),
        timeout: Duration,
    ) {
        let asked = {
            let pending = missed.pending();
            pending.catch_up.zip(Some(pending.generation))
        };
        let Some(asked) = asked else {
            self.walk = None;
            return;
        };
        let mut walk = self.walk.take().unwrap_or_else(|| Walk::new(tenant, asked));
        for _ in 0..PAGES {
            let page = match walk
                .page(tenant, &missed.resource, links, sides, timeout)
                .await
            {
                Ok(Some(page)) => page,
                Ok(None) => break,
                // It starts over.
                Err(Trouble::Refused(reason)) => return self.refused(missed, &reason),
                Err(Trouble::Primary(_) | Trouble::Secondary(_)) => {
                    self.walk = Some(walk);
                    return;
                }
            };
            let mut page = page.into_iter();
            while let Some((key, nodes)) = page.next() {
                Missed::add(&missed.scanned, 1);
                let outcome = repair(&nodes, &key.1, links, timeout).await;
                if let Ok(Outcome::Equal) = outcome {
                    continue;
                }
                // Copied (to compare again) or not repaired: the key is recorded, as a missed one is.
                missed.pending().insert(missed, key.clone());
                match outcome {
                    Err(Trouble::Refused(reason)) => self.refused(missed, &reason),
                    Err(trouble) => {
                        not_now(trouble, tenant, missed, &key, sides);
                        // The rest of the page is recorded too, for when both sides answer.
                        let mut pending = missed.pending();
                        page.for_each(|(key, _)| pending.insert(missed, key));
                        self.walk = Some(walk);
                        return;
                    }
                    Ok(_) => {}
                }
            }
        }
        if walk.page_left() {
            self.walk = Some(walk);
            return;
        }
        let (why, generation) = walk.asked;
        missed.pending().caught_up(generation);
        tracing::info!(tenant = %missed.tenant, resource = %missed.resource, reason = why.label(),
            "double-write repair: catch-up done");
    }
}
