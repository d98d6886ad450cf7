-- Named backend definitions that routes refer to by name. Names are never URLs (no "://"), which is how a route
-- tells a name from an inline URL.
CREATE TABLE resources (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL
        CONSTRAINT resources_name_key UNIQUE
        CONSTRAINT resources_name_format CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$'),
    url text NOT NULL,
    description text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Route history: one immutable row per version, numbered 1, 2, 3... per tenant. The current route is the
-- highest version; a rollback is a new version with an old table.
CREATE TABLE route_versions (
    tenant_id bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    version bigint NOT NULL CONSTRAINT route_versions_version_positive CHECK (version > 0),
    route jsonb NOT NULL,
    comment text NOT NULL DEFAULT '',
    author text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, version)
);

CREATE TRIGGER route_versions_immutable BEFORE UPDATE ON route_versions
    FOR EACH ROW EXECUTE FUNCTION forbid_update();

-- Which registered resources each tenant's CURRENT route refers to. The restricting foreign key is what makes
-- "a resource in use cannot be deleted" a database rule rather than a check a racing request could slip past.
CREATE TABLE route_resource_refs (
    tenant_id bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    resource_id bigint NOT NULL
        CONSTRAINT route_resource_refs_resource_id_fkey REFERENCES resources (id) ON DELETE RESTRICT,
    PRIMARY KEY (tenant_id, resource_id)
);
CREATE INDEX route_resource_refs_resource ON route_resource_refs (resource_id);
