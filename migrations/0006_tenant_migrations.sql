-- Live migrations of a tenant between deployments (double-write, backfill, verify, cutover). One row per
-- migration; its state only moves forward along the workflow, or to 'aborted'. Every transition is also an audit
-- entry (and a revision), so the history is in audit_log; this row holds what the workers need.
CREATE TABLE tenant_migrations (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    state text NOT NULL CONSTRAINT tenant_migrations_state CHECK (state IN (
        'double_write', 'backfilling', 'backfilled', 'verifying', 'verified', 'cut_over', 'finished', 'aborted')),
    -- The route before the migration (restored by abort) and the one it moves to (installed by finish).
    source jsonb NOT NULL,
    destination jsonb NOT NULL,
    ack text NOT NULL,
    -- Rate limits and tolerances of the background tasks (MigrationLimits).
    limits jsonb NOT NULL,
    -- The revision of the migration's latest route change: gateways must serve it before the next step.
    route_revision bigint NOT NULL,
    -- Counters of the background tasks (MigrationProgress) and where the running one resumes after a restart.
    progress jsonb NOT NULL DEFAULT '{}',
    task_cursor jsonb,
    error text,
    author text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- At most one active migration per tenant, as a database rule (two racing POSTs: one 201, one 409).
CREATE UNIQUE INDEX tenant_migrations_one_active ON tenant_migrations (tenant_id)
    WHERE state NOT IN ('finished', 'aborted');
-- The workers look for migrations with a task to run.
CREATE INDEX tenant_migrations_running ON tenant_migrations (state)
    WHERE state IN ('backfilling', 'verifying');
