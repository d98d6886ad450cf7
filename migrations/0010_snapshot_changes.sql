-- Snapshot deltas: a gateway at revision R asks for what changed since R and gets only the tenants that did.
--
-- Every change to what a gateway serves of a tenant (the tenant row, its credentials, its route, a resource its
-- route names) logs the tenant's id here, and deleting a tenant logs its name. Triggers do the logging, so no
-- write path can forget it. A row's revision is unknown while its change runs (the revision is taken at commit,
-- under the revision row's lock, see Change::commit), so rows are written with a NULL revision and the
-- committing change stamps its own: no committed row ever has a NULL revision, and a repeatable-read snapshot
-- read sees exactly the rows of the revisions up to the one it reads.
CREATE TABLE snapshot_changes (
    revision bigint,
    tenant_id bigint NOT NULL,
    -- Set for a deleted tenant: the name the gateways must drop.
    removed_name text,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX snapshot_changes_revision ON snapshot_changes (revision);
CREATE INDEX snapshot_changes_pending ON snapshot_changes (tenant_id) WHERE revision IS NULL;

-- The history deltas are computed from. `epoch` names it: a gateway's revision means something only in the
-- epoch it was read in, so a gateway of another epoch (another database, or one restored from a backup after
-- the epoch was renewed: docs/operations.md) gets a full snapshot. `horizon` is the last revision whose log
-- rows were pruned: deltas are served only after it.
CREATE TABLE snapshot_history (
    singleton boolean PRIMARY KEY DEFAULT true CONSTRAINT snapshot_history_singleton CHECK (singleton),
    epoch text NOT NULL,
    horizon bigint NOT NULL
);
INSERT INTO snapshot_history (epoch, horizon)
    SELECT md5(random()::text || clock_timestamp()::text), value FROM revision;

-- Rows of credentials or route_versions changed by one statement: their tenants changed.
CREATE FUNCTION log_tenant_rows_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO snapshot_changes (tenant_id) SELECT DISTINCT tenant_id FROM changed;
    RETURN NULL;
END;
$$;

CREATE FUNCTION log_tenants_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO snapshot_changes (tenant_id) SELECT id FROM changed;
    RETURN NULL;
END;
$$;

CREATE FUNCTION log_tenants_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO snapshot_changes (tenant_id, removed_name) SELECT id, name FROM changed;
    RETURN NULL;
END;
$$;

-- A resource's URL is inlined into the routes of every tenant that names it (its other fields are not served).
CREATE FUNCTION log_resource_users_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO snapshot_changes (tenant_id)
        SELECT DISTINCT r.tenant_id
        FROM changed c
        JOIN before b ON b.id = c.id AND b.url IS DISTINCT FROM c.url
        JOIN route_resource_refs r ON r.resource_id = c.id;
    RETURN NULL;
END;
$$;

-- Statement-level with transition tables: one INSERT per statement, however many rows (a bulk import).
-- (A trigger with a transition table may have only one event, hence one trigger per event.)
CREATE TRIGGER tenants_inserted AFTER INSERT ON tenants
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_tenants_changed();
CREATE TRIGGER tenants_updated AFTER UPDATE ON tenants
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_tenants_changed();
CREATE TRIGGER tenants_deleted AFTER DELETE ON tenants
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_tenants_removed();
CREATE TRIGGER credentials_inserted AFTER INSERT ON credentials
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_tenant_rows_changed();
CREATE TRIGGER credentials_updated AFTER UPDATE ON credentials
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_tenant_rows_changed();
CREATE TRIGGER credentials_deleted AFTER DELETE ON credentials
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_tenant_rows_changed();
CREATE TRIGGER route_versions_inserted AFTER INSERT ON route_versions
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_tenant_rows_changed();
CREATE TRIGGER route_versions_deleted AFTER DELETE ON route_versions
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_tenant_rows_changed();
CREATE TRIGGER resources_updated AFTER UPDATE ON resources
    REFERENCING OLD TABLE AS before NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION log_resource_users_changed();
