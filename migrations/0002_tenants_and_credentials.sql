-- A tenant: a name clients may give to AUTH, its limits, and whether it may run admin commands.
CREATE TABLE tenants (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL
        CONSTRAINT tenants_name_key UNIQUE
        CONSTRAINT tenants_name_format CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
    description text NOT NULL DEFAULT '',
    disabled boolean NOT NULL DEFAULT false,
    allow_admin boolean NOT NULL DEFAULT false,
    -- bigint: the API takes any u32, which does not fit an integer.
    max_connections bigint CONSTRAINT tenants_max_connections_positive CHECK (max_connections > 0),
    max_ops_per_sec bigint CONSTRAINT tenants_max_ops_per_sec_positive CHECK (max_ops_per_sec > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Several credentials per tenant so secrets can be rotated without downtime. Only the SHA-256 digest is kept;
-- it is unique across tenants because the password alone selects the tenant. Revoked rows stay for the record
-- (and so a revoked secret can never be reused).
CREATE TABLE credentials (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    digest text NOT NULL
        CONSTRAINT credentials_digest_key UNIQUE
        CONSTRAINT credentials_digest_format CHECK (digest ~ '^[0-9a-f]{64}$'),
    description text NOT NULL DEFAULT '',
    imported boolean NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX credentials_tenant ON credentials (tenant_id);
