//! The Prometheus text exposition format: metric families and their label sets.

use std::fmt::Write as _;

/// Writes one metric family: its HELP and TYPE lines, then a sample per (labels, value); empty labels write a
/// bare sample.
pub(in crate::metrics) fn family(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    samples: impl IntoIterator<Item = (String, impl std::fmt::Display)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// A label set as the exposition format writes it (`a="x",b="y"`), every value escaped: tenant names, backend
/// addresses and certificate sources come from routes files, snapshots and the network.
pub(in crate::metrics) fn labels(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(out, "{sep}{name}=\"{}\"", label_value(value));
    }
    out
}

/// A label value as the exposition format writes it: backslash, double quote and line feed escaped.
fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_value_escapes_backslash_quote_and_line_feed() {
        assert_eq!(label_value(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(label_value("line\nfeed"), r"line\nfeed");
        assert_eq!(label_value("plain:6379"), "plain:6379");
        assert_eq!(
            labels(&[("tenant", "x\"y"), ("command", "get")]),
            r#"tenant="x\"y",command="get""#
        );
    }
}
