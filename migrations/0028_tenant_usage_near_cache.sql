-- What gateways report of each tenant's near cache (switchyard_schemas::api::NearCacheUsage), beside its traffic in
-- tenant_usage: hits, misses, invalidations and evictions are added up over the minute like the traffic's counts;
-- near_cache_bytes is what the cache held at the gateway's last report of the minute, NULL where none of its
-- reports of the minute carried a near cache (the tenant has none there, or it did nothing and held nothing).
ALTER TABLE tenant_usage
    ADD COLUMN near_cache_hits          bigint NOT NULL DEFAULT 0,
    ADD COLUMN near_cache_misses        bigint NOT NULL DEFAULT 0,
    ADD COLUMN near_cache_invalidations bigint NOT NULL DEFAULT 0,
    ADD COLUMN near_cache_evictions     bigint NOT NULL DEFAULT 0,
    ADD COLUMN near_cache_bytes         bigint;
