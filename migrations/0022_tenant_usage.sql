-- What gateways report of each tenant's traffic (switchyard_schemas::api::TenantUsage), kept at one-minute
-- resolution: one row per tenant, minute and gateway, to which each report of that minute adds its counts (and
-- sets the connections it saw last, and raises the p99). Rows go with their tenant and are pruned past the usage
-- window at every report (docs/usage.md), so the table holds at most one window: tenants x gateways x minutes.
CREATE TABLE tenant_usage (
    tenant_id   bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    minute      timestamptz NOT NULL,
    gateway     text NOT NULL,
    -- How much of the minute the gateway's reports covered, so that a partial minute gives a true rate.
    covered_ms  bigint NOT NULL,
    commands    bigint NOT NULL,
    errors      bigint NOT NULL,
    bytes_in    bigint NOT NULL,
    bytes_out   bigint NOT NULL,
    connections bigint NOT NULL,
    p99_us      bigint,
    PRIMARY KEY (tenant_id, minute, gateway)
);

CREATE INDEX tenant_usage_by_minute ON tenant_usage (minute);

-- Each credential's use on each gateway: connections open with it at the gateway's last report that named it,
-- and its last successful AUTH there. A gateway names a credential while connections use it and once more when
-- the last closes, so a row whose report is older than the usage freshness counts no connection (a gateway gone).
CREATE TABLE credential_usage (
    credential_id bigint NOT NULL REFERENCES credentials (id) ON DELETE CASCADE,
    gateway       text NOT NULL,
    connections   bigint NOT NULL,
    reported_at   timestamptz NOT NULL DEFAULT now(),
    last_auth_at  timestamptz,
    PRIMARY KEY (credential_id, gateway)
);
