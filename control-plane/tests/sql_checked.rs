//! Every query in `control-plane/src` and `control-plane/tests` is checked at compile time: a `query!`, `query_as!`
//! or `query_scalar!` macro, never SQL in a run-time string (docs/control-plane.md, "Changing SQL"). SQL that must
//! be built at run time says why in a comment containing `dynamic SQL:` on the line above it.

use std::path::{Path, PathBuf};

/// The sqlx functions and types that take SQL the compiler does not see.
const UNCHECKED: &[&str] = &[
    "query",
    "query_as",
    "query_scalar",
    "query_with",
    "query_as_with",
    "query_scalar_with",
    "raw_sql",
    "QueryBuilder",
];

/// Executor methods also run a plain string.
const STRING_EXECUTION: &[&str] = &[
    "execute(\"",
    "fetch(\"",
    "fetch_all(\"",
    "fetch_one(\"",
    "fetch_optional(\"",
    "prepare(\"",
];

/// Whether `code` names an unchecked sqlx item (`sqlx::query(`, `sqlx::query_as::<`, `use sqlx::{query, ..}`,
/// `sqlx::query_unchecked!`); the checked macros (`sqlx::query!`) pass.
fn names_unchecked(code: &str) -> bool {
    code.match_indices("sqlx::").any(|(at, prefix)| {
        let rest = &code[at + prefix.len()..];
        let rest = rest.trim_start_matches(['{', ' ']);
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let macro_call = rest[name.len()..].trim_start().starts_with('!');
        let unchecked_macro = macro_call && name.ends_with("_unchecked");
        unchecked_macro
            || (!macro_call && UNCHECKED.contains(&name.as_str()))
            || (code.trim_start().starts_with("use sqlx::")
                && code
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|word| UNCHECKED.contains(&word)))
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_rule_sees_unchecked_sql() {
    for code in [
        r#"sqlx::query("SELECT 1")"#,
        r#"sqlx::query_as::<_, Row>("SELECT 1")"#,
        r#"sqlx::query_scalar ("SELECT 1")"#,
        r#"sqlx::query_unchecked!("SELECT 1")"#,
        "use sqlx::{PgPool, query};",
        "use sqlx::QueryBuilder;",
    ] {
        assert!(names_unchecked(code), "{code}");
    }
    for code in [
        r#"sqlx::query!("SELECT 1")"#,
        r#"sqlx::query_as!(Row, "SELECT 1")"#,
        r#"sqlx::query_scalar! ("SELECT 1")"#,
        "use sqlx::{PgConnection, PgExecutor};",
        "query.limit",
    ] {
        assert!(!names_unchecked(code), "{code}");
    }
}

#[test]
fn every_query_is_checked_at_compile_time() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&crate_dir.join("src"), &mut files);
    rust_files(&crate_dir.join("tests"), &mut files);
    // This file spells out the unchecked forms, to test the rule itself.
    let this_file = crate_dir.join("tests").join("sql_checked.rs");
    files.retain(|file| *file != this_file);
    let mut unchecked = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        let mut previous = "";
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let found =
                names_unchecked(code) || STRING_EXECUTION.iter().any(|call| code.contains(call));
            if found && !previous.contains("dynamic SQL:") {
                unchecked.push(format!(
                    "{}:{}: {}",
                    file.display(),
                    number + 1,
                    line.trim()
                ));
            }
            previous = line;
        }
    }
    assert!(files.len() > 20, "found only {} source files", files.len());
    assert!(
        unchecked.is_empty(),
        "SQL the compiler does not check (use query!/query_as!/query_scalar!):\n{}",
        unchecked.join("\n")
    );
}
