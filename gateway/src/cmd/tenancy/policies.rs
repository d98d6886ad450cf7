//! A tenant's policies as the gateway applies them (`switchyard_schemas::TenantPolicy` compiled): its key
//! namespace, read-only switch, command rules, client address lists and blocked keys.

use bytes::Bytes;
use switchyard_schemas::{IpNet, TenantPolicy};

use super::Namespace;

/// A tenant's policies, compiled. A tenant without any policy has none (`Policies::compile` answers `None`), so
/// that the many tenants without one cost nothing.
// TODO(policies branch): each field is read by its enforcement, which lands with it.
#[allow(dead_code)]
pub struct Policies {
    pub namespace: Option<Namespace>,
    pub read_only: bool,
    pub commands: switchyard_schemas::CommandRules,
    pub ip_allow: Vec<IpNet>,
    pub ip_deny: Vec<IpNet>,
    pub blocked_keys: Vec<Bytes>,
}

impl Policies {
    /// The policies of a tenant whose `policy` passed `TenantPolicy::problems` (entries that would not parse
    /// are left out).
    pub fn compile(policy: &TenantPolicy) -> Option<Box<Policies>> {
        if *policy == TenantPolicy::default() {
            return None;
        }
        let nets = |list: &[String]| list.iter().filter_map(|e| IpNet::parse(e).ok()).collect();
        Some(Box::new(Policies {
            namespace: policy.namespace.as_deref().map(Namespace::new),
            read_only: policy.read_only,
            commands: policy.commands.clone(),
            ip_allow: nets(&policy.ip_allow),
            ip_deny: nets(&policy.ip_deny),
            blocked_keys: policy
                .blocked_keys
                .iter()
                .map(|k| Bytes::copy_from_slice(k.as_bytes()))
                .collect(),
        }))
    }
}
