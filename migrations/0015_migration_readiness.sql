-- Migration readiness (switchyard_schemas::api::TenantReadiness, docs/migration.md#readiness): what each gateway
-- counted of a migrating tenant's commands against the migration's destination, summed over the reports it sent
-- while the migration was in double_write to verified. One row per migration and gateway; the examples are the
-- most frequent ones (at most 20), kept by the control plane as reports are added. Rows go with their migration.
CREATE TABLE migration_readiness (
    migration_id bigint NOT NULL REFERENCES tenant_migrations (id) ON DELETE CASCADE,
    gateway      text NOT NULL,
    checked      bigint NOT NULL DEFAULT 0,
    counts       jsonb NOT NULL DEFAULT '{}'::jsonb,
    examples     jsonb NOT NULL DEFAULT '[]'::jsonb,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (migration_id, gateway)
);
