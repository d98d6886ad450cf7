//! The gateway's state: its flags' parsing, and how it follows control-plane snapshots: a delta serves exactly
//! what a full build of the resulting snapshot serves, a delta that does not apply is refused while the snapshot
//! served stays, and the snapshot kept for the cache file is the full one.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fastrand::Rng;
use switchyard_schemas::{certificate_digest, credential_digest};

use super::*;
use crate::route::Refused;

#[test]
fn output_buffer_limits_read_as_redis_writes_them() {
    let limit = parse_output_buffer_limit("32mb 8MB 60").unwrap();
    assert_eq!(
        limit,
        OutputBufferLimit {
            hard_bytes: 32 << 20,
            soft_bytes: 8 << 20,
            soft_seconds: 60
        }
    );
    assert_eq!(parse_bytes("1k"), Ok(1000));
    assert_eq!(parse_bytes("1gb"), Ok(1 << 30));
    assert_eq!(parse_bytes("0"), Ok(0));
    for bad in ["", "1 2", "1mb 2mb x", "1tb 0 0", "-1 0 0"] {
        assert!(parse_output_buffer_limit(bad).is_err(), "{bad}");
    }
    assert!(parse_bytes("99999999999gb").is_err());
}

/// A tenant as the control plane holds it.
#[derive(Clone)]
struct Held {
    disabled: bool,
    allow_admin: bool,
    max_connections: Option<u32>,
    /// (credential id, secret); a secret starting with "cert:" stands for a client certificate of that key.
    secrets: Vec<(i64, String)>,
    route: String,
    version: i64,
}

fn digest_of(secret: &str) -> String {
    match secret.strip_prefix("cert:") {
        Some(key) => certificate_digest(key.as_bytes()),
        None => credential_digest(secret),
    }
}

impl Held {
    fn json(&self, name: &str) -> String {
        let credentials: Vec<String> = self
            .secrets
            .iter()
            .map(|(id, secret)| format!(r#"{{"id":{id},"digest":"{}"}}"#, digest_of(secret)))
            .collect();
        let limits = match self.max_connections {
            Some(n) => format!(r#"{{"max_connections":{n}}}"#),
            None => "{}".to_string(),
        };
        format!(
            r#"{{"name":"{name}","disabled":{},"allow_admin":{},"limits":{limits},"credentials":[{}],"route":{},"route_version":{}}}"#,
            self.disabled,
            self.allow_admin,
            credentials.join(","),
            self.route,
            self.version
        )
    }
}

/// A route over a few Redis addresses and databases, so that tenants share some resources and not others.
fn random_route(rng: &mut Rng) -> String {
    let kind = rng.usize(..5);
    let mut url = || {
        format!(
            "redis://127.0.0.1:{}/{}",
            7000 + rng.usize(..4),
            rng.usize(..3)
        )
    };
    match kind {
        0 => format!(r#"{{"type":"single","target":"{}"}}"#, url()),
        1 => format!(r#"{{"type":"single","target":"{}","databases":2}}"#, url()),
        2 => format!(
            r#"{{"type":"sharded","shards":[{{"name":"a","target":"{}"}},{{"name":"b","target":"{}"}}]}}"#,
            url(),
            url()
        ),
        3 => format!(
            r#"{{"type":"single","target":{{"read":{{"resources":["{}","{}"],"policy":"random"}},"write":{{"resources":["{}","{}"],"ack":"all"}}}}}}"#,
            url(),
            url(),
            url(),
            url()
        ),
        _ => format!(
            r#"{{"type":"double_write","primary":{{"type":"single","target":"{}"}},"secondary":{{"type":"sharded","shards":[{{"name":"x","target":"{}"}},{{"name":"y","target":"{}"}}]}}}}"#,
            url(),
            url(),
            url()
        ),
    }
}

/// The control plane's side of the test: its tenants, revision and epoch, and the bodies it would send.
struct ControlPlane {
    /// How many tenants it keeps, about (random changes add tenants below it, and remove them only above).
    population: usize,
    tenants: BTreeMap<String, Held>,
    revision: i64,
    epoch: &'static str,
    next_id: i64,
}

impl ControlPlane {
    fn full(&self) -> String {
        let tenants: Vec<String> = self.tenants.iter().map(|(n, t)| t.json(n)).collect();
        format!(
            r#"{{"revision":{},"epoch":"{}","tenants":[{}]}}"#,
            self.revision,
            self.epoch,
            tenants.join(",")
        )
    }

    /// The delta from `after` to now, given what changed and what was removed since.
    fn delta(&self, after: i64, changed: &HashSet<String>, removed: &HashSet<String>) -> String {
        let mut changed: Vec<&String> = changed.iter().collect();
        changed.sort();
        let mut removed: Vec<&String> = removed.iter().collect();
        removed.sort();
        let tenants: Vec<String> = changed.iter().map(|n| self.tenants[*n].json(n)).collect();
        format!(
            r#"{{"revision":{},"epoch":"{}","tenants":[{}],"delta":{{"after":{after},"removed_tenants":{}}}}}"#,
            self.revision,
            self.epoch,
            tenants.join(","),
            serde_json::to_string(&removed).unwrap()
        )
    }

    fn new_secret(&mut self, rng: &mut Rng, name: &str) -> (i64, String) {
        self.next_id += 1;
        let kind = if rng.usize(..4) == 0 { "cert:" } else { "" };
        (self.next_id, format!("{kind}{name}-{}", self.next_id))
    }

    /// One random change; returns the tenant it touched, and whether it was removed.
    fn change(&mut self, rng: &mut Rng) -> (String, bool) {
        let names: Vec<String> = self.tenants.keys().cloned().collect();
        let pick = |rng: &mut Rng| names[rng.usize(..names.len())].clone();
        let action = match names.len() < self.population {
            true => 0,
            false => rng.usize(..8),
        };
        if action == 0 || (names.len() < self.population * 5 / 3 && action == 1) {
            let name = format!("t{:05}", rng.usize(..100_000));
            let secret = self.new_secret(rng, &name);
            let held = Held {
                disabled: false,
                allow_admin: rng.usize(..5) == 0,
                max_connections: None,
                secrets: vec![secret],
                route: random_route(rng),
                version: 1,
            };
            self.tenants.insert(name.clone(), held);
            return (name, false);
        }
        let name = pick(rng);
        if action == 7 {
            self.tenants.remove(&name);
            return (name, true);
        }
        let secret = self.new_secret(rng, &name);
        let held = self.tenants.get_mut(&name).unwrap();
        match action {
            2 => {
                held.route = random_route(rng);
                held.version += 1;
            }
            3 => held.secrets.push(secret),
            4 if !held.secrets.is_empty() => {
                held.secrets.remove(rng.usize(..held.secrets.len()));
            }
            5 => held.disabled = !held.disabled,
            _ => {
                held.allow_admin = !held.allow_admin;
                held.max_connections = Some(u32::try_from(rng.usize(..100)).unwrap());
            }
        }
        (name, false)
    }
}

/// What a gateway serves, without the generation (which counts its own history).
fn served(gateway: &Gateway) -> serde_json::Value {
    let mut listing = serde_json::to_value(gateway.snapshot().listing()).unwrap();
    listing.as_object_mut().unwrap().remove("generation");
    listing
}

/// Fails, naming the first tenant served otherwise, unless both gateways serve the same.
fn assert_same(follower: &Gateway, fresh: &Gateway, step: usize) {
    let (followed, built) = (served(follower), served(fresh));
    if followed != built {
        let tenants = |v: &serde_json::Value| v["tenants"].as_array().cloned().unwrap_or_default();
        let first = tenants(&followed)
            .into_iter()
            .zip(tenants(&built))
            .find(|(a, b)| a != b);
        panic!(
            "step {step}: the deltas serve otherwise than the full snapshot: {} against {} tenants, first \
             difference (followed, built): {first:?}",
            tenants(&followed).len(),
            tenants(&built).len()
        );
    }
}

fn resources(gateway: &Gateway) -> HashSet<crate::backend::ResourceSpec> {
    gateway.snapshot().resources().iter().cloned().collect()
}

fn gateway() -> Gateway {
    Gateway::new(test_config(), None)
}

/// Over a few hundred seeded random steps (tenants added, routes, credentials, limits changed, tenants disabled,
/// enabled and removed, one to four changes a step), a gateway that follows deltas serves exactly what a gateway
/// given the full snapshot serves: the same tenants, routes, limits and credential index, the same resources to
/// keep open; tenants a delta does not name stay as they were (the same compiled tenant); and the snapshot it
/// keeps for its cache file is the full one.
#[test]
fn deltas_serve_what_a_full_snapshot_serves() {
    follow_deltas(23, 150, 300);
}

/// The same over more tenants than fit one chunk of the tenant list (`route::ByName`), fewer steps.
#[test]
fn deltas_serve_what_a_full_snapshot_serves_across_chunks() {
    follow_deltas(5, 1500, 40);
}

/// `steps` random steps from `population` tenants (see `deltas_serve_what_a_full_snapshot_serves`).
fn follow_deltas(seed: u64, population: usize, steps: usize) {
    let mut rng = Rng::with_seed(seed);
    let mut cp = ControlPlane {
        population,
        tenants: BTreeMap::new(),
        revision: 1,
        epoch: "db-1",
        next_id: 0,
    };
    for _ in 0..population {
        cp.change(&mut rng);
    }
    let follower = gateway();
    follower.apply_control_plane(cp.full().as_bytes()).unwrap();
    let mut steps_with_removals = 0;
    for step in 0..steps {
        let before = follower.snapshot();
        let after = cp.revision;
        let (mut changed, mut removed) = (HashSet::new(), HashSet::new());
        for _ in 0..1 + rng.usize(..4) {
            cp.revision += 1;
            let (name, gone) = cp.change(&mut rng);
            match gone {
                true => changed.remove(&name) | removed.insert(name),
                false => removed.remove(&name) | changed.insert(name),
            };
        }
        steps_with_removals += usize::from(!removed.is_empty());
        let received = follower
            .apply_control_plane(cp.delta(after, &changed, &removed).as_bytes())
            .unwrap_or_else(|e| panic!("step {step}: {e}"));

        let fresh = gateway();
        fresh.apply_control_plane(cp.full().as_bytes()).unwrap();
        assert_same(&follower, &fresh, step);
        assert_eq!(resources(&follower), resources(&fresh), "step {step}");
        let full: switchyard_schemas::Snapshot = serde_json::from_str(&cp.full()).unwrap();
        let cached: switchyard_schemas::Snapshot =
            serde_json::from_slice(&received.to_json().unwrap()).unwrap();
        assert_eq!(cached, full, "step {step}");

        let now = follower.snapshot();
        for tenant in before.tenants().iter() {
            if !changed.contains(&tenant.name) && !removed.contains(&tenant.name) {
                let kept = now.tenant_by_name(&tenant.name).unwrap();
                assert!(Arc::ptr_eq(kept, tenant), "step {step}: {}", tenant.name);
            }
        }
        for (name, held) in &cp.tenants {
            for (_, secret) in &held.secrets {
                let found = match secret.strip_prefix("cert:") {
                    Some(key) => now.authenticate_certificate(key.as_bytes()),
                    None => now.authenticate(None, secret.as_bytes()),
                };
                let expected = (!held.disabled).then_some(name.as_str());
                assert_eq!(found.map(|(t, _)| t.name.as_str()), expected, "step {step}");
            }
        }
    }
    assert!(steps_with_removals > steps / 30, "{steps_with_removals}");
    let applied = |count: &std::sync::atomic::AtomicU64| count.load(Ordering::Relaxed);
    let steps = u64::try_from(steps).unwrap();
    assert_eq!(applied(&follower.metrics.snapshots_applied_delta), steps);
    assert_eq!(applied(&follower.metrics.snapshots_applied_full), 1);
}

/// One tenant that a delta changes keeps its counters, and a resource URL that tenants built in different
/// deltas name is one plan.
#[test]
fn a_changed_tenant_keeps_its_counters_and_shares_its_resources() {
    let route = |port: u16| format!(r#"{{"type":"single","target":"redis://127.0.0.1:{port}"}}"#);
    let tenant = |name: &str, port: u16, version: i64| {
        format!(
            r#"{{"name":"{name}","disabled":false,"allow_admin":false,"limits":{{}},"credentials":[],"route":{},"route_version":{version}}}"#,
            route(port)
        )
    };
    let gateway = gateway();
    let full = format!(
        r#"{{"revision":1,"epoch":"e","tenants":[{},{}]}}"#,
        tenant("a", 1, 1),
        tenant("b", 2, 1)
    );
    gateway.apply_control_plane(full.as_bytes()).unwrap();
    gateway
        .snapshot()
        .tenant_by_name("a")
        .unwrap()
        .runtime
        .counters
        .commands
        .add(crate::cmd::Command::Get, 5);
    let delta = format!(
        r#"{{"revision":2,"epoch":"e","tenants":[{},{}],"delta":{{"after":1,"removed_tenants":[]}}}}"#,
        tenant("a", 2, 2),
        tenant("c", 2, 1)
    );
    gateway.apply_control_plane(delta.as_bytes()).unwrap();
    let snapshot = gateway.snapshot();
    let a = snapshot.tenant_by_name("a").unwrap();
    assert_eq!(
        a.runtime.counters.commands.counts().collect::<Vec<_>>(),
        [("get", 5)]
    );
    let plan =
        |name: &str| Arc::clone(&snapshot.tenant_by_name(name).unwrap().route.shards[0].write[0]);
    assert!(Arc::ptr_eq(&plan("a"), &plan("b")));
    assert!(Arc::ptr_eq(&plan("a"), &plan("c")));
    assert_eq!(snapshot.resources().len(), 1);
}

/// A delta for another revision or epoch, or to a snapshot without an epoch, does not apply: it is refused as
/// such (the gateway then asks for a full snapshot) and the snapshot served stays; a malformed delta is refused
/// as invalid.
#[test]
fn a_delta_that_does_not_apply_is_refused_and_the_snapshot_served_stays() {
    let tenant = |name: &str| {
        format!(
            r#"{{"name":"{name}","disabled":false,"allow_admin":false,"limits":{{}},"credentials":[{{"id":1,"digest":"{}"}}],"route":{{"type":"single","target":"redis://127.0.0.1:1"}},"route_version":1}}"#,
            credential_digest(name)
        )
    };
    let delta = |after: i64, epoch: &str, tenants: &str, removed: &str| {
        format!(
            r#"{{"revision":9,{epoch}"tenants":[{tenants}],"delta":{{"after":{after},"removed_tenants":[{removed}]}}}}"#
        )
    };
    let gateway = gateway();
    // Before any snapshot, and on top of one from a control plane that names no epoch.
    let refused = gateway.apply_control_plane(delta(0, r#""epoch":"e","#, "", "").as_bytes());
    assert!(matches!(refused, Err(Refused::DoesNotApply(_))));
    let no_epoch = format!(r#"{{"revision":5,"tenants":[{}]}}"#, tenant("a"));
    gateway.apply_control_plane(no_epoch.as_bytes()).unwrap();
    let refused = gateway.apply_control_plane(delta(5, "", "", r#""a""#).as_bytes());
    assert!(matches!(refused, Err(Refused::DoesNotApply(_))));

    let full = format!(
        r#"{{"revision":5,"epoch":"e","tenants":[{}]}}"#,
        tenant("a")
    );
    gateway.apply_control_plane(full.as_bytes()).unwrap();
    let before = served(&gateway);
    let b = tenant("b");
    let twice = format!("{b},{b}");
    let bad_route = b.replace(
        r#"{"type":"single","target":"redis://127.0.0.1:1"}"#,
        r#"{"type":"sharded","shards":[{"name":"s","target":"redis://h:1"},{"name":"s","target":"redis://h:2"}]}"#,
    );
    for (body, expected) in [
        (delta(4, r#""epoch":"e","#, &b, ""), "does not apply"),
        (delta(5, r#""epoch":"f","#, &b, ""), "does not apply"),
        (delta(5, "", &b, ""), "does not apply"),
        (delta(5, r#""epoch":"e","#, &twice, ""), "invalid"),
        (delta(5, r#""epoch":"e","#, &b, r#""b""#), "invalid"),
        (delta(5, r#""epoch":"e","#, &bad_route, ""), "invalid"),
        (
            delta(5, r#""epoch":"e","#, r#"{"name":"b"}"#, ""),
            "unreadable",
        ),
    ] {
        let outcome = match gateway.apply_control_plane(body.as_bytes()) {
            Err(Refused::DoesNotApply(_)) => "does not apply".to_string(),
            Err(Refused::Invalid(e)) => {
                assert!(e.to_string().starts_with("/tenants/"), "{e}");
                "invalid".to_string()
            }
            Err(Refused::Failed(_)) => "unreadable".to_string(),
            Ok(_) => "applied".to_string(),
        };
        assert_eq!(outcome, expected, "{body}");
        assert_eq!(served(&gateway), before);
    }
    assert_eq!(gateway.snapshot().revision, Some(5));
    // The same delta, for the revision and epoch served, applies.
    gateway
        .apply_control_plane(delta(5, r#""epoch":"e","#, &b, r#""a""#).as_bytes())
        .unwrap();
    let names: Vec<_> = gateway
        .snapshot()
        .tenants()
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, ["b"]);
}

/// The cost figure at scale (not a check, so ignored): a full snapshot of 100,000 tenants, then one-tenant
/// deltas, each timed from the body received to the snapshot published. In a release build:
/// `cargo test --release -p switchyard-gateway --lib -- --ignored --nocapture one_tenant_deltas_at_100000`.
#[test]
#[ignore]
fn one_tenant_deltas_at_100000_tenants() {
    use std::time::Instant;

    let held = |i: usize, version: i64| Held {
        disabled: false,
        allow_admin: false,
        max_connections: Some(100),
        secrets: vec![(i64::try_from(i).unwrap(), format!("secret-{i}-{version}"))],
        route: format!(
            r#"{{"type":"single","target":"redis://:password-of-{}@10.0.{}.{}:6379/{}"}}"#,
            i % 100,
            i % 7,
            i % 100,
            i % 16
        ),
        version,
    };
    let mut cp = ControlPlane {
        population: 100_000,
        tenants: (0..100_000)
            .map(|i| (format!("tenant-{i:06}"), held(i, 1)))
            .collect(),
        revision: 1,
        epoch: "db-1",
        next_id: 0,
    };
    let full = cp.full();
    let gateway = gateway();
    let started = Instant::now();
    let received = gateway.apply_control_plane(full.as_bytes()).unwrap();
    println!(
        "full snapshot: {} tenants, {} bytes, applied in {:?}",
        cp.tenants.len(),
        full.len(),
        started.elapsed()
    );
    let started = Instant::now();
    let cache = received.to_json().unwrap();
    println!(
        "cache file serialized ({} bytes) in {:?}",
        cache.len(),
        started.elapsed()
    );
    drop((received, cache));
    let started = Instant::now();
    let listing = serde_json::to_string(&gateway.snapshot().listing()).unwrap();
    println!(
        "GET /tenants: {} bytes in {:?}",
        listing.len(),
        started.elapsed()
    );

    let mut times = Vec::new();
    for round in 0..50 {
        let i = (round * 7919) % 100_000;
        let name = format!("tenant-{i:06}");
        let after = cp.revision;
        cp.revision += 1;
        cp.tenants.insert(name.clone(), held(i + 1, cp.revision));
        let delta = cp.delta(after, &HashSet::from([name]), &HashSet::new());
        let started = Instant::now();
        gateway.apply_control_plane(delta.as_bytes()).unwrap();
        times.push(started.elapsed());
    }
    times.sort();
    println!(
        "one-tenant delta at {} tenants: median {:?}, 90th percentile {:?}, max {:?} ({} deltas)",
        gateway.snapshot().tenants().len(),
        times[times.len() / 2],
        times[times.len() * 9 / 10],
        times[times.len() - 1],
        times.len()
    );
}
