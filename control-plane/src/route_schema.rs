//! Route tables checked against their JSON Schema before they are deserialized, for exact error paths.
//!
//! The schema is the one committed as `schemas/route-table.schema.json`, generated from `RouteTable`. serde alone
//! loses the position of an error inside the tagged and untagged enums of a route table; the schema check names the
//! exact JSON pointer. Messages are the masked ones: they never echo the offending value, which may be a URL with a
//! password in it.

use std::sync::LazyLock;

use jsonschema::ValidationError;
use jsonschema::error::ValidationErrorKind;
use serde_json::Value;
use switchyard_schemas::api::ErrorDetail;
use switchyard_schemas::{RouteTable, validate};

use crate::error::ApiError;

static VALIDATOR: LazyLock<Option<jsonschema::Validator>> = LazyLock::new(|| {
    let schema = serde_json::to_value(schemars::schema_for!(RouteTable)).ok()?;
    jsonschema::validator_for(&schema)
        .map_err(|e| tracing::error!(error = %e, "the route table schema does not compile"))
        .ok()
});

/// Checks `route` (found at `prefix` in the request body) against the schema.
pub(crate) fn check(route: &Value, prefix: &str) -> Result<(), ApiError> {
    // Without a validator, deserialization still rejects every table the schema would, with vaguer paths.
    let Some(validator) = VALIDATOR.as_ref() else {
        return Ok(());
    };
    let mut details = Vec::new();
    for error in validator.iter_errors(route) {
        explain(&error, prefix, &mut details);
    }
    if details.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Unprocessable {
            message: "the route table does not match its schema".to_string(),
            details,
        })
    }
}

/// An `anyOf`/`oneOf` failure says only "matches no variant" at the enum's position. The variant the author
/// meant is the one whose discriminator (`type`, `algorithm`) or JSON type matched: its errors are reported
/// instead, recursively, so the path points at the actual mistake.
fn explain(error: &ValidationError<'_>, prefix: &str, out: &mut Vec<ErrorDetail>) {
    let path = error.instance_path().as_str();
    if let ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } =
        error.kind()
    {
        let meant = context
            .iter()
            .filter(|branch| !branch.iter().any(|e| is_other_variant(e, path)))
            .min_by_key(|branch| branch.len());
        if let Some(branch) = meant.filter(|b| !b.is_empty()) {
            for inner in branch {
                explain(inner, prefix, out);
            }
            return;
        }
        if let Some(detail) = unknown_tag(context, path, prefix) {
            out.push(detail);
            return;
        }
    }
    out.push(ErrorDetail {
        path: format!("{prefix}{path}"),
        message: error.masked().to_string(),
    });
}

/// When every variant refused the object's discriminator, the message names the valid values (collected from the
/// variants' own `enum`s, so they follow the types), worded as [`validate::unknown_tag`] words it everywhere.
fn unknown_tag(
    context: &[Vec<ValidationError<'_>>],
    parent: &str,
    prefix: &str,
) -> Option<ErrorDetail> {
    let mut tag = None;
    let mut expected = Vec::new();
    for branch in context {
        let error = branch.iter().find(|e| is_other_variant(e, parent))?;
        let name = error.instance_path().as_str().strip_prefix(parent)?;
        let options = match error.kind() {
            ValidationErrorKind::Enum { options } => options.as_array()?.clone(),
            ValidationErrorKind::Constant { expected_value } => vec![(**expected_value).clone()],
            _ => return None,
        };
        expected.extend(
            options
                .iter()
                .filter_map(|o| o.as_str().map(str::to_string)),
        );
        tag = Some((name.to_string(), error.instance().clone()));
    }
    let (name, given) = tag?;
    let what = match name.as_str() {
        "/type" => "route type",
        _ => "hash algorithm",
    };
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    Some(ErrorDetail {
        path: format!("{prefix}{parent}{name}"),
        message: validate::unknown_tag(what, &given, &expected),
    })
}

fn is_other_variant(error: &ValidationError<'_>, parent: &str) -> bool {
    let path = error.instance_path().as_str();
    let tag = path
        .strip_prefix(parent)
        .is_some_and(|rest| rest == "/type" || rest == "/algorithm");
    match error.kind() {
        ValidationErrorKind::Type { .. } => path == parent,
        ValidationErrorKind::Enum { .. } | ValidationErrorKind::Constant { .. } => tag,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(json: &str) -> Vec<String> {
        let route: Value = serde_json::from_str(json).unwrap();
        match check(&route, "/route") {
            Ok(()) => Vec::new(),
            Err(ApiError::Unprocessable { details, .. }) => {
                details.into_iter().map(|d| d.path).collect()
            }
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_the_bad_field_and_hides_values() {
        assert!(VALIDATOR.is_some());
        assert!(paths(r#"{"type":"single","target":"main"}"#).is_empty());
        assert_eq!(
            paths(r#"{"type":"sharded","shards":[{"name":"a","target":"m","weight":"x"}]}"#),
            vec!["/route/shards/0/weight"]
        );
        let route: Value = serde_json::from_str(
            r#"{"type":"single","target":{"write":{"resources":"redis://topsecret@h:1"}}}"#,
        )
        .unwrap();
        let Err(ApiError::Unprocessable { details, .. }) = check(&route, "") else {
            panic!("accepted");
        };
        assert_eq!(details.len(), 1);
        assert_eq!(details[0].path, "/target/write/resources");
        assert!(!details[0].message.contains("topsecret"), "{details:?}");
        assert_eq!(
            paths(r#"{"type":"single","target":5}"#),
            vec!["/route/target"]
        );
    }

    fn messages(json: &str) -> Vec<String> {
        let route: Value = serde_json::from_str(json).unwrap();
        match check(&route, "/route") {
            Ok(()) => Vec::new(),
            Err(ApiError::Unprocessable { details, .. }) => details
                .into_iter()
                .map(|d| format!("{}: {}", d.path, d.message))
                .collect(),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unknown_discriminator_names_the_valid_ones() {
        assert_eq!(
            messages(r#"{"type":"shardd","shards":[]}"#),
            vec![
                "/route/type: unknown route type 'shardd', expected one of: single, sharded, double_write"
            ]
        );
        assert_eq!(
            messages(
                r#"{"type":"sharded","hash":{"algorithm":"crc61","buckets":4},"shards":[{"name":"a","target":"m"}]}"#
            ),
            vec![
                "/route/hash/algorithm: unknown hash algorithm 'crc61', expected one of: ring, crc16, camellia, camellia_hashtag"
            ]
        );
        // Nested: the secondary of a double-write table; and a value that is not a plain word is not echoed.
        assert_eq!(
            messages(
                r#"{"type":"double_write","primary":{"type":"single","target":"m"},"secondary":{"type":"redis://:pw@h:1"}}"#
            ),
            vec![
                "/route/secondary/type: unknown route type, expected one of: single, sharded, double_write"
            ]
        );
    }
}
