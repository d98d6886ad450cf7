//! A tenant's output buffer limits (`limits.output_buffer_limit`, `limits.pubsub_output_buffer_limit`) and script
//! limit (`limits.script_timeout_ms`): kept through create, patch, show and the audit log, and refused with a 422
//! naming the field when unusable.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{Api, details};

fn buffer(hard_bytes: u64, soft_bytes: u64, soft_seconds: u32) -> Value {
    json!({"hard_bytes": hard_bytes, "soft_bytes": soft_bytes, "soft_seconds": soft_seconds})
}

/// The tenant's audit entries, oldest first, as (action, before's limits, after's limits).
async fn audited_limits(api: &Api, tenant: &str) -> Vec<(String, Value, Value)> {
    let page = api
        .admin("GET", &format!("/v1/audit?tenant={tenant}"), None)
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let mut entries: Vec<_> = page.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_string(),
                e["before"]["limits"].clone(),
                e["after"]["limits"].clone(),
            )
        })
        .collect();
    entries.reverse();
    entries
}

#[sqlx::test(migrations = "../migrations")]
async fn create_patch_show_and_audit(pool: PgPool) {
    let api = Api::new(pool).await;
    let created_limits = json!({
        "max_connections": 10,
        "output_buffer_limit": buffer(536_870_912, 67_108_864, 60),
        "script_timeout_ms": u32::MAX,
    });
    let created = api
        .admin(
            "POST",
            "/v1/tenants",
            Some(json!({"name": "acme", "limits": created_limits})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["limits"], created_limits);
    let shown = api.admin("GET", "/v1/tenants/acme", None).await;
    assert_eq!(shown.body["limits"], created_limits);

    // `limits` replaces all limits, these among them: max_connections and output_buffer_limit go.
    let revision = api.revision().await;
    let patched_limits = json!({
        "pubsub_output_buffer_limit": buffer(33_554_432, 8_388_608, 30),
        "output_buffer_limit": buffer(0, 0, 0),
    });
    let patched = api
        .admin(
            "PATCH",
            "/v1/tenants/acme",
            Some(json!({"limits": patched_limits})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!(
        patched.body["limits"],
        json!({
            "output_buffer_limit": {"hard_bytes": 0, "soft_bytes": 0, "soft_seconds": 0},
            "pubsub_output_buffer_limit": {"hard_bytes": 33_554_432, "soft_bytes": 8_388_608, "soft_seconds": 30},
        })
    );
    assert_eq!(api.revision().await, revision + 1);
    let listed = api.admin("GET", "/v1/tenants", None).await;
    assert_eq!(listed.body["tenants"][0]["limits"], patched_limits);

    // The same limits again change nothing; a patch without `limits` keeps them.
    let same = api
        .admin(
            "PATCH",
            "/v1/tenants/acme",
            Some(json!({"limits": patched_limits})),
        )
        .await;
    assert_eq!(same.status, 200, "{}", same.body);
    assert_eq!(api.revision().await, revision + 1, "an unchanged patch");
    let described = api
        .admin(
            "PATCH",
            "/v1/tenants/acme",
            Some(json!({"description": "kept limits"})),
        )
        .await;
    assert_eq!(described.body["limits"], patched_limits);

    // The largest byte count Postgres' bigint holds is taken and comes back exactly.
    let largest = json!({"output_buffer_limit": buffer(i64::MAX as u64, 0, 0)});
    let at_bound = api
        .admin(
            "PATCH",
            "/v1/tenants/acme",
            Some(json!({"limits": largest})),
        )
        .await;
    assert_eq!(at_bound.status, 200, "{}", at_bound.body);
    assert_eq!(
        api.admin("GET", "/v1/tenants/acme", None).await.body["limits"]["output_buffer_limit"]["hard_bytes"],
        json!(9_223_372_036_854_775_807_u64)
    );

    let cleared = api
        .admin("PATCH", "/v1/tenants/acme", Some(json!({"limits": {}})))
        .await;
    assert_eq!(cleared.body["limits"], json!({}));

    assert_eq!(
        audited_limits(&api, "acme").await,
        vec![
            (
                "tenant.create".to_string(),
                Value::Null,
                created_limits.clone()
            ),
            (
                "tenant.update".to_string(),
                created_limits,
                patched_limits.clone()
            ),
            (
                "tenant.update".to_string(),
                patched_limits.clone(),
                patched_limits
            ),
            (
                "tenant.update".to_string(),
                described.body["limits"].clone(),
                largest.clone()
            ),
            ("tenant.update".to_string(), largest, json!({})),
        ]
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn unusable_limits_are_422s_naming_the_field(pool: PgPool) {
    let api = Api::new(pool).await;
    let kept = json!({"output_buffer_limit": buffer(1024, 512, 10)});
    let created = api
        .admin(
            "POST",
            "/v1/tenants",
            Some(json!({"name": "acme", "limits": kept})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let revision = api.revision().await;

    let soft_without_seconds = (
        json!({"output_buffer_limit": buffer(0, 1024, 0)}),
        vec![
            "/limits/output_buffer_limit/soft_seconds: must be greater than 0 when soft_bytes is not 0: a soft \
             bound needs a duration (soft_bytes 0 turns it off)",
        ],
    );
    let hard_below_soft = (
        json!({"pubsub_output_buffer_limit": buffer(1024, 2048, 60)}),
        vec![
            "/limits/pubsub_output_buffer_limit/hard_bytes: must not be below soft_bytes (2048): the hard bound \
             would close the connection before the soft one could apply (hard_bytes 0 turns it off)",
        ],
    );
    let beyond_bigint = (
        json!({"output_buffer_limit": buffer(i64::MAX as u64 + 1, 0, 0)}),
        vec!["/limits/output_buffer_limit/hard_bytes: must be at most 9223372036854775807"],
    );
    let cases = [
        soft_without_seconds,
        hard_below_soft,
        beyond_bigint,
        (
            json!({"script_timeout_ms": 0}),
            vec!["/limits/script_timeout_ms: must be greater than 0"],
        ),
        (
            json!({"pubsub_output_buffer_limit": buffer(0, u64::MAX, 1)}),
            vec![
                "/limits/pubsub_output_buffer_limit/soft_bytes: must be at most 9223372036854775807",
            ],
        ),
        // Serde's own checks name the field too.
        (
            json!({"output_buffer_limit": {"hard_bytes": -1, "soft_bytes": 0, "soft_seconds": 0}}),
            vec!["/limits/output_buffer_limit/hard_bytes: invalid value: integer, expected u64"],
        ),
        (
            json!({"output_buffer_limit": {"hard_bytes": 0, "soft_bytes": 0}}),
            vec!["/limits/output_buffer_limit: missing field `soft_seconds`"],
        ),
        (
            json!({"output_buffer_limit": buffer(0, 0, 0), "pubsub_output_buffer_limit": "32mb 8mb 60"}),
            vec![
                "/limits/pubsub_output_buffer_limit: invalid type: string, expected struct OutputBufferLimit",
            ],
        ),
    ];
    for (limits, expected) in &cases {
        let patched = api
            .admin("PATCH", "/v1/tenants/acme", Some(json!({"limits": limits})))
            .await;
        assert_eq!(
            (patched.status, patched.error()),
            (422, "invalid"),
            "{limits}"
        );
        assert_eq!(&details(&patched), expected, "PATCH {limits}");
        let posted = api
            .admin(
                "POST",
                "/v1/tenants",
                Some(json!({"name": "beta", "limits": limits})),
            )
            .await;
        assert_eq!(
            (posted.status, posted.error()),
            (422, "invalid"),
            "{limits}"
        );
        assert_eq!(&details(&posted), expected, "POST {limits}");
    }

    // Every problem at once, under one message.
    let several = api
        .admin(
            "POST",
            "/v1/tenants",
            Some(json!({"name": "beta", "limits": {
                "output_buffer_limit": buffer(u64::MAX, 4096, 0),
                "pubsub_output_buffer_limit": buffer(1, 2, 3),
            }})),
        )
        .await;
    assert_eq!(several.status, 422, "{}", several.body);
    assert_eq!(several.body["message"], "the tenant is invalid");
    let paths: Vec<_> = details(&several)
        .iter()
        .map(|d| d.split(": ").next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        paths,
        vec![
            "/limits/output_buffer_limit/hard_bytes",
            "/limits/output_buffer_limit/soft_seconds",
            "/limits/pubsub_output_buffer_limit/hard_bytes",
        ]
    );

    assert_eq!(
        api.revision().await,
        revision,
        "a rejected change moved the revision"
    );
    assert_eq!(api.admin("GET", "/v1/tenants/beta", None).await.status, 404);
    assert_eq!(
        api.admin("GET", "/v1/tenants/acme", None).await.body["limits"],
        kept
    );
}

/// Writes `value` into acme's `column` past the API: "stored", or the name of the constraint that refused it.
async fn store(pool: &PgPool, column: &str, value: Value) -> String {
    let stored = match column {
        "output_buffer_limit" => {
            sqlx::query!(
                "UPDATE tenants SET output_buffer_limit = $1 WHERE name = 'acme'",
                value,
            )
            .execute(pool)
            .await
        }
        "pubsub_output_buffer_limit" => {
            sqlx::query!(
                "UPDATE tenants SET pubsub_output_buffer_limit = $1 WHERE name = 'acme'",
                value,
            )
            .execute(pool)
            .await
        }
        other => panic!("no such limit column: {other}"),
    };
    match stored {
        Ok(_) => "stored".to_string(),
        Err(sqlx::Error::Database(e)) => e.constraint().unwrap_or("?").to_string(),
        Err(other) => panic!("{other}"),
    }
}

/// The database holds the same rules, so no row can hold a limit the API would not take (and every row decodes).
#[sqlx::test(migrations = "../migrations")]
async fn the_database_refuses_what_the_api_refuses(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let pool = &api.state.pool;
    let refused = [
        json!({"hard_bytes": 0, "soft_bytes": 1024, "soft_seconds": 0}),
        json!({"hard_bytes": 1024, "soft_bytes": 2048, "soft_seconds": 1}),
        json!({"hard_bytes": 9_223_372_036_854_775_808_u64, "soft_bytes": 0, "soft_seconds": 0}),
        json!({"hard_bytes": 0, "soft_bytes": 0, "soft_seconds": 4_294_967_296_u64}),
        json!({"hard_bytes": -1, "soft_bytes": 0, "soft_seconds": 0}),
        json!({"hard_bytes": 1.5, "soft_bytes": 0, "soft_seconds": 0}),
        json!({"hard_bytes": "1", "soft_bytes": 0, "soft_seconds": 0}),
        json!({"hard_bytes": 0, "soft_bytes": 0}),
        json!({"hard_bytes": 0, "soft_bytes": 0, "soft_seconds": 0, "extra": 1}),
        json!([0, 0, 0]),
        json!(null),
    ];
    for value in refused {
        assert_eq!(
            store(pool, "output_buffer_limit", value.clone()).await,
            "tenants_output_buffer_limit_valid",
            "{value}"
        );
        assert_eq!(
            store(pool, "pubsub_output_buffer_limit", value.clone()).await,
            "tenants_pubsub_output_buffer_limit_valid",
            "{value}"
        );
    }
    let taken = [
        buffer(0, 0, 0),
        buffer(i64::MAX as u64, i64::MAX as u64, u32::MAX),
        buffer(0, 1024, 1),
        buffer(1024, 0, 0),
    ];
    for value in taken {
        assert_eq!(
            store(pool, "output_buffer_limit", value.clone()).await,
            "stored",
            "{value}"
        );
        let shown = api.admin("GET", "/v1/tenants/acme", None).await;
        assert_eq!(shown.body["limits"]["output_buffer_limit"], value);
    }
}
