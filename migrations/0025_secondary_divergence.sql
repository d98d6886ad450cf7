-- How far each tenant's double-write secondaries are from their primaries (switchyard_schemas::api::
-- SecondaryDivergence), as each gateway's latest tracking report said: its divergence sampler's window (keys
-- sampled, keys whose copies differed) and its repair's figures (keys owed, catch-up, keys repaired). One row per
-- tenant, secondary (as the route names it, without secrets) and gateway. A report replaces the gateway's rows;
-- rows go with their tenant, and rows of gateways that stopped reporting are pruned past the usage window at every
-- report and shown only while fresh (docs/route-tables.md#repair-of-missed-writes).
CREATE TABLE secondary_divergence (
    tenant_id   bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    resource    text NOT NULL,
    gateway     text NOT NULL,
    samples     bigint NOT NULL,
    differing   bigint NOT NULL,
    pending     bigint NOT NULL,
    catching_up boolean NOT NULL,
    repaired    bigint NOT NULL,
    reported_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, resource, gateway)
);

CREATE INDEX secondary_divergence_by_gateway ON secondary_divergence (gateway, reported_at);
