//! What a tenant's rules make of its command before it is forwarded, in two steps:
//!
//! - its policies (`Client::policed`, the rules are `tenancy::Policies`'): refused with Redis' words (`NOPERM`,
//!   `READONLY`) or the gateway's (a blocked key), or, for a read-only tenant, a script command run in its
//!   read-only form. Checked on every command once the tenant is known, those the gateway answers itself and
//!   those queued in a transaction included, on the keys as the tenant sent them;
//! - its isolation (`Client::narrow`, the rules are `tenancy`'s): refused, or renamed into the tenant's key
//!   namespace, databases and channel namespace.

use bytes::Bytes;

use super::client::Client;
use crate::cmd::{Command, CommandSpec, acl};
use crate::reply::Transform;
use crate::resp::Request;
use crate::tenancy;

impl Client {
    /// What a tenant's command becomes before it is forwarded or queued in a transaction (see `tenancy`):
    /// refused (the error text), or the request to send (its keys under the tenant's namespace, renamed to the
    /// backend's database numbers and channel names) and how its reply is rewritten for the tenant.
    pub(super) fn narrow(
        &self,
        spec: &CommandSpec,
        request: Request,
    ) -> Result<(Request, Option<Transform>), String> {
        let Some(view) = &self.tenant else {
            return Ok((request, None));
        };
        let tenant = &view.tenant;
        let refused = tenancy::refusal(spec, tenant.allow_admin)
            .or_else(|| tenancy::argument_refusal(spec, request.args(), tenant.allow_admin))
            .or_else(|| {
                let limits = &self.worker.gateway.config.limits;
                (!tenant.allow_admin)
                    .then(|| tenancy::cost_refusal(spec, request.args(), limits))
                    .flatten()
            });
        if let Some(refusal) = refused {
            return Err(refusal);
        }
        tenancy::understand(spec, request.args(), tenant.namespace().is_some())?;
        if spec.id == Command::ConfigGet && !tenant.allow_admin {
            return Ok((request, Some(Box::new(tenancy::visible_config))));
        }
        // Keys go under the namespace first: the rules below rename databases and channels, never keys.
        let (request, transform) = match tenant.namespace() {
            Some(namespace) => {
                if let Some(refusal) = tenancy::Namespace::refusal(spec) {
                    return Err(refusal);
                }
                namespace.outbound(spec, request)?
            }
            None => (request, None),
        };
        // Only pub/sub commands name channels: the namespace is not built for the others.
        if spec.acl_categories & acl::PUBSUB != 0
            && let Some(renamed) = tenant
                .channels()
                .and_then(|channels| channels.outbound_command(spec, &request))
        {
            return Ok(renamed);
        }
        let plan = &tenant.route;
        if plan.has_cluster() {
            return Ok((request, transform)); // a Redis Cluster has database 0 only, and says so itself
        }
        let sharded = plan.shards.len() > 1;
        let narrowed = tenancy::database_arguments(
            spec,
            &request,
            tenant.databases(),
            plan.base_db(),
            sharded,
        )?;
        Ok((narrowed.unwrap_or(request), transform))
    }
}

impl Client {
    /// The command to run for `request` under the tenant's policies: as it is, or a read-only tenant's script
    /// command in its read-only form (`EVAL` as `EVAL_RO`, so that Redis refuses the writes inside it). The
    /// refusal's text when the policies refuse it.
    pub(super) fn policed(
        &mut self,
        spec: &'static CommandSpec,
        request: Request,
    ) -> Result<(&'static CommandSpec, Request), String> {
        let Some(policies) = self
            .tenant
            .as_ref()
            .and_then(|view| view.tenant.policies.as_deref())
            .filter(|policies| policies.checks_commands())
        else {
            return Ok((spec, request));
        };
        self.keys.clear();
        if policies.blocks_keys() {
            // Keys that cannot be found are the command's own error, answered where it runs.
            let _ = spec.key_indices(request.args(), &mut self.keys);
        }
        if let Some(text) = policies.refusal(spec, request.args(), &self.keys) {
            return Err(text);
        }
        let Some(read_only) = policies.script_form(spec) else {
            return Ok((spec, request));
        };
        let mut args = request.args().to_vec();
        if let Some(name) = args.first_mut() {
            *name = Bytes::from_static(read_only.name.as_bytes());
        }
        Ok((read_only, Request::from_args(args)))
    }
}
