//! Entity tags: route versions and revisions as `ETag` values, and the numbers clients send back.
//!
//! Clients send them in `If-Match` / `If-None-Match`, bare, quoted or weak.

use axum::http::{HeaderName, HeaderValue, header};

/// The `ETag` header for a route version or a revision.
pub(crate) fn etag(number: i64) -> (HeaderName, HeaderValue) {
    // Digits in quotes are always a valid header value.
    let value =
        HeaderValue::try_from(format!("\"{number}\"")).unwrap_or(HeaderValue::from_static("\"\""));
    (header::ETAG, value)
}

/// Our entity tags are numbers (route versions, revisions); clients may send them bare, quoted or weak.
pub(crate) fn tag_number(text: &str) -> Option<i64> {
    let text = text.strip_prefix("W/").unwrap_or(text);
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    text.parse::<i64>().ok().filter(|n| *n >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_forms() {
        assert_eq!(etag(12).1, "\"12\"");
        assert_eq!(tag_number("3"), Some(3));
        assert_eq!(tag_number("\"3\""), Some(3));
        assert_eq!(tag_number("W/\"12\""), Some(12));
        assert_eq!(tag_number("-1"), None);
        assert_eq!(tag_number("x"), None);
    }
}
