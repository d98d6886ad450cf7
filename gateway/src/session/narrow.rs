//! What a tenant's command becomes before it is forwarded: refused, or renamed into the tenant's key namespace,
//! databases and channel namespace (the rules are `tenancy`'s).

use super::Session;
use crate::cmd::{Command, CommandSpec, acl};
use crate::reply::Transform;
use crate::resp::Request;
use crate::tenancy;

impl Session {
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
            .or_else(|| tenancy::argument_refusal(spec, request.args(), tenant.allow_admin));
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
