//! INFO as redis-server 7.0 writes it: every section and field in its order (`fields`), each valued from the
//! gateway (what the gateway is to the client), a neutral constant (what the gateway has no counterpart of), or
//! the tenant's backends combined field by field (what describes the data and the servers holding it), with the
//! keyspace section summed over the backends and showing a tenant its own databases only (`keyspace`).
//!
//! A backend that fails adds nothing: its fields take the other backends' values, or their neutral ones.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::Range;

use bytes::{Bytes, BytesMut};

use crate::resp::{self, Protocol};

mod fields;
mod keyspace;

pub(crate) use fields::SECTIONS;
use fields::{Combine, KEYSPACE, Section, Source};

/// What the gateway puts into one INFO reply: the sections asked for, its own fields' values, and the lines of
/// the sections it fills itself (`commandstats`, `errorstats`).
#[derive(Default)]
pub(crate) struct Local {
    sections: Vec<&'static Section>,
    values: HashMap<&'static str, String>,
    lines: HashMap<&'static str, String>,
}

impl Local {
    /// The sections INFO's arguments (`args[1..]`) ask for, in Redis' order: `INFO`, `INFO default`, `INFO
    /// all`/`everything` (Redis' sections), or names in any case (the gateway's own sections too).
    pub(crate) fn asked(args: &[Bytes]) -> Local {
        let requested = args.get(1..).unwrap_or_default();
        let wanted = |section: &Section| {
            requested.is_empty() && section.default
                || requested.iter().any(|arg| {
                    let arg = arg.to_ascii_lowercase();
                    arg == section.name.as_bytes()
                        || (arg == b"all" || arg == b"everything") && !section.own
                        || (arg == b"default" && section.default)
                })
        };
        Local {
            sections: SECTIONS.iter().filter(|s| wanted(s)).collect(),
            ..Local::default()
        }
    }

    /// Whether `section` is asked for.
    pub(crate) fn wants(&self, section: &str) -> bool {
        self.sections.iter().any(|s| s.name == section)
    }

    /// Sets the gateway's value of `field`.
    pub(crate) fn set(&mut self, field: &'static str, value: impl ToString) {
        self.values.insert(field, value.to_string());
    }

    /// Sets the lines (`name:value\r\n` each) of a section the gateway fills itself.
    pub(crate) fn set_lines(&mut self, section: &'static str, lines: String) {
        self.lines.insert(section, lines);
    }

    /// The sections asked for that take values from the backends (none: answer alone). All of them are among
    /// Redis' default sections.
    pub(crate) fn backend_sections(&self) -> Vec<&'static str> {
        self.sections
            .iter()
            .filter(|s| {
                s.name == KEYSPACE
                    || s.fields
                        .iter()
                        .any(|f| matches!(f.source, Source::Backend(..)))
            })
            .map(|s| s.name)
            .collect()
    }

    /// The INFO reply, with the backends' fields combined from `replies` (their INFO replies) and the keyspace
    /// of the databases in `own` (numbered from its start; `None`: every database as it is).
    pub(crate) fn reply(
        &self,
        replies: &[Bytes],
        own: Option<Range<u32>>,
        protocol: Protocol,
    ) -> Bytes {
        let bodies = bodies(replies);
        let combined: HashMap<&str, String> = combine(&bodies).into_iter().collect();
        let mut text = String::new();
        for section in &self.sections {
            if !text.is_empty() {
                text.push_str("\r\n");
            }
            let _ = write!(text, "# {}\r\n", section.title);
            for field in section.fields {
                let value = match field.source {
                    Source::Gateway => self.values.get(field.name).map_or("", String::as_str),
                    Source::Neutral(value) => value,
                    Source::Backend(_, none) => {
                        combined.get(field.name).map_or(none, String::as_str)
                    }
                };
                let _ = write!(text, "{}:{value}\r\n", field.name);
            }
            if let Some(lines) = self.lines.get(section.name) {
                text.push_str(lines);
            }
            if section.name == KEYSPACE {
                keyspace::write(&mut text, &keyspace::sum(&bodies, own.clone()));
            }
        }
        verbatim(&text, protocol)
    }
}

/// One cluster's masters' INFO replies combined into one reply shaped as one backend's, which is combined again
/// with the other shards' (every combination is associative).
pub(crate) fn partial(replies: &[Bytes], protocol: Protocol) -> Bytes {
    let bodies = bodies(replies);
    let mut text = String::new();
    for (name, value) in combine(&bodies) {
        let _ = write!(text, "{name}:{value}\r\n");
    }
    keyspace::write(&mut text, &keyspace::sum(&bodies, None));
    verbatim(&text, protocol)
}

fn verbatim(text: &str, protocol: Protocol) -> Bytes {
    let mut out = BytesMut::new();
    resp::verbatim(&mut out, text.as_bytes(), protocol);
    out.freeze()
}

/// The text of every reply that is one (a failed backend's error is left out), as its fields.
fn bodies(replies: &[Bytes]) -> Vec<HashMap<&str, &str>> {
    replies
        .iter()
        .filter_map(|reply| keyspace::bulk_body(reply))
        .filter_map(|body| std::str::from_utf8(body).ok())
        .map(|text| {
            text.split("\r\n")
                .filter(|line| !line.starts_with('#'))
                .filter_map(|line| line.split_once(':'))
                .collect()
        })
        .collect()
}

/// Every backend field that some backend has, combined.
fn combine(bodies: &[HashMap<&str, &str>]) -> Vec<(&'static str, String)> {
    let mut combined: Vec<(&'static str, String)> = Vec::new();
    for field in SECTIONS.iter().flat_map(|s| s.fields) {
        let Source::Backend(how, _) = field.source else {
            continue;
        };
        let mut values = bodies
            .iter()
            .filter_map(|body| body.get(field.name).copied());
        let numbers = || values.clone().filter_map(|v| v.parse::<i64>().ok());
        let value = match how {
            Combine::First => values.next().map(str::to_string),
            Combine::Sum => numbers()
                .reduce(|a, b| a.saturating_add(b))
                .map(|n| n.to_string()),
            Combine::Max => numbers().max().map(|n| n.to_string()),
            Combine::Min => numbers().min().map(|n| n.to_string()),
            Combine::Status => values
                .clone()
                .next()
                .map(|_| values.find(|v| *v != "ok").unwrap_or("ok").to_string()),
            Combine::Human(of) => combined
                .iter()
                .find(|(name, _)| *name == of)
                .and_then(|(_, bytes)| bytes.parse::<u64>().ok())
                .map(human_bytes),
        };
        if let Some(value) = value {
            combined.push((field.name, value));
        }
    }
    combined
}

/// Redis' `*_human` format: `1.50M`.
fn human_bytes(bytes: u64) -> String {
    let mut value = bytes as f64;
    for unit in ["B", "K", "M", "G", "T"] {
        if value < 1024.0 || unit == "T" {
            return if unit == "B" {
                format!("{bytes}B")
            } else {
                format!("{value:.2}{unit}")
            };
        }
        value /= 1024.0;
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests;
