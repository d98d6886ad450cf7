//! Who the gateway is on a backend: the Redis ACL users its data connections run as, so that a tenant's
//! scripts, which the gateway cannot read, stay inside what the gateway checks for the tenant's own commands.
//!
//! Every connection to a data node (standalone, sentinel-managed, cluster node) logs in with the resource's
//! credentials, creates or refreshes two users, selects its database, and then logs in as
//! [`GATEWAY_USER`] for good:
//! - [`GATEWAY_USER`] may run every command except scripts and functions (`EVAL`, `FCALL`, ...). The gateway
//!   checks each command a tenant sends (database, channels, admin commands) before it forwards it.
//! - [`SCRIPT_USER`] runs a non-admin tenant's scripts and functions. It cannot change or name another database
//!   (`SELECT`, `MOVE`, `SWAPDB`, `COPY`), reach another server (`MIGRATE`), flush, publish or list channels
//!   (channel names are tenants' own, see the pub/sub docs), or run admin commands.
//!
//! A script is sent between two `AUTH`s on the same connection: `AUTH <script user>`, the script,
//! `AUTH <gateway user>`, in one write, so it keeps its place among the client's other commands. It fails
//! closed: if the first `AUTH` fails the script runs as the gateway user, which may not run scripts, and if the
//! last one fails the connection is closed before anything else is read from it as if it were the gateway user's
//! ([`BackendConnection`](super::BackendConnection) checks both replies). An admin tenant's scripts run as the
//! resource's own user instead of the script user.
//!
//! The users' passwords derive from the resource's credentials, so every gateway computes the same ones and no
//! gateway overwrites another's; Redis only ever sees their SHA-256 (`#` rules).
//!
//! A non-admin tenant with a key namespace (tenants that share one database) runs its scripts as its
//! namespace's user instead of [`SCRIPT_USER`]: the same denials, and only the keys that start with its prefix
//! (`~<prefix>*`, glob-escaped), nor may it list the database's keys (`KEYS`, `SCAN`, ...). The gateway rewrites
//! the keys a script is given (`KEYS[]`), not those it computes itself: Redis refuses those (`NOPERM`) when they
//! are outside the namespace. Such a user is created on a connection the first time the connection runs one of
//! its scripts (`ACL SETUSER` in the same write, before the `AUTH`), and then remembered until the connection
//! closes, so a node that restarted or failed over, whose connections are new, gets it again. Its name is a
//! digest of the namespace (a namespace may hold characters a user name may not), and its password derives
//! like the others'.
//!
//! Where the gateway may not create users (managed services), the resource URL names an operator-provisioned
//! script user (`NodeSpec::script_user`): the URL's own user is then the gateway's, and the handshake checks that
//! it may not run scripts. The gateway cannot create namespaces' users there either: the scripts of a tenant with
//! a namespace are refused ([`refusal`]).

use std::fmt::Write;
use std::sync::OnceLock;

use bytes::{Bytes, BytesMut};
use sha2::{Digest, Sha256};
use switchyard_schemas::credential_digest;

use super::NodeSpec;
use crate::cmd::policy::{SCRIPT_COMMANDS, is_script};
use crate::cmd::{Command, CommandSpec, flag};
pub(crate) use crate::reply::{RestrictedUser, RunAs, ScriptUser};
use crate::resp;
use crate::tenancy::{self, Reading};

/// The user the gateway's data connections rest as.
pub(crate) const GATEWAY_USER: &str = "switchyard-gateway";

/// The user non-admin tenants' scripts and functions run as.
pub(crate) const SCRIPT_USER: &str = "switchyard-script";

/// What both users start from: `reset` first, so that a user is exactly what the gateway says whatever an older
/// version or an operator left, then every key, channel and command.
const BASE_RULES: &[&str] = &["reset", "on", "~*", "&*", "+@all"];

/// What [`SCRIPT_USER`] may not run besides `@admin` (a category, so admin commands of later Redis versions are
/// denied too) and what the gateway refuses to tenants outside scripts ([`script_denied`]): everything that
/// reaches past the tenant's own database and channels, which the gateway renames outside scripts and cannot
/// inside. ([`GATEWAY_USER`] may not run [`SCRIPT_COMMANDS`].)
const SCRIPT_RENAMED: &[Command] = &[
    Command::Select,
    Command::Move,
    Command::Swapdb,
    Command::Copy,
    Command::Migrate,
    Command::Flushall,
    Command::Flushdb,
    Command::Publish,
    Command::Spublish,
    Command::Pubsub,
    Command::Info,
];

/// What every tenant's script may not run: `@admin`, [`SCRIPT_RENAMED`], and every command the gateway refuses
/// to a tenant without `allow_admin` when it sends it itself (`tenancy::refusal`: server-wide introspection
/// and actions, commands it does not read), so that a script reaches no further than its tenant's own commands.
fn script_denied() -> &'static [String] {
    static DENIED: OnceLock<Vec<String>> = OnceLock::new();
    DENIED.get_or_init(|| {
        let refused = every_command().filter(|spec| script_refused(spec));
        std::iter::once("@admin")
            .chain(SCRIPT_RENAMED.iter().map(|id| id.spec().name))
            .chain(refused.map(|spec| spec.name))
            .map(str::to_string)
            .collect()
    })
}

/// Whether [`script_denied`] names `spec` itself (not only through `@admin`).
fn script_denies(spec: &CommandSpec) -> bool {
    SCRIPT_RENAMED.contains(&spec.id) || script_refused(spec)
}

/// The commands [`script_denied`] names because the gateway refuses them to tenants.
fn script_refused(spec: &CommandSpec) -> bool {
    // `ASKING` is refused to tenants, who have no use for it, and is what the gateway itself sends, as the
    // script's user, right before a script that a slot's migration redirected (`ASK`).
    !spec.has(flag::ADMIN)
        && !SCRIPT_RENAMED.contains(&spec.id)
        && spec.id != Command::Asking
        && tenancy::refusal(spec, false).is_some()
}

/// What a namespace's user may not run besides [`script_denied`]: what would show it other namespaces' keys
/// (commands over the whole database, which name no key Redis could check against the namespace), and the
/// commands whose keys Redis' ACL finds by their key specs where execution reads others (`SORT ... STORE`,
/// `XREADGROUP ... STREAMS`: `tenancy::Reading::Parsed`).
fn namespace_denied() -> &'static [String] {
    static DENIED: OnceLock<Vec<String>> = OnceLock::new();
    DENIED.get_or_init(|| {
        let unchecked = every_command().filter(|spec| {
            matches!(
                tenancy::reading(spec),
                Reading::Database | Reading::Parsed(_)
            ) && !script_denies(spec)
        });
        ["keys", "cluster|getkeysinslot", "cluster|countkeysinslot"]
            .into_iter()
            .chain(unchecked.map(|spec| spec.name))
            .map(str::to_string)
            .collect()
    })
}

/// Every command of the table, subcommands included.
fn every_command() -> impl Iterator<Item = &'static CommandSpec> {
    crate::cmd::commands()
        .iter()
        .flat_map(|spec| std::iter::once(spec).chain(spec.subcommands))
}

/// The user of the tenants whose keys start with `prefix` (any key without one) and whose commands are held to
/// `commands` (ACL rules), see the module's docs.
fn restricted_user(prefix: Option<&[u8]>, commands: Vec<String>) -> RestrictedUser {
    let mut digest = Sha256::new().chain_update(b"switchyard restricted\0");
    if let Some(prefix) = prefix {
        digest.update(b"namespace\0");
        digest.update(prefix);
    }
    for rule in &commands {
        digest.update(b"\0");
        digest.update(rule.as_bytes());
    }
    let digest = digest.finalize();
    // 128 bits: no two namespaces or rule sets of a platform meet.
    let mut name = String::from("switchyard-ns-");
    for byte in &digest[..16] {
        let _ = write!(name, "{byte:02x}");
    }
    let mut keys = Vec::with_capacity(prefix.map_or(0, <[u8]>::len) + 8);
    keys.push(b'~');
    for &byte in prefix.unwrap_or_default() {
        if matches!(byte, b'*' | b'?' | b'[' | b']' | b'\\') {
            keys.push(b'\\');
        }
        keys.push(byte);
    }
    keys.push(b'*');
    RestrictedUser {
        name,
        keys,
        commands,
    }
}

/// Who a tenant's scripts run as (`admin`: the tenant has `allow_admin`; `namespace`: its key prefix;
/// `commands`: its command rules as ACL rules), computed once per tenant.
pub(crate) fn scripts_run_as(
    admin: bool,
    namespace: Option<&[u8]>,
    commands: Vec<String>,
) -> RunAs {
    match (admin, namespace) {
        (true, _) => RunAs::script(ScriptUser::Admin),
        (false, None) if commands.is_empty() => RunAs::script(ScriptUser::Tenant),
        (false, namespace) => {
            RunAs::script(ScriptUser::Restricted(restricted_user(namespace, commands)))
        }
    }
}

/// Who `spec` runs as for a tenant whose scripts run as `scripts` (see [`scripts_run_as`]).
pub(crate) fn run_as(spec: &CommandSpec, scripts: &RunAs) -> RunAs {
    match is_script(spec) {
        false => RunAs::Gateway,
        true => scripts.clone(),
    }
}

/// Why `node` does not run scripts as `run_as`, as the error reply its client gets: the gateway cannot create a
/// tenant's restricted user where the operator provisions the users.
pub(crate) fn refusal(node: &NodeSpec, run_as: &RunAs) -> Option<Bytes> {
    match (run_as.script_user(), &node.script_user) {
        (Some(ScriptUser::Restricted(_)), Some(_)) => Some(resp::error_reply(
            "NOPERM scripts of a tenant with a key namespace or command rules cannot run on this resource: its \
             script user is provisioned by the operator (scriptUserName), and the gateway may not create the \
             user that keeps a script inside the namespace and the rules",
        )),
        _ => None,
    }
}

/// The password of `user` on a node: derived from the resource's own credentials, the same on every gateway.
fn password(node: &NodeSpec, user: &str) -> String {
    credential_digest(&format!(
        "switchyard acl user\0{user}\0{}\0{}",
        node.username.as_deref().unwrap_or("default"),
        node.password.as_deref().unwrap_or("")
    ))
}

/// What no user of the gateway's may run on a node that does not check `RESTORE` payloads
/// (`sanitize-dump-payload no`, Redis 7.0's default): a crafted payload crashes the server, every tenant's.
const UNCHECKED_PAYLOADS: &[&str] = &["restore", "restore-asking"];

/// The handshake commands that create or refresh both users (run as the resource's user, before `SELECT`);
/// `sanitizes_payloads`: the node checks `RESTORE` payloads.
pub(crate) fn setup_commands(node: &NodeSpec, sanitizes_payloads: bool, out: &mut BytesMut) {
    let payloads = payload_denials(sanitizes_payloads);
    for (user, mut rules) in [
        (SCRIPT_USER, denials(script_denied())),
        (
            GATEWAY_USER,
            denials(SCRIPT_COMMANDS.iter().map(|id| id.spec().name)),
        ),
    ] {
        rules.extend(payloads.iter().cloned());
        set_user(node, user, b"~*", &rules, out);
    }
}

/// The denials of [`UNCHECKED_PAYLOADS`] where the node does not check them.
fn payload_denials(sanitizes_payloads: bool) -> Vec<String> {
    match sanitizes_payloads {
        true => Vec::new(),
        false => denials(UNCHECKED_PAYLOADS),
    }
}

/// `-name` for each of `names`.
fn denials<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Vec<String> {
    names
        .into_iter()
        .map(|name| format!("-{}", name.as_ref()))
        .collect()
}

/// `ACL SETUSER` of `user` on `node`: [`BASE_RULES`] with `keys` for its key rule, then `rules`.
fn set_user(node: &NodeSpec, user: &str, keys: &[u8], rules: &[String], out: &mut BytesMut) {
    let mut args: Vec<Vec<u8>> = ["ACL", "SETUSER", user]
        .iter()
        .chain(BASE_RULES)
        .map(|arg| match *arg {
            "~*" => keys.to_vec(),
            arg => arg.as_bytes().to_vec(),
        })
        .collect();
    args.extend(rules.iter().map(|rule| rule.as_bytes().to_vec()));
    args.push(format!("#{}", credential_digest(&password(node, user))).into_bytes());
    resp::command(out, &args);
}

/// Writes to `out` what switches a connection to `node` to `run_as` for a script: the `ACL SETUSER` that
/// creates a tenant's restricted user first unless `created` (the connection did already), then the `AUTH`.
/// Answers how many commands that is: as many `+OK`s come before the script's reply. `sanitizes_payloads`: the
/// node checks `RESTORE` payloads.
pub(crate) fn switch_to(
    node: &NodeSpec,
    run_as: &RunAs,
    created: bool,
    sanitizes_payloads: bool,
    out: &mut BytesMut,
) -> u8 {
    let creates = match run_as.script_user() {
        Some(ScriptUser::Restricted(user)) if !created && node.script_user.is_none() => {
            // The tenant's own rules first, the script users' denials last, so that no rule of a tenant's
            // (`+@all`) allows back what they deny.
            let mut rules = user.commands.clone();
            rules.extend(denials(script_denied()));
            if user.keys != b"~*" {
                rules.extend(denials(namespace_denied()));
            }
            rules.extend(payload_denials(sanitizes_payloads));
            set_user(node, &user.name, &user.keys, &rules, out);
            1
        }
        _ => 0,
    };
    out.extend_from_slice(&auth_command(node, run_as));
    creates + 1
}

/// The `AUTH` that switches a connection to `run_as` on `node` (a namespace's user must exist: see
/// [`switch_to`]).
pub(crate) fn auth_command(node: &NodeSpec, run_as: &RunAs) -> Bytes {
    // A resource without a password logs in as `default`, which then has `nopass`: any password does.
    let resource = || {
        (
            node.username.as_deref().unwrap_or("default"),
            node.password.clone().unwrap_or_default(),
        )
    };
    let (user, password) = match (run_as.script_user(), &node.script_user) {
        (None, None) => (GATEWAY_USER, password(node, GATEWAY_USER)),
        (Some(ScriptUser::Tenant), None) => (SCRIPT_USER, password(node, SCRIPT_USER)),
        (Some(ScriptUser::Restricted(user)), None) => {
            (user.name.as_str(), password(node, &user.name))
        }
        // Operator-provisioned users: the URL's user is the gateway's, and may not run scripts (an admin
        // tenant's scripts then fail, with Redis' NOPERM, and so would a namespace's, which are refused before).
        (None | Some(ScriptUser::Admin | ScriptUser::Restricted(_)), Some(_))
        | (Some(ScriptUser::Admin), None) => resource(),
        (Some(ScriptUser::Tenant), Some((user, password))) => (user.as_str(), password.clone()),
    };
    let mut out = BytesMut::new();
    resp::command(
        &mut out,
        &[&b"AUTH"[..], user.as_bytes(), password.as_bytes()],
    );
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant() -> RunAs {
        RunAs::script(ScriptUser::Tenant)
    }

    fn admin() -> RunAs {
        RunAs::script(ScriptUser::Admin)
    }

    fn node(username: Option<&str>, password: Option<&str>) -> NodeSpec {
        NodeSpec {
            addr: "127.0.0.1:6379".to_string(),
            username: username.map(str::to_string),
            password: password.map(str::to_string),
            db: 0,
            role: super::super::NodeRole::Any,
            script_user: None,
            protocol: crate::resp::Protocol::Resp2,
            tls: None,
        }
    }

    #[test]
    fn passwords_are_the_same_on_every_gateway_and_differ_per_resource_and_user() {
        let a = node(None, Some("secret"));
        assert_eq!(
            password(&a, GATEWAY_USER),
            password(&a.clone(), GATEWAY_USER)
        );
        assert_ne!(password(&a, GATEWAY_USER), password(&a, SCRIPT_USER));
        assert_ne!(
            password(&a, GATEWAY_USER),
            password(&node(None, Some("other")), GATEWAY_USER)
        );
        assert_ne!(
            password(&a, GATEWAY_USER),
            password(&node(Some("ops"), Some("secret")), GATEWAY_USER)
        );
    }

    #[test]
    fn setup_never_carries_a_password_in_clear() {
        let node = node(None, Some("secret"));
        let mut out = BytesMut::new();
        setup_commands(&node, true, &mut out);
        let text = String::from_utf8_lossy(&out);
        for user in [GATEWAY_USER, SCRIPT_USER] {
            assert!(!text.contains(&password(&node, user)));
            assert!(text.contains(&format!("#{}", credential_digest(&password(&node, user)))));
        }
        assert!(!text.contains("secret"));
    }

    #[test]
    fn provisioned_users_are_used_as_named() {
        let auth = |node: &NodeSpec, run_as: RunAs| {
            String::from_utf8_lossy(&auth_command(node, &run_as)).into_owned()
        };
        let mut provisioned = node(Some("gw"), Some("gwpw"));
        provisioned.script_user = Some(("scr".to_string(), "scrpw".to_string()));
        assert_eq!(
            auth(&provisioned, RunAs::Gateway),
            "*3\r\n$4\r\nAUTH\r\n$2\r\ngw\r\n$4\r\ngwpw\r\n"
        );
        assert_eq!(
            auth(&provisioned, tenant()),
            "*3\r\n$4\r\nAUTH\r\n$3\r\nscr\r\n$5\r\nscrpw\r\n"
        );
        assert_eq!(
            auth(&provisioned, admin()),
            auth(&provisioned, RunAs::Gateway)
        );
        let created = node(None, Some("pw"));
        assert!(auth(&created, tenant()).contains(SCRIPT_USER));
        assert!(auth(&created, RunAs::Gateway).contains(GATEWAY_USER));
        assert!(auth(&created, admin()).contains("default"));
    }

    #[test]
    fn only_script_commands_run_as_a_script_user() {
        let namespaced = scripts_run_as(false, Some(b"a:"), Vec::new());
        for id in SCRIPT_COMMANDS {
            let name = id.spec().name;
            let run_as =
                |admin, namespace| run_as(id.spec(), &scripts_run_as(admin, namespace, Vec::new()));
            assert_eq!(run_as(false, None), tenant(), "{name}");
            assert_eq!(run_as(true, None), admin(), "{name}");
            assert_eq!(run_as(true, Some(b"a:")), admin(), "{name}");
            assert_eq!(run_as(false, Some(b"a:")), namespaced, "{name}");
        }
        assert!(matches!(
            namespaced.script_user(),
            Some(ScriptUser::Restricted(_))
        ));
        for name in [
            "get",
            "script|load",
            "function|load",
            "function|list",
            "publish",
        ] {
            let spec = crate::cmd::lookup_by_name(name.as_bytes()).unwrap();
            assert_eq!(run_as(spec, &namespaced), RunAs::Gateway, "{name}");
        }
    }

    fn namespace_user(prefix: &[u8]) -> RestrictedUser {
        restricted_user(Some(prefix), Vec::new())
    }

    #[test]
    fn a_namespace_user_is_named_from_a_digest_and_holds_the_escaped_prefix() {
        let a = namespace_user(b"a:");
        assert_eq!(a, namespace_user(b"a:"), "the same on every gateway");
        assert_ne!(a.name, namespace_user(b"b:").name);
        assert_ne!(a.name, namespace_user(b"a").name);
        assert_eq!(a.name.len(), "switchyard-ns-".len() + 32);
        let tail = &a.name["switchyard-ns-".len()..];
        assert!(
            tail.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(a.keys, b"~a:*");
        assert_eq!(namespace_user(b"{shop}:").keys, b"~{shop}:*");
        // Every glob character of the namespace matches only itself.
        assert_eq!(namespace_user(br"x*y?[z]\:").keys, br"~x\*y\?\[z\]\\:*");
        // A name made of the namespace would not be a user name, nor tell one namespace from another.
        let odd = namespace_user(b"a b\\:");
        assert!(
            odd.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        );
    }

    #[test]
    fn a_namespace_user_is_created_once_per_connection_with_the_script_users_denials() {
        let node = node(None, Some("secret"));
        let run_as = scripts_run_as(false, Some(b"a:"), Vec::new());
        let user = namespace_user(b"a:");
        let mut out = BytesMut::new();
        assert_eq!(switch_to(&node, &run_as, false, true, &mut out), 2);
        let text = String::from_utf8_lossy(&out).replace("\r\n", " ");
        let setuser = format!("$3 ACL $7 SETUSER ${} {} ", user.name.len(), user.name);
        assert!(text.contains(&setuser), "{text}");
        assert!(
            text.contains(" $5 reset $2 on $4 ~a:* $2 &* $5 +@all "),
            "{text}"
        );
        assert!(!text.contains("~* "), "{text}");
        for denied in script_denied().iter().chain(namespace_denied()) {
            assert!(text.contains(&format!(" -{denied} ")), "{denied}: {text}");
        }
        let auth = String::from_utf8_lossy(&auth_command(&node, &run_as)).replace("\r\n", " ");
        let setup = text.strip_suffix(&auth).expect("the AUTH comes last");
        let hash = credential_digest(&password(&node, &user.name));
        assert!(setup.contains(&format!("#{hash}")));
        assert!(!setup.contains(&password(&node, &user.name)));
        assert!(auth.contains(&format!(" {} ", user.name)));
        assert!(auth.ends_with(&format!(" {} ", password(&node, &user.name))));

        let mut again = BytesMut::new();
        assert_eq!(switch_to(&node, &run_as, true, true, &mut again), 1);
        assert_eq!(again, auth_command(&node, &run_as));
        assert_ne!(password(&node, &user.name), password(&node, SCRIPT_USER));
    }

    #[test]
    fn namespaced_scripts_are_refused_where_users_are_provisioned() {
        let mut provisioned = node(Some("gw"), Some("gwpw"));
        provisioned.script_user = Some(("scr".to_string(), "scrpw".to_string()));
        let namespaced = scripts_run_as(false, Some(b"a:"), Vec::new());
        let refused = refusal(&provisioned, &namespaced).expect("refused");
        assert!(refused.starts_with(b"-NOPERM "));
        for run_as in [RunAs::Gateway, tenant(), admin()] {
            assert_eq!(refusal(&provisioned, &run_as), None);
        }
        assert_eq!(refusal(&node(None, Some("pw")), &namespaced), None);
        // Were one sent all the same, it would run as the gateway's user, which may not run scripts.
        let mut out = BytesMut::new();
        assert_eq!(
            switch_to(&provisioned, &namespaced, false, true, &mut out),
            1
        );
        assert_eq!(out, auth_command(&provisioned, &RunAs::Gateway));
    }

    #[test]
    fn the_provisioned_script_user_of_the_docs_has_the_script_users_denials() {
        let docs = include_str!("../../../docs/operations.md");
        let line = docs
            .lines()
            .find(|line| line.trim_start().starts_with("ACL SETUSER scr on"))
            .expect("docs/operations.md shows the script user to provision");
        let mut documented: Vec<&str> = line
            .split_whitespace()
            .filter_map(|rule| rule.strip_prefix('-'))
            .collect();
        let mut denied: Vec<&str> = script_denied().iter().map(String::as_str).collect();
        documented.sort_unstable();
        denied.sort_unstable();
        assert_eq!(documented, denied, "{line}");
    }

    #[test]
    fn scripts_may_not_run_what_their_tenant_may_not_send() {
        let denied = script_denied();
        for name in [
            "script|debug",
            "memory|stats",
            "memory|purge",
            "keys",
            "restore-asking",
            "info",
        ] {
            assert!(denied.iter().any(|d| d == name), "{name}: {denied:?}");
        }
        for name in ["get", "set", "eval", "dbsize", "sort"] {
            assert!(!denied.iter().any(|d| d == name), "{name}");
        }
        let namespaced = namespace_denied();
        for name in [
            "scan",
            "dbsize",
            "randomkey",
            "sort",
            "sort_ro",
            "xreadgroup",
            "georadius",
        ] {
            assert!(
                namespaced.iter().any(|d| d == name),
                "{name}: {namespaced:?}"
            );
        }
    }

    #[test]
    fn a_tenants_command_rules_hold_in_its_scripts_and_never_allow_back_a_denial() {
        let node = node(None, Some("secret"));
        let rules = vec!["-@all".to_string(), "+@all".to_string(), "-del".to_string()];
        let run_as = scripts_run_as(false, None, rules.clone());
        let Some(ScriptUser::Restricted(user)) = run_as.script_user() else {
            panic!("a tenant with command rules has a user of its own");
        };
        assert_eq!(user.keys, b"~*");
        assert_ne!(
            user.name,
            restricted_user(None, vec!["-set".to_string()]).name
        );
        assert_ne!(user.name, restricted_user(Some(b""), rules.clone()).name);
        let mut out = BytesMut::new();
        assert_eq!(switch_to(&node, &run_as, false, true, &mut out), 2);
        let text = String::from_utf8_lossy(&out).replace("\r\n", " ");
        let tenant = text.find(" $4 -del ").expect("the tenant's rule");
        let admin = text.find(" $7 -@admin ").expect("the script users' denial");
        assert!(tenant < admin, "denials come last: {text}");
        assert!(
            !text.contains(" $5 -scan "),
            "no namespace, no namespace denials: {text}"
        );
        assert_eq!(
            scripts_run_as(false, None, Vec::new()),
            RunAs::script(ScriptUser::Tenant)
        );
    }
}
