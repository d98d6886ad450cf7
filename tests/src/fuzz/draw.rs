//! The hostile grammar: draws a case for any command of the table the way an attacker writes it. Arguments follow
//! the command's tree, then are bent: options repeated (a second `STORE`, `DB`, `STREAMS`), tokens spelled in
//! other cases or dropped where a key is expected, keys named like the command's tokens or with another tenant's
//! namespace in front of them or exactly as another tenant's keys are stored, binary and empty arguments,
//! numbers out of range or naming other databases. Every case is drawn from its own generator, seeded by the run's
//! seed and the case's number, so one case replays alone.

use fastrand::Rng;

use super::case::{Arg, Case, Command, Wrap};
use super::grammar::{ArgKind, ArgShape, CommandShape};
use super::platform::{Place, SEEDED_KEYS, TENANTS};
use super::vocabulary::{
    CHANNELS, CONFIG_PARAMETERS, DATABASES, DEBUG_SUBCOMMANDS, DEEP_READS, DOUBLES, GIGABYTES,
    INTEGERS, LIBRARIES, LUA_SCRIPTS, PATTERNS, SECTIONS, UNIX_TIMES, UNKILLABLE_SCRIPT, USERNAMES,
    VALUES, WEIRD_KEYS,
};

/// Cases in a row sent by one attacker: the digest of every other tenant's data is compared after each window,
/// and the attacker's own keys seeded again.
pub(crate) const WINDOW: u64 = 100;

/// What the drawing needs to know about the platform.
pub(crate) struct Drawer {
    commands: Vec<CommandShape>,
    /// Each tenant's own `DUMP`s (and forged variants), the `RESTORE` payloads it can have.
    payloads: Vec<Vec<Vec<u8>>>,
    /// The backend's and the gateway's ports, which an attacker may guess for `MIGRATE` or `REPLICAOF`.
    ports: [u16; 2],
    admin_script_sha: String,
    /// How often each command is drawn, relative to the others.
    weights: Vec<u32>,
}

impl Drawer {
    pub(crate) fn new(
        commands: Vec<CommandShape>,
        payloads: Vec<Vec<Vec<u8>>>,
        ports: [u16; 2],
        admin_script_sha: String,
    ) -> Drawer {
        let weights = commands.iter().map(weight).collect();
        Drawer {
            commands,
            weights,
            payloads,
            ports,
            admin_script_sha,
        }
    }

    pub(crate) fn commands(&self) -> usize {
        self.commands.len()
    }

    /// Case `number` of the run seeded `seed`: always the same case for the same table.
    pub(crate) fn case(&self, seed: u64, number: u64) -> Case {
        let attacker_index = attacker(seed, number);
        let mut rng = Rng::with_seed(mix(seed, number));
        let wrap = match rng.u8(0..20) {
            0..=8 => Wrap::Plain,
            9..=12 => Wrap::Multi,
            13..=15 => Wrap::EvalKeys,
            16..=17 => Wrap::EvalArgv,
            _ => Wrap::Fcall,
        };
        let pool = self.key_pool(attacker_index);
        // A few keys per case, so that a later command of the case often names a key an earlier one wrote: one
        // the attacker has (a source that exists), one of the whole pool, one spelled like another's.
        let case_keys: Vec<Vec<u8>> = vec![
            SEEDED_KEYS[rng.usize(..SEEDED_KEYS.len())]
                .as_bytes()
                .to_vec(),
            pool[rng.usize(..pool.len())].clone(),
            pool[rng.usize(SEEDED_KEYS.len()..pool.len())].clone(),
        ];
        let mut drawing = Drawing {
            rng,
            drawer: self,
            attacker: attacker_index,
            pool,
            case_keys,
            tokens: Vec::new(),
            scripted: matches!(wrap, Wrap::EvalKeys | Wrap::EvalArgv | Wrap::Fcall),
        };
        let shape = self.pick_command(&mut drawing.rng);
        let mut commands = vec![drawing.command(shape)];
        if matches!(wrap, Wrap::Plain | Wrap::Multi) && drawing.rng.f32() < 0.3 {
            let follow_up = match drawing.rng.bool() {
                true => drawing.deep_read(&commands[0]),
                false => {
                    let shape = self.pick_command(&mut drawing.rng);
                    drawing.command(shape)
                }
            };
            commands.push(follow_up);
        }
        Case {
            number,
            attacker: &TENANTS[attacker_index],
            wrap,
            commands,
        }
    }

    /// Every command of the table, those with keys or with options an attacker can repeat drawn more often.
    fn pick_command(&self, rng: &mut Rng) -> &CommandShape {
        let total: u32 = self.weights.iter().sum();
        let mut at = rng.u32(..total);
        for (shape, weight) in self.commands.iter().zip(&self.weights) {
            if at < *weight {
                return shape;
            }
            at -= weight;
        }
        &self.commands[0]
    }

    fn key_pool(&self, attacker: usize) -> Vec<Vec<u8>> {
        let mut pool: Vec<Vec<u8>> = SEEDED_KEYS
            .iter()
            .chain(&["mine", "dst", "new"])
            .map(|k| k.as_bytes().to_vec())
            .collect();
        for (i, tenant) in TENANTS.iter().enumerate() {
            let Place::Namespace { prefix } = tenant.place else {
                continue;
            };
            // Another tenant's keys as they are stored; its bare prefix; our own prefix spelled out again.
            for name in ["str", "hash", "list", "STORE"] {
                pool.push(format!("{prefix}{name}").into_bytes());
            }
            pool.push(prefix.as_bytes().to_vec());
            pool.push(prefix.trim_end_matches(':').as_bytes().to_vec());
            if i == attacker {
                pool.push(format!("{prefix}{prefix}str").into_bytes());
            }
        }
        pool.extend(WEIRD_KEYS.iter().map(|k| k.to_vec()));
        pool.push(vec![b'k'; 600]);
        pool
    }
}

/// A command with keys counts twice, one with an option that can be given twice (`STORE`, `DB`) three times more.
fn weight(shape: &CommandShape) -> u32 {
    fn has(args: &[ArgShape], what: &dyn Fn(&ArgShape) -> bool) -> bool {
        args.iter().any(|a| {
            what(a)
                || match &a.kind {
                    ArgKind::Oneof(inner) | ArgKind::Block(inner) => has(inner, what),
                    _ => false,
                }
        })
    }
    let keys = has(&shape.args, &|a| matches!(a.kind, ArgKind::Key));
    let options = shape
        .args
        .iter()
        .any(|a| a.optional && a.token.is_some() && !a.multiple);
    1 + u32::from(keys) + 3 * u32::from(options)
}

/// The attacker of case `number`: one tenant for each window of cases.
pub(crate) fn attacker(seed: u64, number: u64) -> usize {
    let window = number / WINDOW;
    Rng::with_seed(mix(seed ^ 0x5eed_0fa7_7ac4_e5d1, window)).usize(..TENANTS.len())
}

/// splitmix64 of the seed and a number: neighbouring cases get unrelated generators.
fn mix(seed: u64, number: u64) -> u64 {
    let mut z = seed
        .wrapping_add(number.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The state of drawing one case.
struct Drawing<'a> {
    rng: Rng,
    drawer: &'a Drawer,
    attacker: usize,
    pool: Vec<Vec<u8>>,
    case_keys: Vec<Vec<u8>>,
    /// The tokens of the command being drawn.
    tokens: Vec<String>,
    /// The case's commands run inside a script (see `GIGABYTES`).
    scripted: bool,
}

impl Drawing<'_> {
    fn command(&mut self, shape: &CommandShape) -> Command {
        self.tokens = shape.tokens.clone();
        let mut args: Vec<Arg> = shape.words.iter().map(|w| plain(w.as_bytes())).collect();
        let fixed = args.len();
        if shape.words == ["DEBUG"] {
            let sub = DEBUG_SUBCOMMANDS[self.rng.usize(..DEBUG_SUBCOMMANDS.len())];
            args.extend(self.template(sub));
        } else if shape.args.is_empty() {
            for _ in 0..self.rng.usize(0..3) {
                let value = self.value();
                args.push(plain(&value));
            }
        } else {
            self.sequence(&shape.args, &mut args);
        }
        self.bend(shape, fixed, &mut args);
        Command {
            name: shape.name(),
            args,
        }
    }

    /// A read of one of `first`'s keys (or of a case key) that walks its value.
    fn deep_read(&mut self, first: &Command) -> Command {
        let keys: Vec<&Arg> = first.args.iter().filter(|a| a.key).collect();
        let key = match keys.is_empty() {
            true => self.case_keys[0].clone(),
            false => keys[self.rng.usize(..keys.len())].bytes.clone(),
        };
        let template = DEEP_READS[self.rng.usize(..DEEP_READS.len())];
        let mut args = vec![plain(template[0].as_bytes())];
        if template.len() == 1 {
            args.push(Arg {
                bytes: key,
                key: true,
            });
        } else {
            args.extend(template[1..].iter().map(|w| match *w {
                "@" => Arg {
                    bytes: key.clone(),
                    key: true,
                },
                w => plain(w.as_bytes()),
            }));
        }
        Command {
            name: template[0].to_lowercase(),
            args,
        }
    }

    /// A fixed argument list, `@` standing for a key.
    fn template(&mut self, words: &[&str]) -> Vec<Arg> {
        words
            .iter()
            .map(|w| match *w {
                "@" => Arg {
                    bytes: self.key(),
                    key: true,
                },
                w => plain(w.as_bytes()),
            })
            .collect()
    }

    fn sequence(&mut self, args: &[ArgShape], out: &mut Vec<Arg>) {
        for arg in args {
            self.argument(arg, out, false);
        }
    }

    fn argument(&mut self, arg: &ArgShape, out: &mut Vec<Arg>, forced: bool) {
        if arg.optional && !forced && self.rng.f32() < 0.4 {
            return;
        }
        let count = if arg.multiple {
            self.rng.usize(1..=3)
        } else {
            1
        };
        for i in 0..count {
            if let Some(token) = &arg.token
                && (i == 0 || arg.multiple_token)
            {
                let spelled = self.spell(token);
                out.push(plain(spelled.as_bytes()));
            }
            match &arg.kind {
                ArgKind::PureToken => {}
                ArgKind::Oneof(alternatives) if !alternatives.is_empty() => {
                    let choice = &alternatives[self.rng.usize(..alternatives.len())];
                    self.argument(choice, out, true);
                }
                ArgKind::Block(inner) => self.sequence(inner, out),
                ArgKind::Oneof(_) => {}
                ArgKind::Key => out.push(Arg {
                    bytes: self.key(),
                    key: true,
                }),
                kind => {
                    let value = self.scalar(arg, kind);
                    out.push(plain(&value));
                }
            }
        }
    }

    /// The attacker's twists on a well-formed command (after its first `fixed` words).
    fn bend(&mut self, shape: &CommandShape, fixed: usize, args: &mut Vec<Arg>) {
        // A second copy of an option Redis keeps the last of: STORE, DB, STREAMS, BY...
        let repeatable: Vec<&ArgShape> = shape
            .args
            .iter()
            .filter(|a| a.optional && a.token.is_some() && !a.multiple)
            .collect();
        if !repeatable.is_empty() && self.rng.f32() < 0.35 {
            let arg = repeatable[self.rng.usize(..repeatable.len())];
            for _ in 0..self.rng.usize(1..=2) {
                self.argument(arg, args, true);
            }
        }
        // A token where it does not belong.
        if !self.tokens.is_empty() && self.rng.f32() < 0.08 {
            let token = self.tokens[self.rng.usize(..self.tokens.len())].clone();
            let at = self.rng.usize(fixed..=args.len());
            args.insert(at, plain(token.as_bytes()));
        }
        // One argument too few, or one too many.
        if args.len() > fixed && self.rng.f32() < 0.05 {
            let at = self.rng.usize(fixed..args.len());
            args.remove(at);
        }
        if self.rng.f32() < 0.05 {
            let value = self.value();
            args.push(plain(&value));
        }
    }

    fn spell(&mut self, token: &str) -> String {
        match self.rng.u8(0..10) {
            0 => token.to_lowercase(),
            1 => {
                let mut chars: Vec<char> = token.chars().collect();
                if let Some(first) = chars.first_mut() {
                    *first = first.to_ascii_lowercase();
                }
                chars.into_iter().collect()
            }
            _ => token.to_string(),
        }
    }

    fn key(&mut self) -> Vec<u8> {
        match self.rng.u8(0..20) {
            0..=11 => self.case_keys[self.rng.usize(..self.case_keys.len())].clone(),
            12..=14 if !self.tokens.is_empty() => {
                // A key named like one of the command's keywords.
                self.tokens[self.rng.usize(..self.tokens.len())]
                    .clone()
                    .into_bytes()
            }
            _ => self.pool[self.rng.usize(..self.pool.len())].clone(),
        }
    }

    fn scalar(&mut self, arg: &ArgShape, kind: &ArgKind) -> Vec<u8> {
        let name = arg.name.as_str();
        // Blocking timeouts stay short (a case that waits forever only costs time); rarely 0, which blocks.
        let timeout = name == "timeout" || arg.token.as_deref() == Some("BLOCK");
        let pick = |rng: &mut Rng, list: &[&str]| list[rng.usize(..list.len())].as_bytes().to_vec();
        match kind {
            ArgKind::Integer if timeout => match self.rng.u16(0..200) {
                0 => b"0".to_vec(),
                _ => pick(&mut self.rng, &["1", "10", "50", "-1"]),
            },
            ArgKind::Double if timeout => match self.rng.u16(0..200) {
                0 => b"0".to_vec(),
                _ => pick(&mut self.rng, &["0.01", "0.05", "-1", "abc"]),
            },
            ArgKind::Integer if name.contains("db") || name.starts_with("index") => {
                // Half the time one the attacker may name, so that a check of the first occurrence passes.
                let own = match TENANTS[self.attacker].place {
                    Place::Databases { count, .. } => count,
                    Place::Namespace { .. } => 1,
                };
                match self.rng.bool() {
                    true => self.rng.u32(0..own).to_string().into_bytes(),
                    false => pick(&mut self.rng, DATABASES),
                }
            }
            ArgKind::Integer if name == "port" => {
                let port = self.drawer.ports[self.rng.usize(..2)];
                port.to_string().into_bytes()
            }
            ArgKind::Integer if name == "numkeys" => {
                pick(&mut self.rng, &["0", "1", "2", "3", "-1", "100"])
            }
            ArgKind::Integer if !self.scripted && self.rng.u8(0..10) == 0 => {
                pick(&mut self.rng, GIGABYTES)
            }
            ArgKind::Integer => pick(&mut self.rng, INTEGERS),
            ArgKind::Double => pick(&mut self.rng, DOUBLES),
            ArgKind::Pattern => pick(&mut self.rng, PATTERNS),
            ArgKind::UnixTime => pick(&mut self.rng, UNIX_TIMES),
            _ => self.string(name),
        }
    }

    fn string(&mut self, name: &str) -> Vec<u8> {
        let pick = |rng: &mut Rng, list: &[&str]| list[rng.usize(..list.len())].as_bytes().to_vec();
        match name {
            "script" if !TENANTS[self.attacker].write_scripts && self.rng.u8(0..40) == 0 => {
                UNKILLABLE_SCRIPT.as_bytes().to_vec()
            }
            "script" => pick(&mut self.rng, LUA_SCRIPTS),
            "function-code" => pick(&mut self.rng, LIBRARIES),
            "serialized-value" => {
                let payloads = &self.drawer.payloads[self.attacker];
                match payloads.is_empty() {
                    true => self.value(),
                    false => payloads[self.rng.usize(..payloads.len())].clone(),
                }
            }
            "sha1" => match self.rng.bool() {
                true => self.drawer.admin_script_sha.clone().into_bytes(),
                false => b"0000000000000000000000000000000000000000".to_vec(),
            },
            "function" => b"fuzz_call".to_vec(),
            "library-name" => pick(&mut self.rng, &["fuzzlib", "evil"]),
            "channel" | "shardchannel" => pick(&mut self.rng, CHANNELS),
            "parameter" => pick(&mut self.rng, CONFIG_PARAMETERS),
            "username" => pick(&mut self.rng, USERNAMES),
            "section" => pick(&mut self.rng, SECTIONS),
            "host" | "ip" => b"127.0.0.1".to_vec(),
            _ => self.value(),
        }
    }

    /// A generic value: often one of the command's keywords or a key, otherwise from the hostile list.
    fn value(&mut self) -> Vec<u8> {
        match self.rng.u8(0..10) {
            0..=1 if !self.tokens.is_empty() => self.tokens[self.rng.usize(..self.tokens.len())]
                .clone()
                .into_bytes(),
            2 => self.key(),
            _ => VALUES[self.rng.usize(..VALUES.len())].to_vec(),
        }
    }
}

fn plain(bytes: &[u8]) -> Arg {
    Arg {
        bytes: bytes.to_vec(),
        key: false,
    }
}
