//! `POST /v1/import`: onboards many tenants (with credentials, limits and routes) in one change.
//!
//! Onboarding N tenants one endpoint at a time is 3N changes: 3N revisions, 3N audit entries and up to 3N
//! snapshots rebuilt for the gateways. An import is one transaction, one revision and one audit entry, and it is
//! all or nothing: a broken tenant leaves no half-imported population behind. Each part is checked by the code
//! of the endpoint that would otherwise take it, and its errors are moved under the part's place in the body
//! (`/tenants/3/credentials/0/password`).

use std::collections::HashMap;

use axum::extract::DefaultBodyLimit;
use axum::http::{Method, StatusCode};
use axum::routing::post;
use axum::{Extension, Json, extract::State};
use serde_json::{Value, json};
use switchyard_schemas::api::{
    CredentialIssued, ErrorDetail, Import, ImportResult, RouteVersion, TenantImported,
};

use crate::api::credentials::digest_of;
use crate::api::routes::NewVersion;
use crate::api::tenants::check_tenant;
use crate::auth::Access;
use crate::db;
use crate::db::audit::{Actor, AuditRecord};
use crate::db::change::Change;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, from_value};
use crate::openapi::Operation;
use crate::route_schema;
use crate::state::AppState;
use switchyard_schemas::policy::overlapping_namespaces;

/// An import body may be far larger than any other request (about 200 bytes a tenant): this admits some
/// 300,000 tenants at once, while still bounding what one request can make the control plane hold.
const MAX_IMPORT_BYTES: usize = 64 << 20;

/// At most this many problems are listed in one 422: enough to fix a batch, not a reply as large as the body.
const MAX_PROBLEMS: usize = 100;

pub(crate) fn operations() -> Vec<Operation> {
    vec![
        Operation::new(
            "importTenants",
            Method::POST,
            "/v1/import",
            "Create many tenants with their credentials, limits and routes, in one revision, all or nothing",
            Access::Change,
            post(import).layer(DefaultBodyLimit::max(MAX_IMPORT_BYTES)),
        )
        .request::<Import>()
        .example(serde_json::json!({"tenants": [{"tenant": {"name": "shop"}, "credentials": [{}],
            "route": {"type": "single", "target": "main"}, "comment": "onboarded"}]}))
        .reply::<ImportResult>(201)
        .errors(&[409]),
    ]
}

/// `error`, about a part of the body checked on its own, moved to where that part is in the import: a 422's
/// paths, a 409's message.
fn nested(error: ApiError, at: &str) -> ApiError {
    match error {
        ApiError::Conflict { code, message } => ApiError::Conflict {
            code,
            message: format!("{at}: {message}"),
        },
        ApiError::Unprocessable { message, details } => {
            let details: Vec<ErrorDetail> = details
                .into_iter()
                .map(|d| ErrorDetail {
                    path: format!("{at}{}", d.path),
                    message: d.message,
                })
                .collect();
            ApiError::invalid_all(&message, details)
        }
        other => other,
    }
}

/// Collects the 422 problems of one check; any other error ends the request.
fn gather(problems: &mut Vec<ErrorDetail>, checked: ApiResult<()>, at: &str) -> ApiResult<()> {
    match checked.map_err(|e| nested(e, at)) {
        Err(ApiError::Unprocessable { details, .. }) => {
            problems.extend(details);
            Ok(())
        }
        other => other,
    }
}

/// Everything that can be checked without the database, for every tenant, so one 422 lists every problem
/// (up to [`MAX_PROBLEMS`]) instead of the first. Route tables are checked against their schema before the
/// body is deserialized, as `PUT .../route` does, for exact paths.
fn check(body: Value) -> ApiResult<Import> {
    let mut problems = Vec::new();
    let routes = body["tenants"].as_array().into_iter().flatten();
    for (i, route) in routes
        .enumerate()
        .filter_map(|(i, t)| Some((i, t.get("route")?)))
    {
        gather(
            &mut problems,
            route_schema::check(route, ""),
            &format!("/tenants/{i}/route"),
        )?;
    }
    problems.truncate(MAX_PROBLEMS);
    let import: Import = if problems.is_empty() {
        from_value(body)?
    } else {
        return Err(ApiError::invalid_all("the import is invalid", problems));
    };
    // An empty import would be a revision that changes nothing.
    if import.tenants.is_empty() {
        return Err(ApiError::invalid(
            "/tenants",
            "must list at least one tenant",
        ));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, entry) in import.tenants.iter().enumerate() {
        if let Some(first) = seen.insert(entry.tenant.name.as_str(), i) {
            problems.push(ErrorDetail {
                path: format!("/tenants/{i}/tenant/name"),
                message: format!("tenant {first} of this import has the same name"),
            });
        }
        let checked = check_tenant(&entry.tenant.limits, &entry.tenant.policy());
        gather(&mut problems, checked, &format!("/tenants/{i}/tenant"))?;
    }
    let overlaps = overlapping_namespaces(namespaces(&import));
    problems.extend(overlaps.into_iter().map(|e| ErrorDetail {
        path: e.path,
        message: e.message,
    }));
    problems.truncate(MAX_PROBLEMS);
    if problems.is_empty() {
        Ok(import)
    } else {
        Err(ApiError::invalid_all("the import is invalid", problems))
    }
}

/// The namespaces of an import, each with the path of its field.
fn namespaces(import: &Import) -> impl Iterator<Item = (String, &str)> {
    import.tenants.iter().enumerate().filter_map(|(i, entry)| {
        let namespace = entry.tenant.namespace.as_deref()?;
        Some((format!("/tenants/{i}/tenant/namespace"), namespace))
    })
}

/// Refuses an import whose namespaces overlap existing tenants' (those of the import were checked already),
/// under the revision lock as `tenants::check_namespace`.
async fn check_existing_namespaces(change: &mut Change, import: &Import) -> ApiResult<()> {
    if namespaces(import).next().is_none() {
        return Ok(());
    }
    change.revision().await?;
    let existing = db::tenants::namespaces(change.conn()).await?;
    let labelled = existing
        .iter()
        .map(|(name, namespace)| (format!("tenant '{name}'"), namespace.as_str()));
    let overlaps = overlapping_namespaces(labelled.chain(namespaces(import)));
    match overlaps.first() {
        None => Ok(()),
        Some(first) => Err(ApiError::Conflict {
            code: "namespace_overlaps",
            message: format!(
                "{} namespace(s) overlap existing tenants'; the first: {first}",
                overlaps.len()
            ),
        }),
    }
}

async fn import(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<(StatusCode, Json<ImportResult>)> {
    let import = check(body)?;
    let mut change = Change::begin(&state.pool).await?;
    check_existing_namespaces(&mut change, &import).await?;
    let mut imported = Vec::with_capacity(import.tenants.len());
    for (i, entry) in import.tenants.into_iter().enumerate() {
        let at = format!("/tenants/{i}");
        let row = db::tenants::insert(change.conn(), &entry.tenant)
            .await
            .map_err(|e| nested(e.into(), &format!("{at}/tenant")))?;
        let mut credentials = Vec::with_capacity(entry.credentials.len());
        for (j, request) in entry.credentials.iter().enumerate() {
            let at = format!("{at}/credentials/{j}");
            let (digest, secret) = digest_of(request).map_err(|e| nested(e, &at))?;
            let credential = db::credentials::insert(
                change.conn(),
                row.id,
                &digest,
                &request.description,
                secret.is_none(),
            )
            .await
            .map_err(|e| nested(e.into(), &at))?
            .into();
            credentials.push(CredentialIssued { credential, secret });
        }
        let mut tenant = row.to_api();
        let route = match entry.route {
            Some(route) => {
                let version = NewVersion {
                    tenant: &tenant.name,
                    expected: None,
                    route,
                    comment: entry.comment,
                    action: "import",
                    error_prefix: "",
                };
                let (_, created, _) = version
                    .append(&mut change, row.id, &actor)
                    .await
                    .map_err(|e| nested(e, &format!("{at}/route")))?;
                tenant.route_version = Some(created.version);
                Some(created)
            }
            None => None,
        };
        imported.push(TenantImported {
            tenant,
            credentials,
            route,
        });
    }
    let record = AuditRecord::new(
        "import",
        None,
        "import".to_string(),
        None::<&Value>,
        Some(&summary(&imported)),
    );
    let revision = state.commit(change, &actor, record).await?;
    Ok((
        StatusCode::CREATED,
        Json(ImportResult {
            revision,
            tenants: imported,
        }),
    ))
}

/// What the audit log keeps of an import: each tenant as its own create would record it, its credentials
/// (never a secret) and its route version.
fn summary(imported: &[TenantImported]) -> Value {
    let tenants: Vec<Value> = imported
        .iter()
        .map(|t| {
            json!({
                "tenant": t.tenant,
                "credentials": t.credentials.iter().map(|c| &c.credential).collect::<Vec<_>>(),
                "route": t.route.as_ref().map(|r: &RouteVersion| &r.route),
            })
        })
        .collect();
    json!({ "tenants": tenants })
}
