-- What gateways noticed of each tenant's requests (switchyard_schemas::api::TenantObservations): one row per
-- gateway report and tenant, its hot keys, big keys and new slow log entries as the report's JSON arrays. Rows
-- go with their tenant, and are pruned past the retention window at every report (docs/tracking.md), so the
-- table holds at most one window of reports.
CREATE TABLE tenant_observations (
    id          bigserial PRIMARY KEY,
    tenant_id   bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    gateway     text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    hot_keys    jsonb NOT NULL DEFAULT '[]'::jsonb,
    big_keys    jsonb NOT NULL DEFAULT '[]'::jsonb,
    slowlog     jsonb NOT NULL DEFAULT '[]'::jsonb
);

CREATE INDEX tenant_observations_by_tenant ON tenant_observations (tenant_id, received_at);
CREATE INDEX tenant_observations_by_age ON tenant_observations (received_at);
