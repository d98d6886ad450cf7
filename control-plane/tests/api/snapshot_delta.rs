//! `GET /v1/snapshot?after=R&epoch=E`: deltas carry exactly what changed, and applying them gives the snapshot.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use fastrand::Rng;
use serde_json::json;
use sqlx::PgPool;
use switchyard_schemas::{Snapshot, SnapshotTenant};

use crate::common::{Api, Reply, single};
use crate::snapshot::until_waiting;

/// What a gateway holds: the tenants of the last snapshot by name, at its revision and epoch.
#[derive(Debug, Default, PartialEq)]
struct Follower {
    revision: i64,
    epoch: String,
    tenants: BTreeMap<String, SnapshotTenant>,
}

impl Follower {
    /// Applies a snapshot or a delta; returns whether it was a delta.
    fn apply(&mut self, snapshot: Snapshot) -> bool {
        self.epoch = snapshot.epoch.expect("every snapshot names its epoch");
        let delta = snapshot.delta.is_some();
        match snapshot.delta {
            Some(delta) => {
                assert_eq!(
                    delta.after, self.revision,
                    "a delta applies to what was asked"
                );
                for name in delta.removed_tenants {
                    self.tenants.remove(&name);
                }
            }
            None => self.tenants.clear(),
        }
        for tenant in snapshot.tenants {
            self.tenants.insert(tenant.name.clone(), tenant);
        }
        self.revision = snapshot.revision;
        delta
    }

    /// Polls as a gateway does, without waiting: `None` when nothing changed.
    async fn poll(&self, api: &Api) -> Option<Snapshot> {
        let reply = api
            .gateway(
                "GET",
                &format!("/v1/snapshot?after={}&epoch={}", self.revision, self.epoch),
                None,
            )
            .await;
        match reply.status {
            304 => None,
            200 => Some(serde_json::from_value(reply.body).expect("a snapshot")),
            status => panic!("{status}: {}", reply.body),
        }
    }

    async fn full(api: &Api) -> Follower {
        let mut follower = Follower::default();
        follower.apply(full(api).await);
        follower
    }
}

async fn full(api: &Api) -> Snapshot {
    let reply = api.gateway("GET", "/v1/snapshot", None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    serde_json::from_value(reply.body).expect("a snapshot")
}

fn names(snapshot: &Snapshot) -> Vec<&str> {
    snapshot.tenants.iter().map(|t| t.name.as_str()).collect()
}

async fn routed_tenant(api: &Api, name: &str, target: &str) {
    api.create_tenant(name).await;
    assert_eq!(api.put_route(name, single(target)).await.status, 200);
}

fn route(target: &str) -> switchyard_schemas::RouteTable {
    serde_json::from_value(single(target)).expect("a route table")
}

#[sqlx::test(migrations = "../migrations")]
async fn a_delta_carries_only_what_changed(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_resource("shared", "redis://127.0.0.1:7001")
        .await;
    routed_tenant(&api, "alpha", "shared").await;
    routed_tenant(&api, "beta", "shared").await;
    routed_tenant(&api, "gamma", "redis://127.0.0.1:7002").await;
    let mut follower = Follower::full(&api).await;

    // One tenant's route.
    assert_eq!(
        api.put_route("beta", single("redis://127.0.0.1:7003"))
            .await
            .status,
        200
    );
    let delta = follower.poll(&api).await.expect("a change");
    assert_eq!(names(&delta), ["beta"]);
    let shape = delta.delta.as_ref().expect("a delta");
    assert_eq!(
        (shape.after, shape.removed_tenants.len()),
        (follower.revision, 0)
    );
    assert_eq!(delta.epoch.as_deref(), Some(follower.epoch.as_str()));
    follower.apply(delta);

    // A resource's URL reaches the tenants that name it; its description, no one.
    let moved = json!({"url": "redis://127.0.0.1:7009", "force": true});
    assert_eq!(
        api.admin("PUT", "/v1/resources/shared", Some(moved))
            .await
            .status,
        200
    );
    let delta = follower.poll(&api).await.expect("a change");
    assert_eq!(
        names(&delta),
        ["alpha"],
        "beta no longer names the resource"
    );
    assert_eq!(delta.tenants[0].route, route("redis://127.0.0.1:7009"));
    follower.apply(delta);
    let described = json!({"url": "redis://127.0.0.1:7009", "description": "d"});
    assert_eq!(
        api.admin("PUT", "/v1/resources/shared", Some(described))
            .await
            .status,
        200
    );
    let delta = follower.poll(&api).await.expect("a new revision");
    assert_eq!(names(&delta), Vec::<&str>::new());
    follower.apply(delta);

    // Credentials, flags and deletion.
    let (id, _) = api.issue_credential("gamma").await;
    let disable = json!({"disabled": true});
    assert_eq!(
        api.admin("PATCH", "/v1/tenants/alpha", Some(disable))
            .await
            .status,
        200
    );
    let delta = follower.poll(&api).await.expect("a change");
    assert_eq!(names(&delta), ["alpha", "gamma"]);
    assert!(delta.tenants[0].disabled);
    assert_eq!(delta.tenants[1].credentials[0].id, id);
    follower.apply(delta);
    let revoke = format!("/v1/tenants/gamma/credentials/{id}");
    assert_eq!(api.admin("DELETE", &revoke, None).await.status, 204);
    assert_eq!(
        api.admin("DELETE", "/v1/tenants/beta", None).await.status,
        204
    );
    api.create_tenant("routeless").await;
    let delta = follower.poll(&api).await.expect("a change");
    assert_eq!(
        names(&delta),
        ["gamma"],
        "a tenant without a route is not served"
    );
    assert!(delta.tenants[0].credentials.is_empty());
    let removed = delta.delta.as_ref().map(|d| d.removed_tenants.clone());
    assert_eq!(removed, Some(vec!["beta".to_string()]));
    follower.apply(delta);
    assert_eq!(follower, Follower::full(&api).await);

    // Deleted and created again between two polls: served, not removed.
    assert_eq!(
        api.admin("DELETE", "/v1/tenants/gamma", None).await.status,
        204
    );
    routed_tenant(&api, "gamma", "redis://127.0.0.1:7004").await;
    let delta = follower.poll(&api).await.expect("a change");
    assert_eq!(names(&delta), ["gamma"]);
    assert_eq!(
        delta.delta.as_ref().map(|d| d.removed_tenants.len()),
        Some(0)
    );
    follower.apply(delta);
    assert_eq!(follower, Follower::full(&api).await);
}

#[sqlx::test(migrations = "../migrations")]
async fn following_deltas_gives_the_snapshot(pool: PgPool) {
    let api = Api::new(pool.clone()).await;
    let replica = Api::replica(&pool).await;
    for r in 0..3 {
        api.create_resource(&format!("r{r}"), &format!("redis://127.0.0.1:{}", 7000 + r))
            .await;
    }
    // One follower polls after every few changes, the other rarely (deltas over many revisions), from the
    // other replica.
    let (mut eager, mut lazy) = (Follower::full(&api).await, Follower::full(&replica).await);
    let mut credentials: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut dice = Rng::with_seed(0x5eed_1234_abcd_0001);
    let mut deltas = 0;
    for step in 0..240 {
        let tenant = format!("t{:02}", dice.usize(..24));
        let target = match dice.usize(..4) {
            3 => format!("redis://127.0.0.1:{}", 7100 + dice.usize(..50)),
            r => format!("r{r}"),
        };
        let status = match dice.usize(..9) {
            0 | 1 => {
                api.admin("POST", "/v1/tenants", Some(json!({"name": tenant})))
                    .await;
                api.put_route(&tenant, single(&target)).await.status
            }
            2 => api.put_route(&tenant, single(&target)).await.status,
            3 | 4 if credentials.len() < 4 || dice.usize(..2) == 0 => {
                let reply = api
                    .admin(
                        "POST",
                        &format!("/v1/tenants/{tenant}/credentials"),
                        Some(json!({})),
                    )
                    .await;
                if let Some(id) = reply.body["id"].as_i64() {
                    credentials.entry(tenant.clone()).or_default().push(id);
                }
                reply.status
            }
            4 => {
                // Any tenant's credential, so that revocations are as frequent as issues.
                let holders: Vec<_> = credentials.keys().cloned().collect();
                let Some(holder) = holders.get(dice.usize(..holders.len().max(1))) else {
                    continue;
                };
                let ids = credentials.get_mut(holder).expect("a holder");
                let id = ids.swap_remove(dice.usize(..ids.len()));
                if ids.is_empty() {
                    credentials.remove(holder);
                }
                let path = format!("/v1/tenants/{holder}/credentials/{id}");
                api.admin("DELETE", &path, None).await.status
            }
            5 => {
                let patch = json!({"disabled": dice.usize(..3) == 0, "allow_admin": dice.usize(..2) == 0,
                                   "limits": {"max_connections": 1 + dice.usize(..100)}});
                api.admin("PATCH", &format!("/v1/tenants/{tenant}"), Some(patch))
                    .await
                    .status
            }
            6 => {
                let url = json!({"url": format!("redis://127.0.0.1:{}", 7200 + dice.usize(..50))});
                let resource = format!("/v1/resources/r{}", dice.usize(..3));
                api.admin("PUT", &resource, Some(url)).await.status
            }
            _ => {
                credentials.remove(&tenant);
                api.admin("DELETE", &format!("/v1/tenants/{tenant}"), None)
                    .await
                    .status
            }
        };
        assert!(status < 500, "step {step}: {status}");
        if dice.usize(..3) == 0 {
            if let Some(snapshot) = eager.poll(&api).await {
                deltas += usize::from(eager.apply(snapshot));
            }
            assert_eq!(eager, Follower::full(&api).await, "step {step}");
        }
        if dice.usize(..40) == 0
            && let Some(snapshot) = lazy.poll(&replica).await
        {
            assert!(
                lazy.apply(snapshot),
                "step {step}: a full snapshot for a delta"
            );
        }
    }
    for follower in [&mut eager, &mut lazy] {
        if let Some(snapshot) = follower.poll(&replica).await {
            assert!(follower.apply(snapshot));
        }
        assert_eq!(*follower, Follower::full(&api).await);
    }
    assert!(deltas > 50, "only {deltas} deltas");
    assert!(eager.tenants.len() > 5, "{:?}", eager.tenants.keys());
}

#[sqlx::test(migrations = "../migrations")]
async fn whole_snapshots_where_no_delta_can_be_told(pool: PgPool) {
    let api = Api::new(pool.clone()).await;
    routed_tenant(&api, "alpha", "redis://127.0.0.1:7001").await;
    let old = Follower::full(&api).await;
    routed_tenant(&api, "beta", "redis://127.0.0.1:7002").await;
    let current = api.revision().await;
    let is_full = |reply: &Reply| {
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(reply.body["delta"].is_null(), "{}", reply.body);
        assert_eq!(reply.body["tenants"].as_array().map(Vec::len), Some(2));
    };
    // A gateway that sends no epoch (protocol 1), another epoch, or a revision from elsewhere.
    let asks = [
        format!("after={}", old.revision),
        format!("after={}&epoch=another", old.revision),
        format!("after={}&epoch={}", current + 5, old.epoch),
        format!("epoch={}", old.epoch),
    ];
    for ask in asks {
        is_full(
            &api.gateway("GET", &format!("/v1/snapshot?{ask}"), None)
                .await,
        );
    }

    // Changes older than the history kept: the revisions before them can no longer be told apart.
    let aged = sqlx::query!("UPDATE snapshot_changes SET at = at - interval '8 days'")
        .execute(&pool)
        .await
        .unwrap();
    assert!(aged.rows_affected() > 0);
    assert!(api.state.prune_snapshot_changes().await.unwrap() > 0);
    let ask = format!("/v1/snapshot?after={}&epoch={}", old.revision, old.epoch);
    is_full(&api.gateway("GET", &ask, None).await);
    // From the newest revision pruned on, deltas again.
    let mut follower = Follower::full(&api).await;
    assert_eq!(
        api.put_route("alpha", single("redis://127.0.0.1:7003"))
            .await
            .status,
        200
    );
    assert!(follower.apply(follower.poll(&api).await.expect("a change")));
}

#[sqlx::test(migrations = "../migrations")]
async fn waiting_gateways_share_one_delta(pool: PgPool) {
    let api = Api::new(pool).await;
    routed_tenant(&api, "alpha", "redis://127.0.0.1:7001").await;
    let follower = Follower::full(&api).await;
    let ask = format!(
        "/v1/snapshot?after={}&epoch={}&wait=20s",
        follower.revision, follower.epoch
    );
    let polls: Vec<_> = (0..20)
        .map(|_| {
            let (api, ask) = (api.clone(), ask.clone());
            tokio::spawn(async move { api.gateway("GET", &ask, None).await })
        })
        .collect();
    until_waiting(&api, 20).await;
    assert_eq!(
        api.put_route("alpha", single("redis://127.0.0.1:7002"))
            .await
            .status,
        200
    );
    for poll in polls {
        let reply = poll.await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.body["delta"]["after"], follower.revision);
        assert_eq!(
            reply.body["tenants"][0]["route"],
            single("redis://127.0.0.1:7002")
        );
    }
    assert_eq!(api.state.metrics.deltas_loaded.load(Ordering::Relaxed), 1);
}
