//! Masking of backend passwords in resource URLs, for everything kept or shown beyond the snapshot.
//!
//! That is the audit log and every answer of the admin API; only the snapshot served to gateways holds real URLs.

use serde_json::Value;
use switchyard_schemas::{RouteTable, Target};

/// What a masked password reads as.
pub(crate) const MASK: &str = "***";

/// The query parameters of a resource URL that hold a secret, each masked like the password.
const SECRET_PARAMETERS: [&str; 2] = ["sentinelPassword", "scriptPassword"];

/// A URL cut where its secrets are: `scheme://[userinfo@]location[?query]` (the last `@` ends the userinfo, as
/// the resource URL parser reads it).
struct Parts<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    location: &'a str,
    query: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn of(text: &'a str) -> Option<Parts<'a>> {
        let (scheme, rest) = text.split_once("://")?;
        let (userinfo, after) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (location, query) = match after.split_once('?') {
            Some((location, query)) => (location, Some(query)),
            None => (after, None),
        };
        Some(Parts {
            scheme,
            userinfo,
            location,
            query,
        })
    }

    /// The userinfo's password: after the first `:`, or all of it (camellia's `redis://password@host`).
    fn password(&self) -> Option<&'a str> {
        let info = self.userinfo.filter(|info| !info.is_empty())?;
        Some(info.split_once(':').map_or(info, |(_, password)| password))
    }

    /// The value of the secret query parameter `name`.
    fn parameter(&self, name: &str) -> Option<&'a str> {
        self.query?.split('&').find_map(|pair| {
            pair.split_once('=')
                .filter(|(key, _)| *key == name)
                .map(|(_, value)| value)
        })
    }

    /// Whether some secret of the URL is the mask.
    fn has_mask(&self) -> bool {
        self.password() == Some(MASK)
            || SECRET_PARAMETERS
                .iter()
                .any(|name| self.parameter(name) == Some(MASK))
    }

    /// The URL again, with `password` deciding the password and `parameter` each secret parameter present.
    fn join(
        &self,
        password: impl Fn(&'a str) -> String,
        parameter: impl Fn(&str, &'a str) -> String,
    ) -> String {
        let mut out = format!("{}://", self.scheme);
        match self.userinfo {
            Some("") => out.push('@'),
            Some(info) => {
                match info.split_once(':') {
                    Some((user, secret)) => out.push_str(&format!("{user}:{}", password(secret))),
                    None => out.push_str(&password(info)),
                }
                out.push('@');
            }
            None => {}
        }
        out.push_str(self.location);
        if let Some(query) = self.query {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, secret)) if SECRET_PARAMETERS.contains(&name) => {
                        format!("{name}={}", parameter(name, secret))
                    }
                    _ => pair.to_string(),
                })
                .collect();
            out.push('?');
            out.push_str(&query.join("&"));
        }
        out
    }
}

/// The URL with its password (and `sentinelPassword`, `scriptPassword` parameters) replaced by `***`; other text
/// unchanged.
pub(crate) fn url(text: &str) -> String {
    match Parts::of(text) {
        Some(parts) => parts.join(|_| MASK.to_string(), |_, _| MASK.to_string()),
        None => text.to_string(),
    }
}

/// A submitted URL whose password (or `sentinelPassword`) is the mask gets the stored URL's secret back, so that
/// a URL shown masked can be edited and sent back without typing the password again. A mask with no stored
/// secret to stand for is an error naming which one.
pub(crate) fn restore(submitted: &str, stored: &str) -> Result<String, &'static str> {
    let (Some(new), Some(old)) = (Parts::of(submitted), Parts::of(stored)) else {
        return Ok(submitted.to_string());
    };
    if !new.has_mask() {
        return Ok(submitted.to_string());
    }
    if new.password() == Some(MASK) && old.password().is_none() {
        return Err("the password is the mask '***', but the stored URL has no password to keep");
    }
    for name in SECRET_PARAMETERS {
        if new.parameter(name) == Some(MASK) && old.parameter(name).is_none() {
            return Err(match name {
                "scriptPassword" => {
                    "scriptPassword is the mask '***', but the stored URL has no scriptPassword to keep"
                }
                _ => {
                    "sentinelPassword is the mask '***', but the stored URL has no sentinelPassword to keep"
                }
            });
        }
    }
    let keep = |stored: Option<&str>, given: &str| match stored {
        Some(secret) if given == MASK => secret.to_string(),
        _ => given.to_string(),
    };
    Ok(new.join(
        |given| keep(old.password(), given),
        |name, given| keep(old.parameter(name), given),
    ))
}

/// A route table as answers show it: every inline URL masked (resource names are left as they are).
pub(crate) fn route(mut table: RouteTable) -> RouteTable {
    for reference in references_mut(&mut table) {
        *reference = url(reference);
    }
    table
}

/// A route table sent back as answers show it: each inline URL with a masked secret gets the secrets of the
/// stored table's URL that masks to the same text. One that matches none is an error: storing `***` as a password
/// would lock the tenant out of its backend.
pub(crate) fn restore_route(
    mut table: RouteTable,
    stored: Option<&RouteTable>,
) -> Result<RouteTable, String> {
    let known: std::collections::HashMap<String, &String> = stored
        .map(|stored| {
            stored
                .targets()
                .into_iter()
                .flat_map(target_references)
                .map(|real| (url(real), real))
                .collect()
        })
        .unwrap_or_default();
    for reference in references_mut(&mut table) {
        let Some(parts) = Parts::of(reference) else {
            continue;
        };
        if !parts.has_mask() {
            continue;
        }
        match known.get(reference.as_str()) {
            Some(real) => *reference = (*real).clone(),
            None => {
                return Err(format!(
                    "'{}' has a masked secret ('***') that matches no URL of the current route; give the password",
                    url(reference)
                ));
            }
        }
    }
    Ok(table)
}

fn target_references(target: &Target) -> Vec<&String> {
    match target {
        Target::Resource(reference) => vec![reference],
        Target::Split(split) => {
            let reads = split.read.iter().flat_map(|read| &read.resources);
            split.write.resources.iter().chain(reads).collect()
        }
    }
}

/// Every resource reference (URL or name) of a table.
fn references_mut(table: &mut RouteTable) -> Vec<&mut String> {
    let mut references = Vec::new();
    for target in table.targets_mut() {
        match target {
            Target::Resource(reference) => references.push(reference),
            Target::Split(split) => {
                let reads = split.read.iter_mut().flat_map(|read| &mut read.resources);
                references.extend(split.write.resources.iter_mut().chain(reads));
            }
        }
    }
    references
}

/// Masks every URL-looking string anywhere in a JSON document.
pub(crate) fn value(value: Value) -> Value {
    match value {
        Value::String(text) if text.contains("://") => Value::String(url(&text)),
        Value::Array(items) => Value::Array(items.into_iter().map(self::value).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(key, field)| (key, self::value(field)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_keeps_a_provisioned_script_users_password() {
        let stored = "redis://gw:gwpw@h:1/2?scriptUserName=scr&scriptPassword=scrpw";
        assert_eq!(
            url(stored),
            "redis://gw:***@h:1/2?scriptUserName=scr&scriptPassword=***"
        );
        assert_eq!(restore(&url(stored), stored), Ok(stored.to_string()));
        assert!(
            restore(
                "redis://h:1?scriptUserName=s&scriptPassword=***",
                "redis://h:1"
            )
            .is_err()
        );
    }

    #[test]
    fn masks_passwords_only() {
        assert_eq!(url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(url("redis://pw@h:1/2"), "redis://***@h:1/2");
        assert_eq!(url("redis://app:p@ss@h:1"), "redis://app:***@h:1");
        assert_eq!(url("redis://@h:1?db=1"), "redis://@h:1?db=1");
        assert_eq!(
            url("redis-sentinel://s:1/m?sentinelPassword=sp&db=2"),
            "redis-sentinel://s:1/m?sentinelPassword=***&db=2"
        );
        assert_eq!(url("redis://***@h:1"), "redis://***@h:1");
        let doc = serde_json::json!({"a": ["redis://x@h:1", "main"], "b": 1});
        assert_eq!(
            value(doc),
            serde_json::json!({"a": ["redis://***@h:1", "main"], "b": 1})
        );
    }

    #[test]
    fn a_masked_secret_sent_back_keeps_the_stored_one() {
        let stored = "redis-sentinel://app:s3cr@t@s1:1,s2:2/m?sentinelPassword=sp&db=2";
        // Shown masked, edited (another sentinel, another db), sent back.
        assert_eq!(
            restore(
                "redis-sentinel://app:***@s1:1,s3:3/m?sentinelPassword=***&db=3",
                stored
            ),
            Ok("redis-sentinel://app:s3cr@t@s1:1,s3:3/m?sentinelPassword=sp&db=3".to_string())
        );
        // A new password replaces the stored one; only the masked secret is kept.
        assert_eq!(
            restore(
                "redis-sentinel://app:new@s1:1/m?sentinelPassword=***",
                stored
            ),
            Ok("redis-sentinel://app:new@s1:1/m?sentinelPassword=sp".to_string())
        );
        assert_eq!(
            restore("redis://***@h:2", "redis://pw@h:1"),
            Ok("redis://pw@h:2".to_string())
        );
        assert_eq!(
            restore("redis://u:***@h:1", "redis://pw@h:1"),
            Ok("redis://u:pw@h:1".to_string())
        );
        assert_eq!(
            restore("redis://h:1", "redis://pw@h:1"),
            Ok("redis://h:1".to_string())
        );
        assert!(restore("redis://***@h:1", "redis://h:1").is_err());
        assert!(
            restore(
                "redis-sentinel://s:1/m?sentinelPassword=***",
                "redis-sentinel://s:1/m"
            )
            .is_err()
        );
    }

    #[test]
    fn a_route_table_sent_back_masked_keeps_the_stored_secrets() {
        let single = |target: &str| RouteTable::single(Target::Resource(target.to_string()));
        let stored = single("redis://app:pw@h:1");
        assert_eq!(
            restore_route(route(stored.clone()), Some(&stored)),
            Ok(stored.clone())
        );
        assert_eq!(
            restore_route(single("redis://app:new@h:1"), Some(&stored)),
            Ok(single("redis://app:new@h:1"))
        );
        assert_eq!(restore_route(single("main"), None), Ok(single("main")));
        assert!(restore_route(single("redis://app:***@other:1"), Some(&stored)).is_err());
        assert!(restore_route(single("redis://***@h:1"), None).is_err());
    }

    #[test]
    fn route_tables_show_inline_urls_masked() {
        let table: RouteTable =
            serde_json::from_value(serde_json::json!({"type": "sharded", "shards": [
            {"name": "a", "target": "redis://pw@h:1"},
            {"name": "b", "target": {"read": {"resources": ["main", "redis://u:pw@r:1"]},
                                     "write": {"resources": ["redis://pw@w:1"]}}}]}))
            .unwrap();
        assert_eq!(
            serde_json::to_value(route(table)).unwrap(),
            serde_json::json!({"type": "sharded", "hash": {"algorithm": "ring"}, "shards": [
                {"name": "a", "target": "redis://***@h:1", "weight": 1},
                {"name": "b", "target": {"read": {"resources": ["main", "redis://u:***@r:1"], "policy": "primary"},
                                         "write": {"resources": ["redis://***@w:1"], "ack": "primary"}}, "weight": 1}]})
        );
    }
}
