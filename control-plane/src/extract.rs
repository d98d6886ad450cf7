//! Request extractors whose failures are `ApiError`s: JSON bodies (with the JSON pointer of a bad field), query
//! strings, path parameters and `If-Match`.

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::HeaderMap;
use axum::http::request::Parts;
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
            // serde's message ends with " at line L column C", which means nothing once we give a path.
            let message = inner.to_string();
            let message = match message.rfind(" at line ") {
                Some(cut) => message[..cut].to_string(),
                None => message,
            };
            ApiError::invalid(&path, message)
        } else {
            not_json(&inner)
        }
    })
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
    let Some(value) = headers.get(axum::http::header::IF_MATCH) else {
        return Ok(None);
    };
    let bad = || ApiError::BadRequest("If-Match must be a route version, like 3 or \"3\"".into());
    let text = value.to_str().map_err(|_| bad())?.trim();
    if text == "*" {
        return Ok(None);
    }
    let text = text.strip_prefix("W/").unwrap_or(text);
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    text.parse::<i64>()
        .ok()
        .filter(|v| *v >= 0)
        .map(Some)
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_schemas::api::TenantCreate;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(axum::http::header::IF_MATCH, value.parse().unwrap());
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
    fn body_errors_name_the_field() {
        assert_eq!(details("{").0, 400);
        assert_eq!(details(r#"{"name":"a"} x"#).0, 400);
        assert_eq!(details(r#"{"name":"a"}"#).0, 200);
        assert_eq!(
            details(r#"{"name":"a","limits":{"max_connections":"x"}}"#),
            (
                422,
                vec![
                    "/limits/max_connections: invalid type: string \"x\", expected u32".to_string()
                ]
            )
        );
        assert_eq!(
            details(r#"{"name":"a","colour":1}"#).1[0],
            "/colour: unknown field `colour`, expected one of `name`, `description`, `disabled`, `allow_admin`, `limits`"
        );
    }
}
