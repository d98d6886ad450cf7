//! Request extractors whose failures are `ApiError`s: JSON bodies (with the JSON pointer of a bad field), query
//! strings, path parameters, and the numeric entity tags of conditional requests (`If-Match`,
//! `If-None-Match`, `ETag`).

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body. Malformed JSON is a 400; well-formed JSON of the wrong shape (unknown field, wrong type,
/// route table that does not match the schema) is a 422 naming the field.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|e| ApiError::BadRequest(e.body_text()))?;
        parse_json(&bytes).map(JsonBody)
    }
}

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = decode(&mut deserializer)?;
    deserializer.end().map_err(|e| not_json(&e))?;
    Ok(value)
}

/// Converts an already parsed JSON document, with the same errors as [`parse_json`].
pub fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    decode(value)
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
                pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
            Segment::Unknown => {}
        }
    }
    pointer
}

/// A query string; a bad one is a 400 saying which parameter is wrong.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e: QueryRejection| ApiError::BadRequest(e.body_text()))
    }
}

/// Path parameters; a bad one (e.g. a version that is not a number) is a 400.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e: PathRejection| ApiError::BadRequest(e.body_text()))
    }
}

/// The version an `If-Match` header expects: `3`, `"3"` or `W/"3"`; `*` (any) and no header are `None`.
/// `0` means "the tenant has no route yet".
pub fn if_match(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
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
pub fn if_none_match(headers: &HeaderMap) -> Option<i64> {
    tag_number(headers.get(header::IF_NONE_MATCH)?.to_str().ok()?.trim())
}

/// Our entity tags are numbers (route versions, revisions); clients may send them bare, quoted or weak.
fn tag_number(text: &str) -> Option<i64> {
    let text = text.strip_prefix("W/").unwrap_or(text);
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    text.parse::<i64>().ok().filter(|n| *n >= 0)
}

/// The `ETag` header for a route version or a revision.
pub fn etag(number: i64) -> (HeaderName, HeaderValue) {
    // Digits in quotes are always a valid header value.
    let value =
        HeaderValue::try_from(format!("\"{number}\"")).unwrap_or(HeaderValue::from_static("\"\""));
    (header::ETAG, value)
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
        assert_eq!(etag(12).1, "\"12\"");
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
            "/colour: unknown field `colour`, expected one of `name`, `description`, `disabled`, `allow_admin`, `limits`"
        );
    }
}
