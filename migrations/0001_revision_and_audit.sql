-- The global revision: one number that grows by exactly one in the same transaction as every change, so a
-- gateway can ask "anything after revision R?". A single row whose lock also orders concurrent changes: the
-- revision order is the commit order, so a snapshot at revision R always contains every change up to R.
CREATE TABLE revision (
    singleton boolean PRIMARY KEY DEFAULT true CONSTRAINT revision_singleton CHECK (singleton),
    value bigint NOT NULL CONSTRAINT revision_not_negative CHECK (value >= 0)
);
INSERT INTO revision (singleton, value) VALUES (true, 0);

-- Every change: who made it, what it touched, the state before and after (secrets never, backend passwords
-- masked). Tenant names are kept as text, not foreign keys, so the log outlives what it describes.
CREATE TABLE audit_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    revision bigint NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    actor text NOT NULL,
    action text NOT NULL,
    tenant text,
    object text NOT NULL,
    before jsonb,
    after jsonb
);
CREATE INDEX audit_log_tenant_at ON audit_log (tenant, at);
CREATE INDEX audit_log_at ON audit_log (at);

-- History is append-only: rows may be deleted (retention, cascades) but never rewritten.
CREATE FUNCTION forbid_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% rows are immutable', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END;
$$;
CREATE TRIGGER audit_log_immutable BEFORE UPDATE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION forbid_update();
