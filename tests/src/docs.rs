//! The docs' examples, run as written: code blocks found by the heading they sit under, and shell examples run by
//! bash against a real control plane.
//!
//! Every `curl` in a shell example fails the run on an HTTP error status (it is run with `--fail-with-body`), so
//! an example that answers 404 or 422 is caught even though the reader's `curl -s` would print the error and go
//! on. The blocks of a page run in one shell, in order: variables set by one are seen by the next, as in the
//! reader's terminal.

use std::process::Command;

use serde_json::json;

use crate::{ControlPlane, RedisServer};

/// One fenced code block of a page.
#[derive(Debug, Clone)]
pub struct CodeBlock {
    /// The nearest `#` heading above it (with its `#`s), e.g. `### Credentials`.
    pub heading: String,
    /// The line of the opening fence (1-based), for messages.
    pub line: usize,
    pub language: String,
    pub text: String,
}

/// Every fenced code block of `markdown`, in order.
pub fn code_blocks(markdown: &str) -> Vec<CodeBlock> {
    let mut blocks = Vec::new();
    let mut heading = String::new();
    // The open block and its fence's indentation.
    let mut open: Option<(CodeBlock, usize)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(fence) = trimmed.strip_prefix("```") {
            match open.take() {
                Some((block, _)) => blocks.push(block),
                None => {
                    let block = CodeBlock {
                        heading: heading.clone(),
                        line: index + 1,
                        language: fence.trim().to_string(),
                        text: String::new(),
                    };
                    open = Some((block, line.len() - trimmed.len()));
                }
            }
        } else if let Some((block, indent)) = open.as_mut() {
            // A block inside a list item is indented with its fence: the reader copies it from the fence's column.
            let margin = line.len() - trimmed.len();
            block.text.push_str(&line[margin.min(*indent)..]);
            block.text.push('\n');
        } else if line.starts_with('#') {
            heading = line.trim().to_string();
        }
    }
    blocks
}

/// The shell blocks that call `curl` or `switchyard-ctl`, from the heading `from` to the heading `to` (the first
/// one after `from`; the end of the page when `None`).
pub fn example_blocks(markdown: &str, from: &str, to: Option<&str>) -> Vec<CodeBlock> {
    let line_of = |heading: &str| {
        markdown
            .lines()
            .position(|line| line.trim() == heading)
            .unwrap_or_else(|| panic!("no heading {heading}"))
            + 1
    };
    let first = line_of(from);
    let last = to.map_or(usize::MAX, line_of);
    code_blocks(markdown)
        .into_iter()
        .filter(|b| {
            b.line > first
                && b.line < last
                && b.language == "sh"
                && (b.text.contains("curl ") || b.text.contains("switchyard-ctl "))
        })
        .collect()
}

/// The first block of `language` under the heading `heading`.
pub fn code_block(markdown: &str, heading: &str, language: &str) -> String {
    code_blocks(markdown)
        .into_iter()
        .find(|b| b.heading == heading && b.language == language)
        .unwrap_or_else(|| panic!("no {language} block under {heading}"))
        .text
}

/// Runs `blocks` in one `bash -euo pipefail`, with `env` set and `replacements` (`(written, used)`: an address
/// or token of the docs, and the test's own) applied to each block's text. Panics with the output and the line
/// of the block that failed.
pub fn run_shell_blocks(
    blocks: &[CodeBlock],
    replacements: &[(&str, String)],
    env: &[(&str, String)],
) -> String {
    let mut script = String::from(
        "set -E\ncurl() { command curl --fail-with-body \"$@\"; }\n\
         trap 'echo \"failed in the block at line $block\" >&2' ERR\n",
    );
    for block in blocks {
        let mut text = block.text.clone();
        for (written, used) in replacements {
            text = text.replace(written, used);
        }
        script.push_str(&format!("block={}\n{text}\necho\n", block.line));
    }
    // The files an example writes (a token file, a route to PUT) go to a directory of the run's own.
    let dir = std::env::temp_dir().join(format!(
        "switchyard-docs-{}-{}",
        std::process::id(),
        blocks.first().map_or(0, |b| b.line)
    ));
    std::fs::create_dir_all(&dir).expect("a directory for the examples");
    let mut command = Command::new("bash");
    command
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(&dir);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("run bash");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// What the docs' examples start from, as `scripts/quickstart` sets it up: a resource `main` (`redis`) and a
/// tenant `demo` routed to it.
pub async fn quickstart_tenant(cp: &ControlPlane, redis: &RedisServer) {
    cp.expect(
        "POST",
        "/v1/resources",
        Some(json!({"name": "main", "url": redis.url()})),
        201,
    )
    .await;
    cp.create_tenant("demo", json!({"type": "single", "target": "main"}))
        .await;
}
