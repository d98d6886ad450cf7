//! Request extractors whose failures are `ApiError`s: JSON bodies, query strings, path parameters, `If-Match`.
//!
//! A bad field of a JSON body is named by its JSON pointer; `If-Match` and `If-None-Match` carry entity tags.
//!
//! Text with a NUL character is refused here with a 400, in bodies and paths alike: Postgres cannot store it in a
//! `text` or `jsonb` value, and nothing an admin means to say contains one.

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::etag::tag_number;

/// A JSON request body. Malformed JSON is a 400; well-formed JSON of the wrong shape (unknown field, wrong type,
/// route table that does not match the schema) is a 422 naming the field.
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|e| ApiError::BadRequest(e.body_text()))?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses a body as `T`: a syntax error or a NUL in a string is a 400, a wrong shape a 422 naming the field.
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Parsed twice (admin bodies are small): as a document to look for NULs, then straight into `T` so that
    // serde's own checks (duplicate fields among them) apply as written.
    let document: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| not_json(&e))?;
    check_text(&document)?;
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = decode(&mut deserializer)?;
    deserializer.end().map_err(|e| not_json(&e))?;
    Ok(value)
}

/// Converts an already parsed JSON document, with the same errors as [`parse_json`].
pub(crate) fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    check_text(&value)?;
    decode(value)
}

/// A 400 naming the first string (or object key) that holds a NUL character. The message says where, never the
/// text (it may be a password).
fn check_text(value: &serde_json::Value) -> Result<(), ApiError> {
    let mut pointer = String::new();
    if !find_nul(value, &mut pointer) {
        return Ok(());
    }
    let at = if pointer.is_empty() {
        "the body"
    } else {
        &pointer
    };
    Err(ApiError::BadRequest(format!(
        "{at}: text must not contain NUL (\\u0000)"
    )))
}

/// Whether `value` holds a NUL anywhere; if so, `pointer` is left pointing at it.
fn find_nul(value: &serde_json::Value, pointer: &mut String) -> bool {
    use serde_json::Value;
    let len = pointer.len();
    let found = match value {
        Value::String(text) => return text.contains('\0'),
        Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
            pointer.truncate(len);
            pointer.push_str(&format!("/{i}"));
            find_nul(item, pointer)
        }),
        Value::Object(fields) => fields.iter().any(|(key, field)| {
            pointer.truncate(len);
            pointer.push('/');
            pointer.push_str(&escape_pointer(key));
            key.contains('\0') || find_nul(field, pointer)
        }),
        _ => false,
    };
    if !found {
        pointer.truncate(len);
    }
    found
}

fn escape_pointer(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn decode<'de, D, T>(deserializer: D) -> Result<T, ApiError>
where
    D: serde::Deserializer<'de, Error = serde_json::Error>,
    T: serde::Deserialize<'de>,
{
    serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let path = json_pointer(error.path());
        let inner = error.into_inner();
        if inner.is_data() {
            ApiError::invalid(&path, data_error_message(&inner.to_string()))
        } else {
            not_json(&inner)
        }
    })
}

/// serde's message without the offending value (it may be a password typed into the wrong field) and without
/// " at line L column C", which means nothing once the path is given.
fn data_error_message(message: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(cut) => &message[..cut],
        None => message,
    };
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix)
            && let Some(expected) = rest.find(", expected")
        {
            // `string "value"`, `integer `5``: the kind comes before the quoted value.
            let kind = rest[..expected]
                .split(['"', '`'])
                .next()
                .unwrap_or_default()
                .trim_end();
            return format!("{prefix}{kind}{}", &rest[expected..]);
        }
    }
    message.to_string()
}

fn not_json(error: &serde_json::Error) -> ApiError {
    ApiError::BadRequest(format!("the body is not valid JSON: {error}"))
}

fn json_pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut pointer = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => pointer.push_str(&format!("/{index}")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                pointer.push('/');
                pointer.push_str(&escape_pointer(key));
            }
            Segment::Unknown => {}
        }
    }
    pointer
}

/// A query string; a bad one is a 400 saying which parameter is wrong.
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e: QueryRejection| ApiError::BadRequest(e.body_text()))
    }
}

/// Path parameters; a bad one (e.g. a version that is not a number, or text with a NUL) is a 400.
pub(crate) struct ApiPath<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        // A path names tenants, resources and ids: a NUL (only ever percent-encoded in a URI) is never one.
        if parts.uri.path().contains("%00") {
            return Err(ApiError::BadRequest(
                "the path must not contain NUL (%00)".into(),
            ));
        }
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e: PathRejection| ApiError::BadRequest(e.body_text()))
    }
}

/// The version an `If-Match` header expects: `3`, `"3"` or `W/"3"`; `*` (any) and no header are `None`.
/// `0` means "the tenant has no route yet".
pub(crate) fn if_match(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    if text == "*" {
        return Ok(None);
    }
    tag_number(text).map(Some).ok_or_else(|| {
        ApiError::BadRequest("If-Match must be a route version, like 3 or \"3\"".into())
    })
}

/// The revision an `If-None-Match` header names, if it names one.
pub(crate) fn if_none_match(headers: &HeaderMap) -> Option<i64> {
    tag_number(headers.get(header::IF_NONE_MATCH)?.to_str().ok()?.trim())
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_schemas::api::TenantCreate;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::IF_MATCH, value.parse().unwrap());
        headers
    }

    #[test]
    fn if_match_forms() {
        assert_eq!(if_match(&HeaderMap::new()).unwrap(), None);
        assert_eq!(if_match(&headers("3")).unwrap(), Some(3));
        assert_eq!(if_match(&headers("\"3\"")).unwrap(), Some(3));
        assert_eq!(if_match(&headers("W/\"12\"")).unwrap(), Some(12));
        assert_eq!(if_match(&headers("*")).unwrap(), None);
        assert!(if_match(&headers("x")).is_err());
        assert!(if_match(&headers("-1")).is_err());
        let mut none_match = HeaderMap::new();
        none_match.insert(header::IF_NONE_MATCH, "W/\"7\"".parse().unwrap());
        assert_eq!(if_none_match(&none_match), Some(7));
    }

    fn details(json: &str) -> (u16, Vec<String>) {
        use axum::response::IntoResponse;
        match parse_json::<TenantCreate>(json.as_bytes()) {
            Ok(_) => (200, Vec::new()),
            Err(ApiError::Unprocessable { details, .. }) => (
                422,
                details
                    .into_iter()
                    .map(|d| format!("{}: {}", d.path, d.message))
                    .collect(),
            ),
            Err(other) => (other.into_response().status().as_u16(), Vec::new()),
        }
    }

    #[test]
    fn data_errors_do_not_echo_values() {
        assert_eq!(
            data_error_message("invalid type: string \"hunter2\", expected u32 at line 1 column 9"),
            "invalid type: string, expected u32"
        );
        assert_eq!(
            data_error_message("invalid type: integer `1234`, expected a string"),
            "invalid type: integer, expected a string"
        );
        assert_eq!(
            data_error_message("invalid type: map, expected a string"),
            "invalid type: map, expected a string"
        );
        assert_eq!(
            data_error_message("missing field `name`"),
            "missing field `name`"
        );
    }

    #[test]
    fn a_nul_anywhere_in_a_body_is_a_400_naming_where() {
        let message = |json: &str| match parse_json::<serde_json::Value>(json.as_bytes()) {
            Err(ApiError::BadRequest(message)) => message,
            other => panic!("{json}: {:?}", other.map(|_| ())),
        };
        assert_eq!(
            message(r#""\u0000""#),
            "the body: text must not contain NUL (\\u0000)"
        );
        assert_eq!(
            message(r#"{"a":[1,"x",{"b/c":"y\u0000"}]}"#),
            "/a/2/b~1c: text must not contain NUL (\\u0000)"
        );
        assert_eq!(
            message(r#"{"ok":"x","k\u0000":1}"#),
            "/k\u{0}: text must not contain NUL (\\u0000)"
        );
        // An escaped backslash followed by "u0000" is six ordinary characters.
        assert!(parse_json::<serde_json::Value>(br#"{"a":"\\u0000"}"#).is_ok());
    }

    #[test]
    fn body_errors_name_the_field() {
        assert_eq!(details("{").0, 400);
        assert_eq!(details(r#"{"name":"a"} x"#).0, 400);
        assert_eq!(details(r#"{"name":"a"}"#).0, 200);
        assert_eq!(
            details(r#"{"name":"a","limits":{"max_connections":"x"}}"#),
            (
                422,
                vec!["/limits/max_connections: invalid type: string, expected u32".to_string()]
            )
        );
        assert_eq!(
            details(r#"{"name":"a","colour":1}"#).1[0],
            "/colour: unknown field `colour`, expected one of `name`, `description`, `disabled`, `allow_admin`, `limits`, `namespace`, `read_only`, `commands`, `ip_allow`, `ip_deny`, `blocked_keys`, `tracking`, `scripts`, `limits_scope`, `near_cache`"
        );
    }
}
