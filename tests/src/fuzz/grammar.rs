//! The command table as the fuzzer reads it: every command and subcommand of the backend's own `COMMAND DOCS`,
//! each as its tree of arguments (key, string, integer, double, pattern, unix-time, pure-token, oneof, block;
//! optional, multiple, tokens). The table is read from the Redis under test at run time, so a command a new Redis
//! adds is fuzzed the day the backend has it, whether the gateway knows it or not.

use redis::Value;

/// One command or subcommand: the words that name it (`["CONFIG", "SET"]`) and its arguments.
pub(crate) struct CommandShape {
    pub(crate) words: Vec<String>,
    pub(crate) args: Vec<ArgShape>,
    /// Every token of the argument tree (`STORE`, `DB`, `BY`, ...): an attacker spells keys and values like them.
    pub(crate) tokens: Vec<String>,
}

impl CommandShape {
    /// The name as `COMMAND DOCS` writes it (`config|set`), for signatures and reports.
    pub(crate) fn name(&self) -> String {
        self.words.join("|").to_lowercase()
    }
}

/// One argument of the tree.
pub(crate) struct ArgShape {
    pub(crate) name: String,
    pub(crate) kind: ArgKind,
    pub(crate) token: Option<String>,
    pub(crate) optional: bool,
    pub(crate) multiple: bool,
    /// The token is repeated before every value (`GET p GET q`), not only the first.
    pub(crate) multiple_token: bool,
}

pub(crate) enum ArgKind {
    Key,
    String,
    Integer,
    Double,
    Pattern,
    UnixTime,
    PureToken,
    Oneof(Vec<ArgShape>),
    Block(Vec<ArgShape>),
}

/// Reads `COMMAND DOCS` (RESP2: maps as flat arrays) into shapes, container commands replaced by their
/// subcommands, sorted by name so that a seed draws the same commands on every run against the same Redis.
pub(crate) fn command_table(docs: &Value) -> Vec<CommandShape> {
    let mut commands = Vec::new();
    for (name, doc) in pairs(docs) {
        collect(&text(name), doc, &mut commands);
    }
    commands.sort_by_key(CommandShape::name);
    commands
}

fn collect(name: &str, doc: &Value, out: &mut Vec<CommandShape>) {
    if let Some(subcommands) = field(doc, "subcommands") {
        for (sub, sub_doc) in pairs(subcommands) {
            collect(&text(sub), sub_doc, out);
        }
        return;
    }
    let args: Vec<ArgShape> = field(doc, "arguments")
        .map(|list| elements(list).iter().map(arg_shape).collect())
        .unwrap_or_default();
    let mut tokens = Vec::new();
    gather_tokens(&args, &mut tokens);
    tokens.sort();
    tokens.dedup();
    out.push(CommandShape {
        words: name.split('|').map(str::to_uppercase).collect(),
        args,
        tokens,
    });
}

fn gather_tokens(args: &[ArgShape], out: &mut Vec<String>) {
    for arg in args {
        out.extend(arg.token.clone());
        if let ArgKind::Oneof(inner) | ArgKind::Block(inner) = &arg.kind {
            gather_tokens(inner, out);
        }
    }
}

fn arg_shape(doc: &Value) -> ArgShape {
    let flags: Vec<String> = field(doc, "flags")
        .map(|f| elements(f).iter().map(text).collect())
        .unwrap_or_default();
    let inner = || -> Vec<ArgShape> {
        field(doc, "arguments")
            .map(|list| elements(list).iter().map(arg_shape).collect())
            .unwrap_or_default()
    };
    let kind = match field(doc, "type").map(text).as_deref() {
        Some("key") => ArgKind::Key,
        Some("integer") => ArgKind::Integer,
        Some("double") => ArgKind::Double,
        Some("pattern") => ArgKind::Pattern,
        Some("unix-time") => ArgKind::UnixTime,
        Some("pure-token") => ArgKind::PureToken,
        Some("oneof") => ArgKind::Oneof(inner()),
        Some("block") => ArgKind::Block(inner()),
        _ => ArgKind::String,
    };
    ArgShape {
        name: field(doc, "name").map(text).unwrap_or_default(),
        kind,
        token: field(doc, "token").map(text),
        optional: flags.iter().any(|f| f == "optional"),
        multiple: flags.iter().any(|f| f == "multiple"),
        multiple_token: flags.iter().any(|f| f == "multiple_token"),
    }
}

/// The value of `name` in a RESP2 map (a flat array of name, value, ...) or a RESP3 map.
fn field<'a>(map: &'a Value, name: &str) -> Option<&'a Value> {
    pairs(map)
        .into_iter()
        .find(|(k, _)| text(k) == name)
        .map(|(_, v)| v)
}

fn pairs(map: &Value) -> Vec<(&Value, &Value)> {
    match map {
        Value::Map(entries) => entries.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(flat) => flat.chunks_exact(2).map(|kv| (&kv[0], &kv[1])).collect(),
        _ => Vec::new(),
    }
}

fn elements(list: &Value) -> &[Value] {
    match list {
        Value::Array(items) | Value::Set(items) => items,
        _ => &[],
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        Value::Okay => "OK".to_string(),
        _ => String::new(),
    }
}
