//! The tenant's policies on each of its commands (the rules are `tenancy::Policies`'): refused with Redis'
//! words (`NOPERM`, `READONLY`) or the gateway's (a blocked key), or, for a read-only tenant, a script command
//! run in its read-only form. Checked on every command once the tenant is known, those the gateway answers
//! itself and those queued in a transaction included, on the keys as the tenant sent them.

use std::time::Instant;

use bytes::Bytes;

use super::Session;
use crate::cmd::CommandSpec;
use crate::resp::Request;

impl Session {
    /// The command to run for `request` under the tenant's policies: as it is, or a read-only tenant's script
    /// command in its read-only form (`EVAL` as `EVAL_RO`, so that Redis refuses the writes inside it). `None`
    /// when the policies refuse it: the refusal is answered, and an open transaction fails at `EXEC`
    /// (`EXECABORT`), as Redis fails one whose command was refused at queue time.
    pub(super) fn apply_policies(
        &mut self,
        spec: &'static CommandSpec,
        request: Request,
        started: Instant,
    ) -> Option<(&'static CommandSpec, Request)> {
        let Some(policies) = self
            .tenant
            .as_ref()
            .and_then(|view| view.tenant.policies.as_deref())
            .filter(|policies| policies.checks_commands())
        else {
            return Some((spec, request));
        };
        self.keys.clear();
        if policies.blocks_keys() {
            // Keys that cannot be found are the command's own error, answered where it runs.
            let _ = spec.key_indices(request.args(), &mut self.keys);
        }
        if let Some(text) = policies.refusal(spec, request.args(), &self.keys) {
            self.fail_transaction();
            self.reject(spec, started, &text);
            return None;
        }
        let Some(read_only) = policies.script_form(spec) else {
            return Some((spec, request));
        };
        let mut args = request.args().to_vec();
        if let Some(name) = args.first_mut() {
            *name = Bytes::from_static(read_only.name.as_bytes());
        }
        Some((read_only, Request::from_args(args)))
    }
}
