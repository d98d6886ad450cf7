//! `/v1/tenants/{tenant}/route`

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{Api, details, single};

#[sqlx::test(migrations = "../migrations")]
async fn versions_history_and_rollback(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    api.create_resource("main", "redis://127.0.0.1:6379").await;
    let none = api.admin("GET", "/v1/tenants/acme/route", None).await;
    assert_eq!(none.status, 404);

    let revision = api.revision().await;
    let first = api.put_route("acme", single("main")).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["version"], 1);
    assert_eq!(first.body["revision"], revision + 1);
    assert!(first.body["author"].as_str().unwrap().starts_with("admin:"));
    assert_eq!(first.header("etag"), Some("\"1\""));

    let current = api.admin("GET", "/v1/tenants/acme/route", None).await;
    assert_eq!(current.status, 200);
    assert_eq!(current.header("etag"), Some("\"1\""));
    assert_eq!(current.body["route"], single("main"));
    assert_eq!(current.body["comment"], "test");
    assert!(current.body["created_at"].is_string());

    let sharded = json!({"type": "sharded", "hash": {"algorithm": "crc16", "buckets": 2}, "shards": [
        {"name": "a", "target": "main", "buckets": ["0"]},
        {"name": "b", "target": "redis://127.0.0.1:6380", "buckets": ["1"]}]});
    let second = api
        .admin_with(
            "PUT",
            "/v1/tenants/acme/route",
            &[("if-match", "\"1\"")],
            Some(json!({"route": sharded, "force": true})),
        )
        .await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(second.body["version"], 2);
    let tenant = api.admin("GET", "/v1/tenants/acme", None).await;
    assert_eq!(tenant.body["route_version"], 2);

    let one = api
        .admin("GET", "/v1/tenants/acme/route/versions/1", None)
        .await;
    assert_eq!(one.body["route"], single("main"));
    assert_eq!(
        api.admin("GET", "/v1/tenants/acme/route/versions/9", None)
            .await
            .status,
        404
    );
    assert_eq!(
        api.admin("GET", "/v1/tenants/acme/route/versions/x", None)
            .await
            .status,
        400
    );

    let rolled = api
        .admin(
            "POST",
            "/v1/tenants/acme/route/rollback",
            Some(json!({"version": 1, "force": true})),
        )
        .await;
    assert_eq!(rolled.status, 200, "{}", rolled.body);
    assert_eq!(rolled.body["version"], 3);
    assert_eq!(rolled.body["route"], single("main"));
    assert_eq!(rolled.body["comment"], "rollback to version 1");
    let missing = api
        .admin(
            "POST",
            "/v1/tenants/acme/route/rollback",
            Some(json!({"version": 7})),
        )
        .await;
    assert_eq!(missing.status, 404);

    let page = api
        .admin("GET", "/v1/tenants/acme/route/versions?limit=2", None)
        .await;
    let versions: Vec<i64> = page.body["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_i64().unwrap())
        .collect();
    assert_eq!(versions, vec![3, 2]);
    assert_eq!(page.body["next_before"], 2);
    let rest = api
        .admin(
            "GET",
            "/v1/tenants/acme/route/versions?limit=2&before=2",
            None,
        )
        .await;
    assert_eq!(rest.body["versions"][0]["version"], 1);
    assert_eq!(rest.body["next_before"], Value::Null);
    assert_eq!(
        api.admin("GET", "/v1/tenants/acme/route/versions?limit=0", None)
            .await
            .status,
        400
    );

    // Versions are immutable in the database too.
    let update = sqlx::query!("UPDATE route_versions SET comment = 'x'")
        .execute(&api.state.pool)
        .await;
    assert!(update.is_err());
}

#[sqlx::test(migrations = "../migrations")]
async fn invalid_tables_are_422_with_pointers(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let revision = api.revision().await;

    let semantic = api
        .put_route(
            "acme",
            json!({"type": "sharded", "hash": {"algorithm": "camellia", "buckets": 2}, "shards": [
                {"name": "a", "target": "nowhere", "buckets": ["0"]},
                {"name": "a", "target": "redis://127.0.0.1:1", "buckets": ["1"]}]}),
        )
        .await;
    assert_eq!(semantic.status, 422, "{}", semantic.body);
    assert_eq!(
        details(&semantic),
        vec![
            "/route/shards/0/target: unknown resource 'nowhere'",
            "/route/shards/1/name: duplicate shard name 'a'",
        ]
    );

    let schema = api
        .put_route(
            "acme",
            json!({"type": "sharded", "shards": [{"name": "a", "target": "m", "weight": -1}]}),
        )
        .await;
    assert_eq!(schema.status, 422);
    let lines = details(&schema);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("/route/shards/0/weight: "),
        "{lines:?}"
    );

    let unknown_type = api.put_route("acme", json!({"type": "mirrored"})).await;
    assert_eq!(unknown_type.status, 422);
    assert_eq!(
        details(&unknown_type),
        vec![
            "/route/type: unknown route type 'mirrored', expected one of: single, sharded, double_write"
        ]
    );

    let no_route = api
        .admin(
            "PUT",
            "/v1/tenants/acme/route",
            Some(json!({"comment": "x"})),
        )
        .await;
    assert_eq!(no_route.status, 422);
    assert_eq!(details(&no_route), vec![": missing field `route`"]);

    let not_json = api
        .request(
            "PUT",
            "/v1/tenants/acme/route",
            Some(crate::common::ADMIN),
            &[],
            Some("[".into()),
        )
        .await;
    assert_eq!(not_json.status, 400);

    let no_tenant = api.put_route("nobody", single("redis://127.0.0.1:1")).await;
    assert_eq!(no_tenant.status, 404);

    let bad_if_match = api
        .admin_with(
            "PUT",
            "/v1/tenants/acme/route",
            &[("if-match", "soon")],
            Some(json!({"route": single("redis://127.0.0.1:1")})),
        )
        .await;
    assert_eq!(bad_if_match.status, 400);

    assert_eq!(
        api.revision().await,
        revision,
        "a rejected change moved the revision"
    );
}

/// A table whose numbers would size memory beyond reason is refused before anything is allocated by them (2^32 - 1
/// buckets used to allocate 64 GiB and abort the process).
#[sqlx::test(migrations = "../migrations")]
async fn numbers_that_size_memory_are_bounded(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let revision = api.revision().await;

    let buckets = api
        .put_route(
            "acme",
            json!({"type": "sharded", "hash": {"algorithm": "crc16", "buckets": 4_294_967_295_u32},
                "shards": [{"name": "a", "target": "redis://127.0.0.1:1", "buckets": ["0-4294967294"]}]}),
        )
        .await;
    assert_eq!(buckets.status, 422, "{}", buckets.body);
    assert_eq!(
        details(&buckets),
        vec!["/route/hash/buckets: must be at most 65536"]
    );

    let weights = api
        .put_route(
            "acme",
            json!({"type": "sharded", "shards": [
                {"name": "a", "target": "redis://127.0.0.1:1", "weight": 4_294_967_295_u32},
                {"name": "b", "target": "redis://127.0.0.1:2"}]}),
        )
        .await;
    assert_eq!(weights.status, 422, "{}", weights.body);
    assert_eq!(
        details(&weights),
        vec!["/route/shards: the shards' weights add up to 4294967296; at most 1024 is allowed"]
    );
    assert_eq!(api.revision().await, revision);
}

#[sqlx::test(migrations = "../migrations")]
async fn if_match_lets_exactly_one_of_two_racing_admins_win(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    assert_eq!(
        api.put_route("acme", single("redis://127.0.0.1:1"))
            .await
            .status,
        200
    );
    let stale = api
        .admin_with(
            "PUT",
            "/v1/tenants/acme/route",
            &[("if-match", "0")],
            Some(json!({"route": single("redis://127.0.0.1:2")})),
        )
        .await;
    assert_eq!((stale.status, stale.error()), (412, "precondition_failed"));
    assert_eq!(stale.header("etag"), Some("\"1\""));

    for round in 0..5 {
        let version = (round + 1).to_string();
        let body = |port: u16| {
            Some(json!({"route": single(&format!("redis://127.0.0.1:{port}")), "force": true}))
        };
        let revision = api.revision().await;
        let headers = [("if-match", version.as_str())];
        let (a, b) = tokio::join!(
            api.admin_with("PUT", "/v1/tenants/acme/route", &headers, body(10)),
            api.admin_with("PUT", "/v1/tenants/acme/route", &headers, body(20)),
        );
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 412], "{} / {}", a.body, b.body);
        assert_eq!(api.revision().await, revision + 1);
    }
    let current = api.admin("GET", "/v1/tenants/acme/route", None).await;
    assert_eq!(current.body["version"], 6);
}

#[sqlx::test(migrations = "../migrations")]
async fn explain_places_keys_like_the_gateways(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    api.create_resource("main", "redis://127.0.0.1:6379").await;
    let missing = api
        .admin("GET", "/v1/tenants/acme/route/explain?key=k", None)
        .await;
    assert_eq!(missing.status, 404, "{}", missing.body);

    let sharded = json!({"type": "sharded", "hash": {"algorithm": "crc16", "buckets": 16384}, "shards": [
        {"name": "a", "target": "main", "buckets": ["0-8191"]},
        {"name": "b", "target": {"read": {"resources": ["redis://:pw@127.0.0.1:6381"], "policy": "ordered"},
                                  "write": {"resources": ["redis://127.0.0.1:6380", "main"], "ack": "all"}},
         "buckets": ["8192-16383"]}]});
    assert_eq!(api.put_route("acme", sharded.clone()).await.status, 200);
    let placement = match serde_json::from_value::<switchyard_schemas::RouteTable>(sharded).unwrap()
    {
        switchyard_schemas::RouteTable::Sharded { hash, shards, .. } => {
            switchyard_schemas::placement::Placement::new(&hash, &shards)
        }
        _ => unreachable!(),
    };
    for key in ["foo", "bar", "{user1}.x", "user1"] {
        let answer = api
            .admin(
                "GET",
                &format!(
                    "/v1/tenants/acme/route/explain?key={}",
                    key.replace('{', "%7B").replace('}', "%7D")
                ),
                None,
            )
            .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let shard = ["a", "b"][placement.shard_of(key.as_bytes())];
        assert_eq!(answer.body["shard"], shard, "{key}");
        assert_eq!(answer.body["key"], key);
        let slot = switchyard_schemas::placement::bucket_of(
            switchyard_schemas::placement::BucketHash::Crc16,
            key.as_bytes(),
            16384,
        );
        assert_eq!(answer.body["bucket"], slot, "{key}: the Redis Cluster slot");
        assert_eq!(answer.body["ring_point"], json!(null));
        assert_eq!(answer.body["writes"][0]["table"], "route");
        assert_eq!(answer.body["writes"][0]["bucket"], slot);
        assert_eq!(answer.body["writes"].as_array().map(Vec::len), Some(1));
        if shard == "b" {
            assert_eq!(
                answer.body["read"],
                json!(["redis://:***@127.0.0.1:6381"]),
                "passwords never shown"
            );
            assert_eq!(
                answer.body["write"],
                json!(["redis://127.0.0.1:6380", "main"])
            );
            assert_eq!(answer.body["ack"], "all");
            assert_eq!(answer.body["read_policy"], "ordered");
        }
    }
    let no_key = api
        .admin("GET", "/v1/tenants/acme/route/explain", None)
        .await;
    assert_eq!(no_key.status, 400, "{}", no_key.body);

    // Several keys at once: the same answers, in the order asked.
    let keys = ["foo", "bar", "{user1}.x"];
    let many = api
        .admin(
            "POST",
            "/v1/tenants/acme/route/explain",
            Some(json!({"keys": keys})),
        )
        .await;
    assert_eq!(many.status, 200, "{}", many.body);
    for (i, key) in keys.iter().enumerate() {
        let one = api
            .admin(
                "GET",
                &format!(
                    "/v1/tenants/acme/route/explain?key={}",
                    key.replace('{', "%7B").replace('}', "%7D")
                ),
                None,
            )
            .await;
        assert_eq!(many.body["explanations"][i], one.body, "{key}");
    }
    let none = api
        .admin(
            "POST",
            "/v1/tenants/acme/route/explain",
            Some(json!({"keys": []})),
        )
        .await;
    assert_eq!(none.status, 422, "{}", none.body);
}

/// A double-write route (what a migration installs) writes each key to its place in both tables: explain shows
/// both, each placed by its own sharding; the ring shows the key's point instead of a bucket.
#[sqlx::test(migrations = "../migrations")]
async fn explain_shows_every_write_target(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let ring = json!({"type": "sharded", "shards": [
        {"name": "r1", "target": "redis://127.0.0.1:7001"}, {"name": "r2", "target": "redis://127.0.0.1:7002"}]});
    let route = json!({"type": "double_write", "ack": "all",
        "primary": {"type": "single", "target": "redis://127.0.0.1:7000"},
        "secondary": ring.clone()});
    assert_eq!(api.put_route("acme", route).await.status, 200);
    let placement = match serde_json::from_value::<switchyard_schemas::RouteTable>(ring).unwrap() {
        switchyard_schemas::RouteTable::Sharded { hash, shards, .. } => {
            switchyard_schemas::placement::Placement::new(&hash, &shards)
        }
        _ => unreachable!(),
    };
    for key in ["a", "b", "c", "d"] {
        let answer = api
            .admin(
                "GET",
                &format!("/v1/tenants/acme/route/explain?key={key}"),
                None,
            )
            .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let body = &answer.body;
        assert_eq!(body["write"], json!(["redis://127.0.0.1:7000"]));
        assert_eq!(body["ack"], "all");
        assert_eq!(body["shard"], json!(null));
        let shard = ["r1", "r2"][placement.shard_of(key.as_bytes())];
        let port = if shard == "r1" { 7001 } else { 7002 };
        assert_eq!(body["writes"][0]["table"], "primary", "{body}");
        assert_eq!(body["writes"][1]["table"], "secondary");
        assert_eq!(body["writes"][1]["shard"], shard, "{key}");
        assert_eq!(
            body["writes"][1]["write"],
            json!([format!("redis://127.0.0.1:{port}")])
        );
        assert_eq!(body["writes"][1]["bucket"], json!(null));
        let switchyard_schemas::placement::KeyPoint::Ring { hash, point } =
            placement.point_of(key.as_bytes())
        else {
            panic!("a ring places by points");
        };
        assert_eq!(
            body["writes"][1]["ring_point"],
            json!({"hash": format!("{hash:016x}"), "point": format!("{point:016x}")})
        );
        assert!(hash <= point);
    }
}
