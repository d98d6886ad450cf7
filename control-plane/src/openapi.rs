//! [`Operation`], how an endpoint is declared, and the OpenAPI 3.1 document built from a list of them.
//!
//! Each `api/` file lists its endpoints as [`Operation`]s: handler, access, and the Rust types of the bodies.
//! The router is built from the same list, so the document cannot name an endpoint that is not served or miss
//! one that is. Body schemas come from the `schemars::JsonSchema` types of `switchyard-schemas` (the same ones
//! the committed JSON Schema files are generated from), so there is one description of each payload.

use std::collections::BTreeMap;

use axum::http::Method;
use axum::routing::MethodRouter;
use schemars::JsonSchema;
use schemars::r#gen::{SchemaGenerator, SchemaSettings};
use schemars::schema::Schema;
use serde_json::{Map, Value, json};
use switchyard_schemas::api::ErrorBody;

use crate::auth::Access;
use crate::state::AppState;

type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

struct Parameter {
    place: &'static str,
    name: &'static str,
    description: &'static str,
    kind: &'static str,
}

/// A path parameter that takes one of a few words.
struct PathEnum {
    name: &'static str,
    description: &'static str,
    values: &'static [&'static str],
}

/// The groups operations are tagged with (one per `api/` file), in the order the document lists them.
pub(crate) const TAGS: &[(&str, &str)] = &[
    ("tenants", "Tenants: flags, limits and policies"),
    (
        "credentials",
        "The passwords and client certificates of a tenant's clients",
    ),
    ("resources", "Named backend deployments routes refer to"),
    ("routes", "A tenant's versioned route table"),
    ("import", "Onboarding many tenants in one change"),
    (
        "migrations",
        "Moving a tenant to another deployment under traffic",
    ),
    ("snapshot", "What gateways serve (gateway token)"),
    (
        "gateways",
        "The fleet of gateways and the revision each serves",
    ),
    (
        "observations",
        "Gateways' reports of each tenant's hot keys, big keys and slow commands",
    ),
    (
        "usage",
        "Each tenant's traffic over the last day, minute by minute, and the busiest tenants now",
    ),
    ("audit", "Every change: who, what, before and after"),
    ("tokens", "The API's tokens and their roles"),
    ("service", "Health, metrics and this document"),
];

/// One endpoint: how it is served and how it is documented.
pub struct Operation {
    pub(crate) id: &'static str,
    pub method: Method,
    pub path: &'static str,
    pub(crate) summary: &'static str,
    /// One of [`TAGS`], set by `api::operations` for each file's endpoints.
    pub(crate) tag: &'static str,
    pub access: Access,
    pub(crate) handler: MethodRouter<AppState>,
    request: Option<SchemaFn>,
    status: u16,
    response: Option<SchemaFn>,
    content_type: &'static str,
    errors: Vec<u16>,
    bodiless: Vec<u16>,
    /// Other answers with a JSON body of their own type (e.g. the health check's 503).
    other_replies: Vec<(u16, SchemaFn)>,
    params: Vec<Parameter>,
    path_enums: Vec<PathEnum>,
    example: Option<Value>,
}

impl Operation {
    /// The operation's `operationId`.
    pub fn id(&self) -> &'static str {
        self.id
    }

    pub(crate) fn new(
        id: &'static str,
        method: Method,
        path: &'static str,
        summary: &'static str,
        access: Access,
        handler: MethodRouter<AppState>,
    ) -> Operation {
        Operation {
            id,
            method,
            path,
            summary,
            tag: "service",
            access,
            handler,
            request: None,
            status: 200,
            response: None,
            content_type: "application/json",
            // A path parameter is refused with 400 when it holds a NUL or is not a number where one is needed.
            errors: if path_parameters(path).next().is_some() {
                vec![400]
            } else {
                Vec::new()
            },
            bodiless: Vec::new(),
            other_replies: Vec::new(),
            params: Vec::new(),
            path_enums: Vec::new(),
            example: None,
        }
    }

    /// An example of the request body.
    pub(crate) fn example(mut self, example: Value) -> Operation {
        self.example = Some(example);
        self
    }

    /// Another answer with a JSON body of type `T`.
    pub(crate) fn also_reply<T: JsonSchema>(mut self, status: u16) -> Operation {
        self.other_replies.push((status, schema::<T>));
        self
    }

    /// The words a path parameter takes (any other is a 404).
    pub(crate) fn path_enum(
        mut self,
        name: &'static str,
        description: &'static str,
        values: &'static [&'static str],
    ) -> Operation {
        self.path_enums.push(PathEnum {
            name,
            description,
            values,
        });
        self.errors(&[404])
    }

    /// A JSON request body of type `T` (bad JSON is a 400, a bad shape a 422).
    pub(crate) fn request<T: JsonSchema>(mut self) -> Operation {
        self.request = Some(schema::<T>);
        self.errors(&[400, 422])
    }

    /// The success status and its JSON body of type `T`.
    pub(crate) fn reply<T: JsonSchema>(mut self, status: u16) -> Operation {
        self.status = status;
        self.response = Some(schema::<T>);
        self
    }

    /// A success status without a body.
    pub(crate) fn reply_empty(mut self, status: u16) -> Operation {
        self.status = status;
        self
    }

    /// A success body that is not JSON.
    pub(crate) fn reply_text(mut self, content_type: &'static str) -> Operation {
        self.content_type = content_type;
        self
    }

    pub(crate) fn errors(mut self, statuses: &[u16]) -> Operation {
        self.errors.extend_from_slice(statuses);
        self
    }

    /// Another answer without a body (e.g. 304).
    pub(crate) fn also(mut self, status: u16) -> Operation {
        self.bodiless.push(status);
        self
    }

    pub(crate) fn query(self, name: &'static str, description: &'static str) -> Operation {
        self.parameter("query", name, description, "string")
    }

    pub(crate) fn query_integer(self, name: &'static str, description: &'static str) -> Operation {
        self.parameter("query", name, description, "integer")
    }

    pub(crate) fn query_boolean(self, name: &'static str, description: &'static str) -> Operation {
        self.parameter("query", name, description, "boolean")
    }

    pub(crate) fn header(self, name: &'static str, description: &'static str) -> Operation {
        self.parameter("header", name, description, "string")
    }

    fn parameter(
        mut self,
        place: &'static str,
        name: &'static str,
        description: &'static str,
        kind: &'static str,
    ) -> Operation {
        // Query parameters are parsed strictly: an unknown or malformed one is a 400.
        if place == "query" {
            self.errors.push(400);
        }
        self.params.push(Parameter {
            place,
            name,
            description,
            kind,
        });
        self
    }

    fn document(&self, generator: &mut SchemaGenerator) -> Value {
        let mut parameters: Vec<Value> = path_parameters(self.path)
            .map(|name| match self.path_enums.iter().find(|e| e.name == name) {
                Some(words) => json!({"name": name, "in": "path", "required": true,
                    "description": words.description, "schema": {"type": "string", "enum": words.values}}),
                None => json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}),
            })
            .collect();
        parameters.extend(self.params.iter().map(|p| {
            json!({"name": p.name, "in": p.place, "description": p.description, "schema": {"type": p.kind}})
        }));
        // Every change commits through `AppState::commit`, which honours `crate::dry_run`.
        if self.access.by_role() && self.method != Method::GET {
            parameters.push(json!({"name": "dry_run", "in": "query", "schema": {"type": "boolean"},
                "description": "`true`: run every check and answer as the change would, but write nothing."}));
        }
        let mut responses = Map::new();
        let content = |schema: Option<Schema>, content_type: &str| match schema {
            Some(schema) => json!({content_type: {"schema": schema}}),
            None if content_type != "application/json" => {
                json!({content_type: {"schema": {"type": "string"}}})
            }
            None => Value::Null,
        };
        let mut success = json!({"description": reason(self.status)});
        let body = content(self.response.map(|f| f(generator)), self.content_type);
        if !body.is_null() {
            success["content"] = body;
        }
        responses.insert(self.status.to_string(), success);
        for status in &self.bodiless {
            responses.insert(status.to_string(), json!({"description": reason(*status)}));
        }
        for (status, body) in &self.other_replies {
            responses.insert(
                status.to_string(),
                json!({"description": reason(*status),
                       "content": {"application/json": {"schema": body(generator)}}}),
            );
        }
        let mut errors = self.errors.clone();
        // A token of a role the endpoint does not admit (or a gateway's, where a role is needed) is a 403.
        if self.access != Access::Public {
            errors.extend([401, 403]);
        }
        errors.sort_unstable();
        errors.dedup();
        let error_schema = schema::<ErrorBody>(generator);
        for status in errors {
            responses.insert(
                status.to_string(),
                json!({"description": reason(status),
                       "content": {"application/json": {"schema": error_schema}}}),
            );
        }
        let mut operation = json!({
            "operationId": self.id,
            "summary": self.summary,
            "tags": [self.tag],
            "parameters": parameters,
            "responses": responses,
        });
        operation["security"] = match self.access {
            Access::Public => json!([]),
            Access::Gateway => json!([{"gateway": []}, {"token": []}]),
            _ => json!([{"token": []}]),
        };
        if self.access != Access::Public {
            let roles: Vec<&str> = self.access.roles().iter().map(|r| r.as_str()).collect();
            operation["x-roles"] = json!(roles);
            operation["description"] = json!(roles_description(self.access));
        }
        if let Some(request) = self.request {
            let mut media = json!({"schema": request(generator)});
            if let Some(example) = &self.example {
                media["example"] = example.clone();
            }
            operation["requestBody"] = json!({
                "required": true,
                "content": {"application/json": media},
            });
        }
        operation
    }
}

/// Who may call an endpoint of `access`, in words.
fn roles_description(access: Access) -> String {
    let roles: Vec<&str> = access.roles().iter().map(|r| r.as_str()).collect();
    let mut text = match access {
        Access::Gateway => format!(
            "Callers: a gateway token, or a token of the role {}.",
            roles.join(", ")
        ),
        _ => format!("Roles: {}.", roles.join(", ")),
    };
    if access.per_tenant() {
        text.push_str(" A tenant-owner only for the tenants it owns.");
    } else if access == Access::OwnRead {
        text.push_str(" A tenant-owner sees only what concerns its own tenants.");
    }
    text
}

fn path_parameters(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
}

fn reason(status: u16) -> &'static str {
    axum::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
}

/// The OpenAPI 3.1 document of `operations`.
pub(crate) fn document(operations: &[Operation]) -> Value {
    let mut settings = SchemaSettings::draft07();
    settings.definitions_path = "#/components/schemas/".to_string();
    settings.meta_schema = None;
    let mut generator = settings.into_generator();
    let mut paths: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    for operation in operations {
        let documented = operation.document(&mut generator);
        paths
            .entry(operation.path)
            .or_default()
            .insert(operation.method.as_str().to_lowercase(), documented);
    }
    let schemas: BTreeMap<String, Schema> = generator.take_definitions().into_iter().collect();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Switchyard control plane",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Tenants, credentials, resources and versioned route tables for Switchyard gateways.",
        },
        "tags": TAGS.iter().map(|(name, description)| json!({"name": name, "description": description})).collect::<Vec<_>>(),
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "token": {"type": "http", "scheme": "bearer", "description": "An API token of `/v1/tokens`, or a start-up --admin-token (role admin); `x-roles` lists the roles an operation admits."},
                "gateway": {"type": "http", "scheme": "bearer", "description": "A gateway token (--gateway-token)."},
            },
        },
    })
}
