//! [`Session`]: the one path every command takes to the API and back to the terminal: reads are fetched and
//! shown; changes are sent, or, with `--dry-run`, checked by the control plane (`?dry_run=true`) and shown as
//! the diff they would make.

use std::io::Write;

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::client::{Call, Client, Failure, Outcome, Reply};
use crate::output::{self, Format, View};

pub(crate) struct Session {
    pub(crate) client: Client,
    pub(crate) format: Format,
    pub(crate) dry_run: bool,
}

/// A change, and what it changes: `before` is where the object can be read now (none for an action that has no
/// readable object), `part` the pointer to what the diff compares (`""`: all of it).
pub(crate) struct Change {
    pub(crate) call: Call,
    pub(crate) before: Option<String>,
    pub(crate) part: &'static str,
    pub(crate) view: View,
    /// What a dry run says of the answer beside the diff (a route change: the keys it would move).
    pub(crate) note: Option<fn(&Value) -> String>,
}

impl Change {
    pub(crate) fn new(call: Call, view: View) -> Change {
        Change {
            call,
            before: None,
            part: "",
            view,
            note: None,
        }
    }

    pub(crate) fn note(mut self, note: fn(&Value) -> String) -> Change {
        self.note = Some(note);
        self
    }

    pub(crate) fn before(mut self, path: impl Into<String>, part: &'static str) -> Change {
        self.before = Some(path.into());
        self.part = part;
        self
    }
}

impl Session {
    pub(crate) async fn send(&self, call: &Call) -> Outcome<Reply> {
        self.client.send(call).await
    }

    /// A GET whose body is read as `T`.
    pub(crate) async fn read<T: DeserializeOwned>(&self, path: &str) -> Outcome<T> {
        let reply = self.send(&Call::get(path)).await?;
        Ok(serde_json::from_value(reply.body)
            .with_context(|| format!("the answer of GET {path}"))?)
    }

    pub(crate) fn print(&self, body: &Value, view: &View) -> Outcome {
        // A 204 has no body, and so JSON and YAML print nothing for it.
        if body.is_null() && self.format != Format::Table {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        out.write_all(output::render(self.format, body, view).as_bytes())?;
        Ok(())
    }

    /// Fetches and shows.
    pub(crate) async fn show(&self, call: Call, view: &View) -> Outcome {
        let reply = self.send(&call).await?;
        self.print(&reply.body, view)
    }

    /// What `path` holds now; `Null` when there is nothing there (404).
    pub(crate) async fn current(&self, path: &str) -> Outcome<Value> {
        match self.send(&Call::get(path)).await {
            Ok(reply) => Ok(reply.body),
            Err(Failure::Api { status, .. }) if status == 404 => Ok(Value::Null),
            Err(other) => Err(other),
        }
    }

    /// Sends a change and shows its answer; in a dry run, asks the control plane to check it without writing
    /// and shows the diff it would make (or, with `-o json|yaml`, the answer it would give).
    pub(crate) async fn change(&self, mut change: Change) -> Outcome<Reply> {
        if !self.dry_run {
            let reply = self.send(&change.call).await?;
            self.print(&reply.body, &change.view)?;
            return Ok(reply);
        }
        let before = match &change.before {
            Some(path) => self.current(path).await?,
            None => Value::Null,
        };
        change.call.query.push(("dry_run", "true".to_string()));
        let reply = self.send(&change.call).await?;
        match self.format {
            Format::Table => {
                let part = |body: &Value| match body.pointer(change.part) {
                    None | Some(Value::Null) => String::new(),
                    Some(value) => output::yaml(value),
                };
                let (old, new) = (part(&before), part(&reply.body));
                let diff = output::diff(&old, &new);
                let mut out = std::io::stdout().lock();
                writeln!(
                    out,
                    "dry run: {} {} passes the control plane's checks; nothing was changed",
                    change.call.method, change.call.path
                )?;
                if let Some(note) = change.note {
                    out.write_all(note(&reply.body).as_bytes())?;
                }
                // A change with nothing to show on either side (revoking a credential) gets no diff.
                match (diff.is_empty(), old.is_empty() && new.is_empty()) {
                    (_, true) => {}
                    (true, false) => writeln!(out, "no difference")?,
                    (false, false) => out.write_all(diff.as_bytes())?,
                }
            }
            _ => self.print(&reply.body, &change.view)?,
        }
        Ok(reply)
    }
}

/// Reads a JSON file (`-`: standard input) as `T`, naming the file and the place of a mistake.
pub(crate) fn read_json<T: DeserializeOwned>(path: &std::path::Path) -> Outcome<T> {
    let text = match path.as_os_str() == "-" {
        true => std::io::read_to_string(std::io::stdin())?,
        false => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
    };
    parse_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()).into())
}

/// Parses `text` as `T`; a mistake is named by where it is (`shards[0].target`) and serde's line and column.
pub(crate) fn parse_json<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| match e.path().to_string() {
        root if root == "." => e.inner().to_string(),
        path => format!("at {path}: {}", e.inner()),
    })
}
