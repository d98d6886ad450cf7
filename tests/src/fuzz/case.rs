//! A case: what one attacker tenant sends on one connection (one to three commands, plain, inside `MULTI`/`EXEC`,
//! or run by a script through `EVAL` or `FCALL`), how it goes on the wire, and how a person replays it with
//! `redis-cli`.

use super::platform::Tenant;

/// A script that runs its arguments as a command, an argument `KEYS[i]` standing for its i-th key: the keys are
/// passed as `KEYS` (and placed by the gateway), the rest of the command as it is.
pub(crate) const KEYS_SCRIPT: &str = "local a = {} for i, v in ipairs(ARGV) do \
    local n = string.match(v, '^KEYS%[(%d+)%]$') if n then a[i] = KEYS[tonumber(n)] else a[i] = v end end \
    return redis.call(unpack(a))";
/// A script that runs its arguments as a command, keys included, without naming them as `KEYS`.
pub(crate) const ARGV_SCRIPT: &str = "return redis.call(unpack(ARGV))";

/// How the commands of a case are sent.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Wrap {
    /// One after the other.
    Plain,
    /// Inside `MULTI` ... `EXEC`.
    Multi,
    /// `EVAL` of [`KEYS_SCRIPT`], the keys passed as `KEYS`.
    EvalKeys,
    /// `EVAL` of [`ARGV_SCRIPT`], no `KEYS`.
    EvalArgv,
    /// `FCALL fuzz_call` of the admin's library, the keys passed as keys.
    Fcall,
}

impl Wrap {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Wrap::Plain => "plain",
            Wrap::Multi => "in MULTI",
            Wrap::EvalKeys => "in EVAL (keys as KEYS)",
            Wrap::EvalArgv => "in EVAL (keys as ARGV)",
            Wrap::Fcall => "in FCALL",
        }
    }
}

/// One argument, and whether the command table's grammar put a key there.
#[derive(Clone)]
pub(crate) struct Arg {
    pub(crate) bytes: Vec<u8>,
    pub(crate) key: bool,
}

/// One command: its table name (`config|set`) and every argument, the command's own words first.
pub(crate) struct Command {
    pub(crate) name: String,
    pub(crate) args: Vec<Arg>,
}

pub(crate) struct Case {
    pub(crate) number: u64,
    pub(crate) attacker: &'static Tenant,
    pub(crate) wrap: Wrap,
    pub(crate) commands: Vec<Command>,
}

impl Case {
    /// What makes two failures the same kind: the commands and the wrap.
    pub(crate) fn signature(&self) -> String {
        let names: Vec<&str> = self.commands.iter().map(|c| c.name.as_str()).collect();
        format!("{} {}", names.join(" + "), self.wrap.label())
    }

    /// The requests as sent after `AUTH`, in order.
    pub(crate) fn requests(&self) -> Vec<Vec<Vec<u8>>> {
        let plain = |c: &Command| c.args.iter().map(|a| a.bytes.clone()).collect::<Vec<_>>();
        match self.wrap {
            Wrap::Plain => self.commands.iter().map(plain).collect(),
            Wrap::Multi => {
                let mut requests = vec![vec![b"MULTI".to_vec()]];
                requests.extend(self.commands.iter().map(plain));
                requests.push(vec![b"EXEC".to_vec()]);
                requests
            }
            Wrap::EvalKeys | Wrap::Fcall => self
                .commands
                .iter()
                .map(|command| {
                    let mut keys = Vec::new();
                    let mut argv = Vec::new();
                    for arg in &command.args {
                        if arg.key {
                            keys.push(arg.bytes.clone());
                            argv.push(format!("KEYS[{}]", keys.len()).into_bytes());
                        } else {
                            argv.push(arg.bytes.clone());
                        }
                    }
                    let mut request = match self.wrap {
                        Wrap::Fcall => vec![b"FCALL".to_vec(), b"fuzz_call".to_vec()],
                        _ => vec![b"EVAL".to_vec(), KEYS_SCRIPT.as_bytes().to_vec()],
                    };
                    request.push(keys.len().to_string().into_bytes());
                    request.extend(keys);
                    request.extend(argv);
                    request
                })
                .collect(),
            Wrap::EvalArgv => self
                .commands
                .iter()
                .map(|command| {
                    let mut request = vec![
                        b"EVAL".to_vec(),
                        ARGV_SCRIPT.as_bytes().to_vec(),
                        b"0".to_vec(),
                    ];
                    request.extend(plain(command));
                    request
                })
                .collect(),
        }
    }

    /// The whole conversation as RESP: `AUTH`, the requests, `QUIT` (so the gateway closes the connection once
    /// everything is answered, whatever state the case left it in).
    pub(crate) fn wire(&self) -> Vec<u8> {
        let mut wire = Vec::new();
        let auth = [
            b"AUTH".to_vec(),
            self.attacker.name.as_bytes().to_vec(),
            self.attacker.password().into_bytes(),
        ];
        encode(&auth, &mut wire);
        for request in self.requests() {
            encode(&request, &mut wire);
        }
        encode(&[b"QUIT".to_vec()], &mut wire);
        wire
    }

    /// A shell snippet that replays the case through a gateway on `$GATEWAY_PORT` with `redis-cli`, which reads
    /// one command a line from its standard input and understands the quoting used here.
    pub(crate) fn redis_cli(&self) -> String {
        let mut text = format!(
            "redis-cli -p $GATEWAY_PORT --user {} --pass {} --no-auth-warning <<'EOF'\n",
            self.attacker.name,
            self.attacker.password()
        );
        for request in self.requests() {
            let words: Vec<String> = request.iter().map(|w| quote(w)).collect();
            text.push_str(&words.join(" "));
            text.push('\n');
        }
        text.push_str("EOF");
        text
    }
}

pub(crate) fn encode(args: &[Vec<u8>], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// An argument as redis-cli reads it back: bare when it is plain printable text, otherwise double-quoted with
/// `\xHH` escapes.
pub(crate) fn quote(arg: &[u8]) -> String {
    let bare = !arg.is_empty()
        && arg
            .iter()
            .all(|&b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\'' | b'\\'));
    if bare {
        return String::from_utf8_lossy(arg).into_owned();
    }
    let mut quoted = String::from("\"");
    for &b in arg {
        match b {
            b'"' => quoted.push_str("\\\""),
            b'\\' => quoted.push_str("\\\\"),
            b' ' | b'\'' => quoted.push(b as char),
            b if b.is_ascii_graphic() => quoted.push(b as char),
            b => quoted.push_str(&format!("\\x{b:02x}")),
        }
    }
    quoted.push('"');
    quoted
}
