//! The figures of a tenant written as one sample each (and summed over every tenant): what each family is
//! called, counts and is read from.

/// A tenant's figures written as one sample each, and their sums over every tenant.
#[derive(Default, Clone, Copy)]
pub(super) struct Scalars {
    pub(super) errors: i64,
    pub(super) rate_limited: i64,
    pub(super) connections: i64,
    pub(super) dedicated: i64,
    pub(super) received_bytes: i64,
    pub(super) sent_bytes: i64,
    pub(super) near_cache_hits: i64,
    pub(super) near_cache_misses: i64,
    pub(super) near_cache_invalidations: i64,
    pub(super) near_cache_evictions: i64,
    pub(super) near_cache_bytes: i64,
}

/// A family of one sample per active tenant (`tenant`), and its sum over every tenant (`gateway`).
pub(super) struct Scalar {
    pub(super) tenant: &'static str,
    pub(super) gateway: &'static str,
    /// What is counted, completed with "by tenant" or "of all tenants".
    pub(super) help: &'static str,
    pub(super) kind: &'static str,
    pub(super) value: fn(&Scalars) -> i64,
}

pub(super) const SCALARS: [Scalar; 11] = [
    Scalar {
        tenant: "switchyard_command_errors_total",
        gateway: "switchyard_gateway_command_errors_total",
        help: "Error replies",
        kind: "counter",
        value: |s| s.errors,
    },
    Scalar {
        tenant: "switchyard_rate_limited_total",
        gateway: "switchyard_gateway_rate_limited_total",
        help: "Commands refused by the tenant's ops/s limit",
        kind: "counter",
        value: |s| s.rate_limited,
    },
    Scalar {
        tenant: "switchyard_tenant_connections",
        gateway: "switchyard_gateway_tenant_connections",
        help: "Open client connections",
        kind: "gauge",
        value: |s| s.connections,
    },
    Scalar {
        tenant: "switchyard_tenant_dedicated_connections",
        gateway: "switchyard_gateway_dedicated_connections",
        help: "Dedicated backend connections (blocking commands, transactions, subscriptions)",
        kind: "gauge",
        value: |s| s.dedicated,
    },
    Scalar {
        tenant: "switchyard_received_bytes_total",
        gateway: "switchyard_gateway_received_bytes_total",
        help: "Bytes read from clients (requests)",
        kind: "counter",
        value: |s| s.received_bytes,
    },
    Scalar {
        tenant: "switchyard_sent_bytes_total",
        gateway: "switchyard_gateway_sent_bytes_total",
        help: "Bytes written to clients (replies and messages)",
        kind: "counter",
        value: |s| s.sent_bytes,
    },
    Scalar {
        tenant: "switchyard_near_cache_hits_total",
        gateway: "switchyard_gateway_near_cache_hits_total",
        help: "Reads answered from the near cache",
        kind: "counter",
        value: |s| s.near_cache_hits,
    },
    Scalar {
        tenant: "switchyard_near_cache_misses_total",
        gateway: "switchyard_gateway_near_cache_misses_total",
        help: "Reads the near cache answers that went to Redis",
        kind: "counter",
        value: |s| s.near_cache_misses,
    },
    Scalar {
        tenant: "switchyard_near_cache_invalidations_total",
        gateway: "switchyard_gateway_near_cache_invalidations_total",
        help: "Near cache entries dropped because their key changed or their tracking connection went down",
        kind: "counter",
        value: |s| s.near_cache_invalidations,
    },
    Scalar {
        tenant: "switchyard_near_cache_evictions_total",
        gateway: "switchyard_gateway_near_cache_evictions_total",
        help: "Near cache entries evicted to stay within the bounds",
        kind: "counter",
        value: |s| s.near_cache_evictions,
    },
    Scalar {
        tenant: "switchyard_near_cache_bytes",
        gateway: "switchyard_gateway_near_cache_bytes",
        help: "Bytes the near cache holds",
        kind: "gauge",
        value: |s| s.near_cache_bytes,
    },
];
