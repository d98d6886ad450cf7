-- Readiness probes (docs/migration.md#readiness): "would this tenant's traffic work on that destination?", asked
-- without a migration. A tenant has at most one probe; its destination is a route table as a migration's (resource
-- names as given), served to gateways as placement only. Setting a probe again replaces it, and its reports with
-- it: a probe's counts start when it was set.
CREATE TABLE readiness_probes (
    tenant_id   bigint PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    destination jsonb NOT NULL,
    author      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- What each gateway counted against a tenant's probe, summed as migration_readiness sums a migration's: kept
-- apart from the migrations' rows, so that a migration created later starts from nothing.
CREATE TABLE readiness_probe_reports (
    tenant_id  bigint NOT NULL REFERENCES readiness_probes (tenant_id) ON DELETE CASCADE,
    gateway    text NOT NULL,
    checked    bigint NOT NULL DEFAULT 0,
    counts     jsonb NOT NULL DEFAULT '{}'::jsonb,
    examples   jsonb NOT NULL DEFAULT '[]'::jsonb,
    commands   jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, gateway)
);

-- Gateways get the probe with the tenant's snapshot (migrations/0010): a probe set, replaced or deleted is a
-- change of its tenant.
CREATE TRIGGER readiness_probes_inserted AFTER INSERT ON readiness_probes
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_tenant_rows_changed();
CREATE TRIGGER readiness_probes_updated AFTER UPDATE ON readiness_probes
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_tenant_rows_changed();
CREATE TRIGGER readiness_probes_deleted AFTER DELETE ON readiness_probes
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_tenant_rows_changed();
