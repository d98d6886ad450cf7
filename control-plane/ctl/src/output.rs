//! How answers are shown: a table (or a few lines) for people, or the API's body as JSON or YAML for programs,
//! and a line diff of two documents.

use std::fmt::Write;

use clap::ValueEnum;
use serde_json::Value;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Columns for people.
    Table,
    /// The API's response body, unchanged.
    Json,
    /// The same value as YAML.
    Yaml,
}

/// How one kind of answer reads as a table.
pub(crate) enum View {
    /// One row per element of the array at `list` (a JSON pointer; `""`: the body is the only row), with the
    /// column headers and the pointers (into each row) of their cells.
    Rows {
        list: &'static str,
        columns: &'static [(&'static str, &'static str)],
    },
    /// Free text built from the body.
    Text(fn(&Value) -> String),
}

impl View {
    /// The columns of a single object.
    pub(crate) const fn one(columns: &'static [(&'static str, &'static str)]) -> View {
        View::Rows { list: "", columns }
    }

    /// What a 204 shows.
    pub(crate) fn deleted() -> View {
        View::Text(|_| "deleted\n".to_string())
    }

    fn render(&self, body: &Value) -> String {
        match self {
            View::Text(text) => text(body),
            View::Rows { list, columns } => {
                let rows: Vec<&Value> = match body.pointer(list) {
                    Some(Value::Array(items)) => items.iter().collect(),
                    Some(one) if list.is_empty() => vec![one],
                    _ => Vec::new(),
                };
                let cells: Vec<Vec<String>> = rows
                    .iter()
                    .map(|row| columns.iter().map(|(_, p)| cell(row.pointer(p))).collect())
                    .collect();
                let headers: Vec<String> = columns.iter().map(|(h, _)| h.to_string()).collect();
                table(&headers, &cells)
            }
        }
    }
}

/// One value as a table cell: strings unquoted, lists comma-separated, nothing as `-`.
pub(crate) fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "-".to_string(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(items)) if items.is_empty() => "-".to_string(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| cell(Some(item)))
            .collect::<Vec<_>>()
            .join(","),
        Some(other) => other.to_string(),
    }
}

/// Aligned columns, two spaces apart; the last column is not padded.
pub(crate) fn table(headers: &[String], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(headers).chain(rows.iter().map(Vec::as_slice)) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            match i + 1 == row.len() {
                true => line.push_str(cell),
                false => {
                    let _ = write!(line, "{cell:<width$}  ");
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The body in `format`, `view` giving the table.
pub(crate) fn render(format: Format, body: &Value, view: &View) -> String {
    match format {
        Format::Json => json(body),
        Format::Yaml => yaml(body),
        Format::Table => view.render(body),
    }
}

pub(crate) fn json(body: &Value) -> String {
    let mut text = serde_json::to_string_pretty(body).unwrap_or_default();
    text.push('\n');
    text
}

/// YAML for a JSON value: block style, two-space indents, strings quoted (JSON-style) whenever a plain scalar
/// could read as something else.
pub(crate) fn yaml(value: &Value) -> String {
    let mut out = String::new();
    match is_block(value) {
        true => block(value, 0, &mut out),
        false => {
            out.push_str(&scalar(value));
            out.push('\n');
        }
    }
    out
}

fn is_block(value: &Value) -> bool {
    match value {
        Value::Object(map) => !map.is_empty(),
        Value::Array(items) => !items.is_empty(),
        _ => false,
    }
}

fn block(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let _ = write!(out, "{pad}{}:", string(key));
                match is_block(child) {
                    true => {
                        out.push('\n');
                        block(child, indent + 2, out);
                    }
                    false => {
                        let _ = writeln!(out, " {}", scalar(child));
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                let _ = write!(out, "{pad}- ");
                match is_block(item) {
                    // The item's first line goes after the dash, the rest at the item's indent.
                    true => {
                        let mut nested = String::new();
                        block(item, indent + 2, &mut nested);
                        out.push_str(&nested[indent + 2..]);
                    }
                    false => {
                        let _ = writeln!(out, "{}", scalar(item));
                    }
                }
            }
        }
        _ => {}
    }
}

fn scalar(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::String(text) => string(text),
        Value::Object(_) => "{}".to_string(),
        Value::Array(_) => "[]".to_string(),
        other => other.to_string(),
    }
}

/// A string plain when it cannot be mistaken for another type or for YAML syntax, else double-quoted (a JSON
/// string is a valid YAML double-quoted scalar). Anything starting with a digit is quoted: YAML 1.1 parsers read
/// numbers, times and dates in more shapes than are worth telling apart.
fn string(text: &str) -> String {
    const WORDS: &[&str] = &["null", "true", "false", "yes", "no", "on", "off", "y", "n"];
    let plain = text
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '/' || c == '_')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./@+-:".contains(c))
        && !text.ends_with(':')
        && !WORDS.contains(&text.to_ascii_lowercase().as_str());
    match plain {
        true => text.to_string(),
        false => Value::String(text.to_string()).to_string(),
    }
}

/// A line diff of `old` and `new`: removed lines with `-`, added with `+`, at most `CONTEXT` unchanged lines
/// kept around each change. Empty when they are equal.
pub(crate) fn diff(old: &str, new: &str) -> String {
    const CONTEXT: usize = 3;
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    // The longest common subsequence, by dynamic programming from the ends (documents here are small).
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = match a[i] == b[j] {
                true => lcs[i + 1][j + 1] + 1,
                false => lcs[i + 1][j].max(lcs[i][j + 1]),
            };
        }
    }
    let mut lines: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            lines.push((' ', a[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            lines.push(('-', a[i]));
            i += 1;
        } else {
            lines.push(('+', b[j]));
            j += 1;
        }
    }
    let changed: Vec<usize> = (0..lines.len()).filter(|&k| lines[k].0 != ' ').collect();
    let near = |k: usize| changed.iter().any(|&c| c.abs_diff(k) <= CONTEXT);
    let mut out = String::new();
    let mut skipped = false;
    for (k, (mark, line)) in lines.iter().enumerate() {
        if !near(k) {
            skipped = true;
            continue;
        }
        if skipped {
            out.push_str("  ...\n");
            skipped = false;
        }
        let _ = writeln!(out, "{mark} {line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn yaml_quotes_what_would_read_as_another_type() {
        let value = json!({
            "empty": "", "flag": "yes", "list": [{"a": 1, "b": [true, null]}, []], "name": "shop",
            "none": {}, "port": "6379", "text": "a: b", "url": "redis://127.0.0.1:6379/0"
        });
        assert_eq!(
            yaml(&value),
            "empty: \"\"\nflag: \"yes\"\nlist:\n  - a: 1\n    b:\n      - true\n      - null\n  - []\n\
             name: shop\nnone: {}\nport: \"6379\"\ntext: \"a: b\"\nurl: redis://127.0.0.1:6379/0\n"
        );
    }

    #[test]
    fn diff_keeps_context_around_changes() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nd\ne\nf\nG\nh\n";
        assert_eq!(diff(old, new), "  ...\n  d\n  e\n  f\n- g\n+ G\n  h\n");
        assert_eq!(diff(old, old), "");
    }

    #[test]
    fn tables_align_columns() {
        let headers = vec!["NAME".to_string(), "URL".to_string()];
        let rows = vec![vec!["a".to_string(), "redis://x".to_string()]];
        assert_eq!(table(&headers, &rows), "NAME  URL\na     redis://x\n");
    }
}
