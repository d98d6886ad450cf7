//! A tenant's policies as the gateway applies them (`switchyard_schemas::TenantPolicy` compiled): its key
//! namespace, read-only switch, command rules, client address lists and blocked keys.
//!
//! Each is compiled into the form that checks fast: command rules into ACL category bits and the table's names,
//! blocked keys into a set of literal keys and a list of glob patterns.

use std::collections::HashSet;
use std::net::IpAddr;

use bytes::Bytes;
use switchyard_schemas::{IpNet, ScriptsPolicy, TenantPolicy};

use super::Namespace;
use crate::cmd::glob::{self, Case};
use crate::cmd::spec::ACL_CATEGORY_NAMES;
use crate::cmd::spec::is_script;
use crate::cmd::{Command, CommandSpec, flag, lookup_by_name};

/// Redis' reply to a write on a read-only replica, which a read-only tenant gets for its writes.
const READONLY: &str = "READONLY You can't write against a read only replica.";

/// A tenant's policies, compiled. A tenant without any policy has none (`Policies::compile` answers `None`), so
/// that the many tenants without one cost nothing.
pub(crate) struct Policies {
    pub namespace: Option<Namespace>,
    pub read_only: bool,
    /// What its scripts may do (the tenant's own policy, or its resources' default).
    pub scripts: ScriptsPolicy,
    pub commands: CommandRules,
    pub ip_allow: Vec<IpNet>,
    pub ip_deny: Vec<IpNet>,
    pub blocked_keys: BlockedKeys,
}

impl Policies {
    /// The policies of a tenant whose `policy` passed `TenantPolicy::problems` (entries that would not parse
    /// are left out).
    pub(crate) fn compile(policy: &TenantPolicy) -> Option<Box<Policies>> {
        // Where its limits hold, and its near cache, are not policies of its commands.
        let none = TenantPolicy {
            limits_scope: policy.limits_scope,
            near_cache: policy.near_cache,
            ..TenantPolicy::default()
        };
        if *policy == none {
            return None;
        }
        let nets = |list: &[String]| list.iter().filter_map(|e| IpNet::parse(e).ok()).collect();
        Some(Box::new(Policies {
            namespace: policy.namespace.as_deref().map(Namespace::new),
            read_only: policy.read_only,
            scripts: policy.scripts.unwrap_or(ScriptsPolicy::Allow),
            commands: CommandRules {
                allow: CommandSet::compile(&policy.commands.allow),
                deny: CommandSet::compile(&policy.commands.deny),
            },
            ip_allow: nets(&policy.ip_allow),
            ip_deny: nets(&policy.ip_deny),
            blocked_keys: BlockedKeys::compile(&policy.blocked_keys),
        }))
    }

    /// Whether some command of the tenant's may be refused, or rewritten, by these policies: its requests must
    /// then be looked at one by one (no direct path).
    pub(crate) fn checks_commands(&self) -> bool {
        self.read_only
            || self.scripts != ScriptsPolicy::Allow
            || !self.commands.is_empty()
            || self.blocks_keys()
    }

    /// Whether some keys are blocked: only then are a command's keys looked for.
    pub(crate) fn blocks_keys(&self) -> bool {
        !self.blocked_keys.is_empty()
    }

    /// Whether a client at `address` may authenticate as the tenant: not in `ip_deny`, and in `ip_allow` unless
    /// it is empty.
    pub(crate) fn admits(&self, address: IpAddr) -> bool {
        let in_list = |list: &[IpNet]| list.iter().any(|net| net.contains(address));
        !in_list(&self.ip_deny) && (self.ip_allow.is_empty() || in_list(&self.ip_allow))
    }

    /// Why `spec` may not run with `args` (the tenant's, before any namespace): its command rules (`NOPERM`),
    /// the read-only switch (`READONLY`), or a blocked key among `keys` (indices into `args`, see
    /// `CommandSpec::key_indices`); `None` when it may.
    pub(crate) fn refusal(
        &self,
        spec: &CommandSpec,
        args: &[Bytes],
        keys: &[usize],
    ) -> Option<String> {
        if !self.commands.permit(spec) {
            return Some(noperm(spec));
        }
        if self.read_only && spec.has(flag::WRITE) {
            return Some(READONLY.to_string());
        }
        if self.scripts == ScriptsPolicy::Deny && is_script(spec) {
            return Some(format!(
                "ERR {} is refused: this tenant may not run scripts or functions (its scripts policy is deny)",
                spec.display_name()
            ));
        }
        keys.iter()
            .filter_map(|&i| args.get(i))
            .find(|key| self.blocked_keys.blocks(key))
            .map(|key| {
                format!(
                    "ERR key '{}' is blocked by the operator (blocked_keys)",
                    String::from_utf8_lossy(key)
                )
            })
    }

    /// The read-only form of a script command, for a read-only tenant or one whose scripts policy is
    /// `read_only` (`EVAL` runs as `EVAL_RO`, so that Redis refuses the writes inside it, and a script that never
    /// wrote can always be killed); `None` when `spec` needs no other form.
    pub(crate) fn script_form(&self, spec: &CommandSpec) -> Option<&'static CommandSpec> {
        if !self.read_only && self.scripts != ScriptsPolicy::ReadOnly {
            return None;
        }
        let read_only = match spec.id {
            Command::Eval => Command::EvalRo,
            Command::Evalsha => Command::EvalshaRo,
            Command::Fcall => Command::FcallRo,
            _ => return None,
        };
        Some(read_only.spec())
    }
}

/// Redis' `NOPERM` text for a command an ACL user may not run, as the Redis of the command table (7.0) words it,
/// with the command's full name (`config|set`). Redis 7.2 words it `User <name> has no permissions...`.
fn noperm(spec: &CommandSpec) -> String {
    format!(
        "NOPERM this user has no permissions to run the '{}' command",
        spec.name
    )
}

/// A tenant's `commands` rules, compiled.
#[derive(Default)]
pub(crate) struct CommandRules {
    allow: CommandSet,
    deny: CommandSet,
}

impl CommandRules {
    fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Whether the rules let `spec` run: it matches `allow` (unless empty) and not `deny`. `AUTH`, `HELLO` and
    /// `QUIT` always run, as Redis lets every user authenticate.
    pub(crate) fn permit(&self, spec: &CommandSpec) -> bool {
        if matches!(spec.id, Command::Auth | Command::Hello | Command::Quit) {
            return true;
        }
        (self.allow.is_empty() || self.allow.matches(spec)) && !self.deny.matches(spec)
    }
}

impl CommandRules {
    /// The rules as Redis ACL rules, for the user the tenant's scripts run as (`backend::identity`): inside a
    /// script, Redis holds the tenant to them as the gateway does outside.
    pub(crate) fn acl_rules(&self) -> Vec<String> {
        let mut rules = Vec::new();
        if !self.allow.is_empty() {
            rules.push("-@all".to_string());
            rules.extend(self.allow.acl_rules('+'));
        }
        rules.extend(self.deny.acl_rules('-'));
        rules
    }
}

/// Commands named by a rule list: ACL categories as bits, commands and subcommands by their table names (a
/// command's name also matches its subcommands).
#[derive(Default)]
struct CommandSet {
    categories: u32,
    /// The commands named (a container stands for all its subcommands), sorted by name.
    commands: Box<[&'static CommandSpec]>,
}

impl CommandSet {
    /// Compiles entries that passed `TenantPolicy::problems` (a command, `container|subcommand`, or
    /// `@category`, in any case); an entry the table does not know is left out.
    fn compile(entries: &[String]) -> CommandSet {
        let mut set = CommandSet::default();
        let mut commands: Vec<&'static CommandSpec> = Vec::new();
        for entry in entries {
            if let Some(category) = entry.strip_prefix('@') {
                set.categories |= ACL_CATEGORY_NAMES
                    .iter()
                    .find(|(name, _)| category.eq_ignore_ascii_case(name))
                    .map_or(0, |&(_, bits)| bits);
            } else if let Some(spec) = lookup_by_name(entry.as_bytes()) {
                commands.push(spec);
            }
        }
        // By name, as the ACL rules list them (a restricted user's name is a digest of its rules).
        commands.sort_unstable_by_key(|spec| spec.name);
        commands.dedup_by_key(|spec| spec.id);
        set.commands = commands.into();
        set
    }

    fn is_empty(&self) -> bool {
        self.categories == 0 && self.commands.is_empty()
    }

    /// `sign` and each category (`@name`) and command of the set, as ACL rules.
    fn acl_rules(&self, sign: char) -> impl Iterator<Item = String> + '_ {
        let categories = ACL_CATEGORY_NAMES
            .iter()
            .filter(|(_, bits)| self.categories & bits != 0)
            .map(move |(name, _)| format!("{sign}@{name}"));
        categories.chain(
            self.commands
                .iter()
                .map(move |spec| format!("{sign}{}", spec.name)),
        )
    }

    fn matches(&self, spec: &CommandSpec) -> bool {
        let container = spec.id.container();
        spec.acl_categories & self.categories != 0
            || self
                .commands
                .iter()
                .any(|named| named.id == spec.id || Some(named.id) == container)
    }
}

/// A tenant's `blocked_keys`, compiled: keys without glob characters are looked up, patterns are matched one by
/// one (case-sensitively, as Redis matches key patterns).
#[derive(Default)]
pub(crate) struct BlockedKeys {
    literal: HashSet<Bytes>,
    patterns: Vec<Bytes>,
}

impl BlockedKeys {
    fn compile(entries: &[String]) -> BlockedKeys {
        let mut keys = BlockedKeys::default();
        for entry in entries {
            let entry = Bytes::copy_from_slice(entry.as_bytes());
            if glob::is_literal(&entry) {
                keys.literal.insert(entry);
            } else {
                keys.patterns.push(entry);
            }
        }
        keys
    }

    fn is_empty(&self) -> bool {
        self.literal.is_empty() && self.patterns.is_empty()
    }

    /// Whether `key` is blocked.
    pub(crate) fn blocks(&self, key: &[u8]) -> bool {
        self.literal.contains(key)
            || self
                .patterns
                .iter()
                .any(|pattern| glob::matches(pattern, key, Case::Sensitive))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_schemas::CommandRules as Rules;

    fn policies(policy: TenantPolicy) -> Box<Policies> {
        assert_eq!(policy.problems(""), []);
        Policies::compile(&policy).unwrap()
    }

    fn rules(allow: &[&str], deny: &[&str]) -> Box<Policies> {
        let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        policies(TenantPolicy {
            commands: Rules {
                allow: list(allow),
                deny: list(deny),
            },
            ..TenantPolicy::default()
        })
    }

    fn spec(name: &str) -> &'static CommandSpec {
        lookup_by_name(name.as_bytes()).unwrap()
    }

    fn permits(policies: &Policies, name: &str) -> bool {
        policies.commands.permit(spec(name))
    }

    #[test]
    fn command_rules_become_the_acl_rules_of_the_tenants_scripts() {
        let p = rules(&["@read", "GET", "config|get"], &["hgetall"]);
        assert_eq!(
            p.commands.acl_rules(),
            ["-@all", "+@read", "+config|get", "+get", "-hgetall"]
        );
        assert_eq!(
            rules(&[], &["@dangerous"]).commands.acl_rules(),
            ["-@dangerous"]
        );
    }

    #[test]
    fn tenants_without_policies_have_none() {
        assert!(Policies::compile(&TenantPolicy::default()).is_none());
    }

    #[test]
    fn deny_by_category_command_and_subcommand() {
        let p = rules(&[], &["@dangerous", "CONFIG|set", "object"]);
        for denied in [
            "keys",
            "flushall",
            "config|get",
            "config|set",
            "object|encoding",
            "object",
        ] {
            assert!(!permits(&p, denied), "{denied}");
        }
        for permitted in [
            "get",
            "set",
            "type",
            "client|setname",
            "scan",
            "auth",
            "hello",
            "quit",
        ] {
            assert!(permits(&p, permitted), "{permitted}");
        }
        assert!(p.checks_commands());
    }

    #[test]
    fn allow_lists_admit_only_what_they_name() {
        let p = rules(&["@read", "set", "client|setname"], &["mget"]);
        for permitted in [
            "get",
            "scan",
            "set",
            "client|setname",
            "auth",
            "hello",
            "quit",
        ] {
            assert!(permits(&p, permitted), "{permitted}");
        }
        // Deny wins over allow; the container does not match when only one subcommand is named.
        for denied in ["mget", "del", "client|kill", "client", "multi", "ping"] {
            assert!(!permits(&p, denied), "{denied}");
        }
        // Even the commands the gateway answers itself.
        let p = rules(&["get"], &[]);
        assert!(!permits(&p, "select") && !permits(&p, "client|list") && !permits(&p, "multi"));
        assert_eq!(
            p.refusal(spec("config|set"), &[], &[]).as_deref(),
            Some("NOPERM this user has no permissions to run the 'config|set' command")
        );
    }

    /// The `NOPERM` text is 7.0's: a table of another Redis version needs its wording (see `noperm`).
    #[test]
    fn noperm_text_is_the_tables_redis_version() {
        assert!(crate::cmd::REDIS_VERSION.starts_with("7.0."));
    }

    #[test]
    fn read_only_refuses_writes_and_runs_scripts_read_only() {
        let p = policies(TenantPolicy {
            read_only: true,
            ..TenantPolicy::default()
        });
        assert_eq!(p.refusal(spec("set"), &[], &[]).as_deref(), Some(READONLY));
        assert_eq!(
            p.refusal(spec("flushdb"), &[], &[]).as_deref(),
            Some(READONLY)
        );
        assert_eq!(p.refusal(spec("get"), &[], &[]), None);
        assert_eq!(p.refusal(spec("publish"), &[], &[]), None);
        for (from, to) in [
            ("eval", "eval_ro"),
            ("evalsha", "evalsha_ro"),
            ("fcall", "fcall_ro"),
        ] {
            assert_eq!(p.script_form(spec(from)).map(|s| s.name), Some(to));
        }
        assert!(p.script_form(spec("eval_ro")).is_none());
        assert!(rules(&[], &["get"]).script_form(spec("eval")).is_none());
    }

    #[test]
    fn blocked_keys_are_literal_or_case_sensitive_patterns() {
        let p = policies(TenantPolicy {
            blocked_keys: vec!["hot".into(), "user:*:cart".into(), "[ab]?".into()],
            ..TenantPolicy::default()
        });
        for key in ["hot", "user:7:cart", "a1", "bb"] {
            assert!(p.blocked_keys.blocks(key.as_bytes()), "{key}");
        }
        for key in ["HOT", "hot2", "user:7:CART", "c1", "a", ""] {
            assert!(!p.blocked_keys.blocks(key.as_bytes()), "{key}");
        }
        let args = crate::cmd::words(&["MSET", "x", "1", "user:1:cart", "2"]);
        let mut keys = Vec::new();
        spec("mset").key_indices(&args, &mut keys).unwrap();
        assert_eq!(
            p.refusal(spec("mset"), &args, &keys).as_deref(),
            Some("ERR key 'user:1:cart' is blocked by the operator (blocked_keys)")
        );
        assert_eq!(p.refusal(spec("mset"), &args, &keys[..1]), None);
    }

    #[test]
    fn addresses_deny_wins_and_an_empty_allow_list_admits_all() {
        let nets = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        let p = |allow: &[&str], deny: &[&str]| {
            policies(TenantPolicy {
                ip_allow: nets(allow),
                ip_deny: nets(deny),
                ..TenantPolicy::default()
            })
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let denied = p(&[], &["10.0.0.0/8"]);
        assert!(!denied.admits(ip("10.1.2.3")));
        assert!(!denied.admits(ip("::ffff:10.1.2.3"))); // an IPv4 client of a dual-stack listener
        assert!(denied.admits(ip("127.0.0.1")));
        assert!(!denied.checks_commands());
        let allowed = p(&["10.0.0.0/8", "2001:db8::/32"], &["10.9.0.0/16"]);
        assert!(allowed.admits(ip("10.1.2.3")));
        assert!(allowed.admits(ip("::ffff:10.1.2.3")));
        assert!(allowed.admits(ip("2001:db8::7")));
        assert!(!allowed.admits(ip("10.9.0.1")));
        assert!(!allowed.admits(ip("127.0.0.1")));
        assert!(!allowed.admits(ip("::1")));
    }
}
