//! The HTTP side of `switchyard-ctl`: one call to the control plane's REST API, its reply, and every way a call
//! can fail, each with the exit code of its class.

use std::fmt;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use switchyard_schemas::api::ErrorBody;

/// One request: method, path under the base URL, query, JSON body and the `If-Match` version.
pub(crate) struct Call {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) query: Vec<(&'static str, String)>,
    pub(crate) body: Option<Value>,
    pub(crate) if_match: Option<i64>,
}

impl Call {
    pub(crate) fn new(method: Method, path: impl Into<String>) -> Call {
        Call {
            method,
            path: path.into(),
            query: Vec::new(),
            body: None,
            if_match: None,
        }
    }

    pub(crate) fn get(path: impl Into<String>) -> Call {
        Call::new(Method::GET, path)
    }

    pub(crate) fn body(mut self, body: Value) -> Call {
        self.body = Some(body);
        self
    }

    /// Adds `name=value` when `value` is given.
    pub(crate) fn query(mut self, name: &'static str, value: Option<impl ToString>) -> Call {
        if let Some(value) = value {
            self.query.push((name, value.to_string()));
        }
        self
    }

    pub(crate) fn if_match(mut self, version: Option<i64>) -> Call {
        self.if_match = version;
        self
    }
}

/// A successful answer: its body (`Null` for a 204) and the route version its `ETag` names, if any.
pub(crate) struct Reply {
    pub(crate) body: Value,
    pub(crate) version: Option<i64>,
}

/// Why a command failed. Each class has its own exit code (docs/ctl.md, "Exit codes").
#[derive(Debug)]
pub(crate) enum Failure {
    /// A usage error or a local one (a file that cannot be read or parsed, an edit that does not validate).
    Local(anyhow::Error),
    /// The API answered with an error status.
    Api {
        status: StatusCode,
        body: Option<ErrorBody>,
        text: String,
    },
    /// No answer: connection refused, TLS failure, timeout.
    Unreachable(String),
}

pub(crate) type Outcome<T = ()> = Result<T, Failure>;

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Failure {
        Failure::Local(error.into())
    }
}

impl Failure {
    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            Failure::Local(_) => 1,
            Failure::Api { status, .. } => match status.as_u16() {
                404 => 2,
                409 | 412 => 3,
                400 | 422 => 4,
                401 | 403 => 5,
                _ => 6,
            },
            Failure::Unreachable(_) => 6,
        })
    }

    /// The API's machine-readable error code (`not_found`, `migration_active`, ...), if it answered one.
    pub(crate) fn code(&self) -> Option<&str> {
        match self {
            Failure::Api {
                body: Some(body), ..
            } => Some(&body.error),
            _ => None,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Local(error) => write!(f, "{error:#}"),
            Failure::Unreachable(why) => write!(f, "{why}"),
            Failure::Api {
                status,
                body: Some(body),
                ..
            } => {
                write!(f, "{status}: {} ({})", body.message, body.error)?;
                // A single problem is already the message ("/path: why").
                let repeated = match body.details.as_slice() {
                    [only] => body.message == format!("{}: {}", only.path, only.message),
                    _ => false,
                };
                for detail in body.details.iter().filter(|_| !repeated) {
                    let path = if detail.path.is_empty() {
                        "(body)"
                    } else {
                        &detail.path
                    };
                    write!(f, "\n  {path}: {}", detail.message)?;
                }
                Ok(())
            }
            Failure::Api { status, text, .. } if text.trim().is_empty() => write!(f, "{status}"),
            Failure::Api { status, text, .. } => write!(f, "{status}: {}", text.trim()),
        }
    }
}

/// Where the control plane is and how to talk to it.
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    /// Trusts only the CAs of `ca_file` when given, else the system's trust store (which honours SSL_CERT_FILE).
    pub(crate) fn new(
        base: &str,
        token: Option<String>,
        ca_file: Option<&Path>,
    ) -> Outcome<Client> {
        let mut builder = reqwest::Client::builder();
        if let Some(path) = ca_file {
            builder = builder.tls_built_in_root_certs(false);
            let certificates = switchyard_runtime::tls::certificates(path)
                .with_context(|| format!("the CA file {}", path.display()))?;
            for certificate in certificates {
                builder =
                    builder.add_root_certificate(reqwest::Certificate::from_der(&certificate)?);
            }
        }
        Ok(Client {
            http: builder.build()?,
            base: base.trim_end_matches('/').to_string(),
            token,
        })
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) async fn send(&self, call: &Call) -> Outcome<Reply> {
        let token = self.token.as_deref().ok_or_else(|| {
            anyhow::anyhow!(
                "no admin token: give --admin-token, SWITCHYARD_ADMIN_TOKEN, SWITCHYARD_ADMIN_TOKEN_FILE or a \
                 profile with admin_token_file"
            )
        })?;
        let url = self.url(&call.path);
        let mut request = self
            .http
            .request(call.method.clone(), &url)
            .bearer_auth(token)
            .query(&call.query);
        if let Some(version) = call.if_match {
            request = request.header("If-Match", format!("\"{version}\""));
        }
        if let Some(body) = &call.body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| {
            Failure::Unreachable(format!(
                "{} {url}: {:#}",
                call.method,
                anyhow::Error::from(e)
            ))
        })?;
        let status = response.status();
        let version = response
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim_matches('"').parse().ok());
        let text = response
            .text()
            .await
            .map_err(|e| Failure::Unreachable(format!("{} {url}: {e}", call.method)))?;
        if !status.is_success() {
            return Err(Failure::Api {
                status,
                body: serde_json::from_str(&text).ok(),
                text,
            });
        }
        let body = match text.is_empty() {
            true => Value::Null,
            false => serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} {url} answered {status} with a body that is not JSON",
                    call.method
                )
            })?,
        };
        Ok(Reply { body, version })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, body: &str) -> Failure {
        Failure::Api {
            status: StatusCode::from_u16(status).unwrap(),
            body: serde_json::from_str(body).ok(),
            text: body.to_string(),
        }
    }

    #[test]
    fn each_status_class_has_its_exit_code() {
        for (status, code) in [
            (404, 2),
            (409, 3),
            (412, 3),
            (400, 4),
            (422, 4),
            (401, 5),
            (403, 5),
            (500, 6),
            (503, 6),
        ] {
            assert_eq!(
                api(status, "").exit_code(),
                ExitCode::from(code),
                "{status}"
            );
        }
        assert_eq!(
            Failure::Unreachable(String::new()).exit_code(),
            ExitCode::from(6)
        );
        assert_eq!(
            Failure::from(anyhow::anyhow!("local")).exit_code(),
            ExitCode::from(1)
        );
    }

    #[test]
    fn errors_read_with_their_details() {
        let several = api(
            422,
            r#"{"error": "invalid", "message": "the tenant is invalid",
                "details": [{"path": "/a", "message": "bad"}, {"path": "", "message": "worse"}]}"#,
        );
        assert_eq!(
            several.to_string(),
            "422 Unprocessable Entity: the tenant is invalid (invalid)\n  /a: bad\n  (body): worse"
        );
        let one = api(
            422,
            r#"{"error": "invalid", "message": "/name: bad", "details": [{"path": "/name", "message": "bad"}]}"#,
        );
        assert_eq!(
            one.to_string(),
            "422 Unprocessable Entity: /name: bad (invalid)"
        );
        assert_eq!(api(405, "").to_string(), "405 Method Not Allowed");
    }
}
