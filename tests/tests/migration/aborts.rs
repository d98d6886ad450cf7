//! Aborting a migration at each step, from cut_over through the rollback that repairs old from new.

use std::time::Duration;

use serde_json::json;
use switchyard_schemas::RouteTable;
use switchyard_schemas::placement::Placement;
use switchyard_tests::{ControlPlane, RedisServer, connect};

use super::harness::*;

/// Writes `count` string keys through the gateway and to the reference.
async fn write_some(stack: &Stack, reference: &RedisServer, tag: &str, count: usize) {
    let mut through = stack.gateway.client(Some(&stack.secret)).await;
    let mut reference = connect(&reference.url()).await;
    for i in 0..count {
        let command = redis::cmd("SET").arg(format!("w:{tag}:{i}")).arg(i).clone();
        let _: () = command.query_async(&mut through).await.unwrap();
        let _: () = command.query_async(&mut reference).await.unwrap();
    }
}

/// Reports, as a gateway of its own, that its repair owes the old deployment `pending` keys of the tenant.
async fn owe_old(cp: &ControlPlane, pending: u64) {
    let report = json!({"gateway": "gw-behind", "interval_ms": 10000, "tenants": [], "divergence": [
        {"tenant": "acme", "resource": "old", "samples": 0, "differing": 0, "pending": pending,
         "catching_up": false, "repaired": 0}]});
    let response = reqwest::Client::new()
        .post(format!("{}/v1/gateways/observations", cp.url()))
        .bearer_auth(cp.gateway_token())
        .json(&report)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
}

/// Abort at every step returns the tenant to the old deployment with all its data, the writes made during the
/// migration included (from cut_over, also those old missed as the secondary), and deletes nothing on new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_at_each_step_leaves_old_serving_everything() {
    let old = RedisServer::start();
    let reference = RedisServer::start();
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let stack = Stack::start(&old).await;
    populate(
        &mut [connect(&old.url()).await, connect(&reference.url()).await],
        600,
    )
    .await;
    let old_route = stack
        .cp
        .expect("GET", "/v1/tenants/acme/route", None, 200)
        .await["route"]
        .clone();
    for (n, abort_in) in ["double_write", "backfilled", "verified", "cut_over"]
        .into_iter()
        .enumerate()
    {
        let id = stack.create(two_shards(&a, &b), "all", json!({})).await;
        stack.wait_converged(id).await;
        let steps: &[(&str, &str)] = match abort_in {
            "double_write" => &[],
            "backfilled" => &[("backfill", "backfilled")],
            "verified" => &[("backfill", "backfilled"), ("verify", "verified")],
            _ => &[
                ("backfill", "backfilled"),
                ("verify", "verified"),
                ("cutover", "cut_over"),
            ],
        };
        for (action, state) in steps {
            stack.step(id, action).await;
            stack.wait_state(id, state).await;
        }
        stack.wait_converged(id).await;
        write_some(&stack, &reference, abort_in, 50).await;
        // The gateway double-wrote each key to the shard the table's placement names (the one backfill and
        // verify use), and only there.
        let placement = match serde_json::from_value(two_shards(&a, &b)).unwrap() {
            RouteTable::Sharded { hash, shards, .. } => Placement::new(&hash, &shards),
            _ => unreachable!(),
        };
        for i in 0..50 {
            let k = format!("w:{abort_in}:{i}");
            let owner = placement.shard_of(k.as_bytes());
            for (shard, server) in [&a, &b].into_iter().enumerate() {
                let exists: bool = redis::cmd("EXISTS")
                    .arg(&k)
                    .query(&mut server.client())
                    .unwrap();
                assert_eq!(
                    exists,
                    shard == owner,
                    "{k} on shard {shard} (owner {owner})"
                );
            }
        }
        if abort_in == "cut_over" {
            // Old, the secondary since cutover, misses writes no record will bring back (a write that failed
            // there on a gateway that restarted since, a restore from an older snapshot): a lost write, a stale
            // value, a key the tenant deleted. The rollback repairs old from new before returning to it.
            let mut old_con = old.client();
            let _: () = redis::pipe()
                .cmd("DEL")
                .arg("w:cut_over:1")
                .cmd("SET")
                .arg("w:cut_over:2")
                .arg("stale")
                .cmd("SET")
                .arg("w:cut_over:deleted")
                .arg("x")
                .query(&mut old_con)
                .unwrap();
        }
        let new_before = contents(&mut [a.client(), b.client()]);
        if abort_in == "cut_over" {
            // Another gateway's repair still owes old three keys, as its latest report says.
            owe_old(&stack.cp, 3).await;
        }
        let aborted = stack.step(id, "abort").await;
        let aborted = match abort_in {
            "cut_over" => {
                assert_eq!(aborted["state"], "rolling_back", "{aborted}");
                // The task has repaired old, and the route waits for the gateways' repair.
                let waiting = stack
                    .wait(id, |m| {
                        m["progress"]["rollback"]["gateway_repair"]["pending"] == 3
                    })
                    .await;
                assert_eq!(waiting["state"], "rolling_back", "{waiting}");
                tokio::time::sleep(Duration::from_secs(2)).await;
                assert_eq!(stack.migration(id).await["state"], "rolling_back");
                owe_old(&stack.cp, 0).await;
                let done = stack.wait_state(id, "aborted").await;
                let rollback = &done["progress"]["rollback"];
                assert_eq!(
                    (&rollback["repaired"], &rollback["removed"]),
                    (&json!(2), &json!(1)),
                    "{done}"
                );
                assert_eq!(rollback["gateway_repair"]["pending"], 0, "{done}");
                done
            }
            _ => aborted,
        };
        assert_eq!(aborted["state"], "aborted", "{aborted}");
        stack.wait_converged(id).await;
        // A finished or aborted migration takes no more steps.
        let (status, body) = stack
            .cp
            .call(
                "POST",
                &format!("/v1/tenants/acme/migrations/{id}/backfill"),
                None,
            )
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (409, Some("migration_state"))
        );

        let route = stack
            .cp
            .expect("GET", "/v1/tenants/acme/route", None, 200)
            .await;
        assert_eq!(route["route"], old_route, "abort in {abort_in}");
        assert_same(
            &contents(&mut [reference.client()]),
            &contents(&mut [old.client()]),
            abort_in,
        );
        // Served from old again: a key written during the migration reads back through the gateway.
        let mut through = stack.gateway.client(Some(&stack.secret)).await;
        let value: String = redis::cmd("GET")
            .arg(format!("w:{abort_in}:7"))
            .query_async(&mut through)
            .await
            .unwrap();
        assert_eq!(value, "7");
        // Nothing was deleted on the new side either.
        let new_after = contents(&mut [a.client(), b.client()]);
        assert!(
            new_before.keys().all(|k| new_after.contains_key(k)),
            "abort in {abort_in} deleted keys"
        );
        assert_eq!(
            stack
                .cp
                .expect("GET", "/v1/tenants/acme/migrations", None, 200)
                .await["migrations"]
                .as_array()
                .unwrap()
                .len(),
            n + 1
        );
    }
}
