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
//! Where the gateway may not create users (managed services), the resource URL names an operator-provisioned
//! script user (`NodeSpec::script_user`): the URL's own user is then the gateway's, and the handshake checks that
//! it may not run scripts.

use bytes::{Bytes, BytesMut};
use switchyard_schemas::credential_digest;

use super::NodeSpec;
use crate::cmd::CommandSpec;
use crate::cmd::policy::{SCRIPT_COMMANDS, is_script};
pub(crate) use crate::reply::RunAs;
use crate::resp;

/// The user the gateway's data connections rest as.
pub(crate) const GATEWAY_USER: &str = "switchyard-gateway";

/// The user non-admin tenants' scripts and functions run as.
pub(crate) const SCRIPT_USER: &str = "switchyard-script";

/// What both users start from: `reset` first, so that a user is exactly what the gateway says whatever an older
/// version or an operator left, then every key, channel and command.
const BASE_RULES: &[&str] = &["reset", "on", "~*", "&*", "+@all"];

/// What [`SCRIPT_USER`] may not run besides `@admin` (a category, so admin commands of later Redis versions are
/// denied too): everything that reaches past the tenant's own database and channels. ([`GATEWAY_USER`] may not
/// run [`SCRIPT_COMMANDS`].)
const SCRIPT_DENIED: &[&str] = &[
    "@admin", "select", "move", "swapdb", "copy", "migrate", "flushall", "flushdb", "publish",
    "spublish", "pubsub", "info",
];

/// Who `spec` runs as for a tenant (`admin`: the tenant has `allow_admin`).
pub(crate) fn run_as(spec: &CommandSpec, admin: bool) -> RunAs {
    match (is_script(spec), admin) {
        (false, _) => RunAs::Gateway,
        (true, false) => RunAs::TenantScript,
        (true, true) => RunAs::AdminScript,
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

/// The handshake commands that create or refresh both users (run as the resource's user, before `SELECT`).
pub(crate) fn setup_commands(node: &NodeSpec, out: &mut BytesMut) {
    for (user, denied) in [
        (SCRIPT_USER, SCRIPT_DENIED),
        (GATEWAY_USER, SCRIPT_COMMANDS),
    ] {
        let mut args: Vec<String> = ["ACL", "SETUSER", user]
            .iter()
            .chain(BASE_RULES)
            .map(|arg| arg.to_string())
            .collect();
        args.extend(denied.iter().map(|name| format!("-{name}")));
        args.push(format!("#{}", credential_digest(&password(node, user))));
        resp::command(out, &args);
    }
}

/// The `AUTH` that switches a connection to `run_as` on `node`.
pub(crate) fn auth_command(node: &NodeSpec, run_as: RunAs) -> Bytes {
    // A resource without a password logs in as `default`, which then has `nopass`: any password does.
    let resource = || {
        (
            node.username.as_deref().unwrap_or("default"),
            node.password.clone().unwrap_or_default(),
        )
    };
    let (user, password) = match (run_as, &node.script_user) {
        (RunAs::Gateway, None) => (GATEWAY_USER, password(node, GATEWAY_USER)),
        (RunAs::TenantScript, None) => (SCRIPT_USER, password(node, SCRIPT_USER)),
        // Operator-provisioned users: the URL's user is the gateway's, and may not run scripts (an admin
        // tenant's scripts then fail, with Redis' NOPERM).
        (RunAs::Gateway | RunAs::AdminScript, Some(_)) | (RunAs::AdminScript, None) => resource(),
        (RunAs::TenantScript, Some((user, password))) => (user.as_str(), password.clone()),
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
        setup_commands(&node, &mut out);
        let text = String::from_utf8_lossy(&out);
        for user in [GATEWAY_USER, SCRIPT_USER] {
            assert!(!text.contains(&password(&node, user)));
            assert!(text.contains(&format!("#{}", credential_digest(&password(&node, user)))));
        }
        assert!(!text.contains("secret"));
    }

    #[test]
    fn provisioned_users_are_used_as_named() {
        let auth = |node: &NodeSpec, run_as| {
            String::from_utf8_lossy(&auth_command(node, run_as)).into_owned()
        };
        let mut provisioned = node(Some("gw"), Some("gwpw"));
        provisioned.script_user = Some(("scr".to_string(), "scrpw".to_string()));
        assert_eq!(
            auth(&provisioned, RunAs::Gateway),
            "*3\r\n$4\r\nAUTH\r\n$2\r\ngw\r\n$4\r\ngwpw\r\n"
        );
        assert_eq!(
            auth(&provisioned, RunAs::TenantScript),
            "*3\r\n$4\r\nAUTH\r\n$3\r\nscr\r\n$5\r\nscrpw\r\n"
        );
        assert_eq!(
            auth(&provisioned, RunAs::AdminScript),
            auth(&provisioned, RunAs::Gateway)
        );
        let created = node(None, Some("pw"));
        assert!(auth(&created, RunAs::TenantScript).contains(SCRIPT_USER));
        assert!(auth(&created, RunAs::Gateway).contains(GATEWAY_USER));
        assert!(auth(&created, RunAs::AdminScript).contains("default"));
    }

    #[test]
    fn only_script_commands_run_as_a_script_user() {
        let spec = |name: &str| crate::cmd::lookup_by_name(name.as_bytes()).unwrap();
        for name in SCRIPT_COMMANDS {
            assert_eq!(run_as(spec(name), false), RunAs::TenantScript, "{name}");
            assert_eq!(run_as(spec(name), true), RunAs::AdminScript, "{name}");
        }
        for name in [
            "get",
            "script|load",
            "function|load",
            "function|list",
            "publish",
        ] {
            assert_eq!(run_as(spec(name), false), RunAs::Gateway, "{name}");
        }
    }
}
