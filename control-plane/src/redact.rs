//! Masking of backend passwords in resource URLs, for everything that is kept or shown beyond the snapshot
//! (the audit log).

use serde_json::Value;

const MASK: &str = "***";

/// The URL with its password (and a `sentinelPassword` parameter) replaced by `***`; other text unchanged.
pub fn url(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_string();
    };
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let mut out = format!("{scheme}://");
    match userinfo {
        Some("") => out.push('@'),
        Some(info) => {
            match info.split_once(':') {
                Some((user, _)) => out.push_str(&format!("{user}:{MASK}")),
                None => out.push_str(MASK),
            }
            out.push('@');
        }
        None => {}
    }
    match after.split_once('?') {
        Some((location, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("sentinelPassword", _)) => format!("sentinelPassword={MASK}"),
                    _ => pair.to_string(),
                })
                .collect();
            out.push_str(&format!("{location}?{}", query.join("&")));
        }
        None => out.push_str(after),
    }
    out
}

/// Masks every URL-looking string anywhere in a JSON document.
pub fn value(value: Value) -> Value {
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
    fn masks_passwords_only() {
        assert_eq!(url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(url("redis://pw@h:1/2"), "redis://***@h:1/2");
        assert_eq!(url("redis://app:p@ss@h:1"), "redis://app:***@h:1");
        assert_eq!(url("redis://@h:1?db=1"), "redis://@h:1?db=1");
        assert_eq!(
            url("redis-sentinel://s:1/m?sentinelPassword=sp&db=2"),
            "redis-sentinel://s:1/m?sentinelPassword=***&db=2"
        );
        let doc = serde_json::json!({"a": ["redis://x@h:1", "main"], "b": 1});
        assert_eq!(
            value(doc),
            serde_json::json!({"a": ["redis://***@h:1", "main"], "b": 1})
        );
    }
}
