//! Who a backend runs a request as: it travels with the request's reply handle, so that a redirected script is
//! resent as the same user (the users themselves are `backend::identity`'s).

use std::sync::Arc;

/// Who a backend runs a request as (see `backend::identity`). A pointer's size: it is in every reply handle,
/// which is moved several times per request; a script's user is made once per tenant and shared.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum RunAs {
    /// The gateway user: every request that is not a script.
    #[default]
    Gateway,
    /// A script or function, as its tenant's script user.
    Script(Arc<ScriptUser>),
}

/// The user a tenant's scripts and functions run as.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ScriptUser {
    /// A non-admin tenant's: the restricted script user.
    Tenant,
    /// A non-admin tenant's with a key namespace or command rules: a user of its own, which is the script user
    /// restricted to the namespace's keys and the tenant's commands.
    Restricted(RestrictedUser),
    /// An admin tenant's: the resource's own user.
    Admin,
}

/// The ACL user the scripts of the tenants with one key namespace and one set of command rules run as (made by
/// `backend::identity`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RestrictedUser {
    /// `switchyard-ns-` and a digest of the namespace and the rules.
    pub name: String,
    /// Its key rule: `~`, the namespace glob-escaped, `*`; `~*` without a namespace.
    pub keys: Vec<u8>,
    /// The tenant's command rules, as ACL rules (`-@dangerous`, `-del`, ...).
    pub commands: Vec<String>,
}

impl RunAs {
    /// A script run as `user`.
    pub(crate) fn script(user: ScriptUser) -> RunAs {
        RunAs::Script(Arc::new(user))
    }

    /// Whose script it is, if it is one.
    pub(crate) fn script_user(&self) -> Option<&ScriptUser> {
        match self {
            RunAs::Gateway => None,
            RunAs::Script(user) => Some(user),
        }
    }

    /// A non-admin tenant's script, which the gateway kills when it runs past its tenant's limit.
    pub(crate) fn is_tenants(&self) -> bool {
        matches!(
            self.script_user(),
            Some(ScriptUser::Tenant | ScriptUser::Restricted(_))
        )
    }
}
