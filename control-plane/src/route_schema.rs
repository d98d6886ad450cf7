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
use switchyard_schemas::RouteTable;
use switchyard_schemas::api::ErrorDetail;

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
    }
    out.push(ErrorDetail {
        path: format!("{prefix}{path}"),
        message: error.masked().to_string(),
    });
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
}
