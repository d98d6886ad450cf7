//! A control-plane instance in the test process, and helpers to call it.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use switchyard_control_plane::{AppState, Settings, Tokens, router};
use tower::ServiceExt;

pub(crate) const ADMIN: &str = "admin-token-for-tests-0001";
pub(crate) const GATEWAY: &str = "gateway-token-for-tests-01";

/// One control-plane instance: what one replica process would be.
#[derive(Clone)]
pub(crate) struct Api {
    pub(crate) router: Router,
    pub(crate) state: AppState,
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Value,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `error` code of an error body.
    pub(crate) fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or("")
    }
}

impl Api {
    pub(crate) async fn new(pool: PgPool) -> Api {
        let tokens = Tokens::new(&[ADMIN.to_string()], &[GATEWAY.to_string()]).unwrap();
        let state = AppState::new(pool, tokens, Settings::default())
            .await
            .unwrap();
        Api {
            router: router(state.clone()),
            state,
        }
    }

    /// Another replica over the same database, with its own pool and its own LISTEN connection.
    pub(crate) async fn replica(pool: &PgPool) -> Api {
        let options = (*pool.connect_options()).clone();
        let own = PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .unwrap();
        Api::new(own).await
    }

    pub(crate) async fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<Body>,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .header("content-type", "application/json")
            .body(body.unwrap_or_else(Body::empty))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    /// An admin call with an optional JSON body.
    pub(crate) async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        self.admin_with(method, path, &[], body).await
    }

    pub(crate) async fn admin_with(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Reply {
        let body = body.map(|b| Body::from(b.to_string()));
        self.request(method, path, Some(ADMIN), headers, body).await
    }

    pub(crate) async fn gateway(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        let body = body.map(|b| Body::from(b.to_string()));
        self.request(method, path, Some(GATEWAY), &[], body).await
    }

    /// The current global revision, as the database has it.
    pub(crate) async fn revision(&self) -> i64 {
        sqlx::query_scalar!("SELECT value FROM revision")
            .fetch_one(&self.state.pool)
            .await
            .unwrap()
    }

    pub(crate) async fn create_tenant(&self, name: &str) {
        let reply = self
            .admin("POST", "/v1/tenants", Some(json!({"name": name})))
            .await;
        assert_eq!(reply.status, 201, "{}", reply.body);
    }

    pub(crate) async fn create_resource(&self, name: &str, url: &str) {
        let reply = self
            .admin(
                "POST",
                "/v1/resources",
                Some(json!({"name": name, "url": url})),
            )
            .await;
        assert_eq!(reply.status, 201, "{}", reply.body);
    }

    /// Puts a route with `force`: these tests are about what the control plane stores and serves, with routes
    /// to addresses where nothing listens and changes that move keys; the guard has tests of its own
    /// (`guard.rs`), which put routes without it.
    pub(crate) async fn put_route(&self, tenant: &str, route: Value) -> Reply {
        self.admin(
            "PUT",
            &format!("/v1/tenants/{tenant}/route"),
            Some(json!({"route": route, "comment": "test", "force": true})),
        )
        .await
    }

    /// Creates an API token (`body`: `name`, `role` and the rest of `POST /v1/tokens`); returns (id, token).
    pub(crate) async fn create_token(&self, body: Value) -> (i64, String) {
        let reply = self.admin("POST", "/v1/tokens", Some(body)).await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        (
            reply.body["id"].as_i64().unwrap(),
            reply.body["token"].as_str().unwrap().to_string(),
        )
    }

    /// A call with `token` and an optional JSON body.
    pub(crate) async fn with_token(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        let body = body.map(|b| Body::from(b.to_string()));
        self.request(method, path, Some(token), &[], body).await
    }

    /// Issues a credential and returns (id, secret).
    pub(crate) async fn issue_credential(&self, tenant: &str) -> (i64, String) {
        let reply = self
            .admin(
                "POST",
                &format!("/v1/tenants/{tenant}/credentials"),
                Some(json!({})),
            )
            .await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        (
            reply.body["id"].as_i64().unwrap(),
            reply.body["secret"].as_str().unwrap().to_string(),
        )
    }
}

/// Asserts the JSON error shape and returns the details as "path: message" lines.
pub(crate) fn details(reply: &Reply) -> Vec<String> {
    assert!(reply.body["error"].is_string(), "{}", reply.body);
    assert!(reply.body["message"].is_string(), "{}", reply.body);
    reply.body["details"]
        .as_array()
        .unwrap_or_else(|| panic!("no details: {}", reply.body))
        .iter()
        .map(|d| {
            format!(
                "{}: {}",
                d["path"].as_str().unwrap(),
                d["message"].as_str().unwrap()
            )
        })
        .collect()
}

pub(crate) fn single(target: &str) -> Value {
    json!({"type": "single", "target": target})
}
