//! `switchyard-ctl import` (many tenants in one change, `/v1/import`) and `switchyard-ctl health` (`/healthz`).

use std::path::Path;

use reqwest::Method;
use switchyard_schemas::api::Import;

use crate::client::{Call, Outcome};
use crate::output::{self, View};
use crate::session::{Change, Session, read_json};

/// Creates every tenant of `file` (a `POST /v1/import` body) in one revision, all or nothing.
pub(crate) async fn import(session: &Session, file: &Path) -> Outcome {
    let body: Import = read_json(file)?;
    let call = Call::new(Method::POST, "/v1/import").body(serde_json::to_value(body)?);
    let view = View::Text(|body| {
        let mut text = format!(
            "imported at revision {}\n",
            output::cell(body.get("revision"))
        );
        for tenant in body["tenants"].as_array().into_iter().flatten() {
            text.push_str(&format!(
                "tenant {}\n",
                output::cell(tenant.pointer("/tenant/name"))
            ));
            for credential in tenant["credentials"].as_array().into_iter().flatten() {
                if let Some(secret) = credential.get("secret").and_then(|s| s.as_str()) {
                    text.push_str(&format!(
                        "  credential {}: {secret}\n",
                        output::cell(credential.get("id"))
                    ));
                }
            }
        }
        text
    });
    session.change(Change::new(call, view)).await.map(drop)
}

pub(crate) async fn health(session: &Session) -> Outcome {
    let view = View::one(&[("STATUS", "/status"), ("REVISION", "/revision")]);
    session.show(Call::get("/healthz"), &view).await
}
