-- API tokens of the REST API itself (switchyard_schemas::api::ApiToken, docs/control-plane.md#roles-and-tokens),
-- beside the start-up --admin-token and --gateway-token flags. Only the SHA-256 digest of a token is kept. A
-- rotation moves the digest to previous_digest, which stays valid until previous_valid_until (the overlap), so
-- clients can be moved to the new secret without a gap. Revoked rows stay listed, and their name is never
-- reused: the audit log's `token:<name>` always means one token.
CREATE TABLE api_tokens (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL
        CONSTRAINT api_tokens_name_key UNIQUE
        CONSTRAINT api_tokens_name_format CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
    role text NOT NULL
        CONSTRAINT api_tokens_role_valid CHECK (role IN ('admin', 'operator', 'viewer', 'tenant-owner')),
    -- tenant-owner only: the tenants it owns, by name, and/or a prefix of the names it owns.
    tenants text[] NOT NULL DEFAULT '{}',
    tenant_prefix text,
    -- tenant-owner only: the policy fields of its tenants it may change.
    policies text[] NOT NULL DEFAULT '{}',
    digest text NOT NULL
        CONSTRAINT api_tokens_digest_key UNIQUE
        CONSTRAINT api_tokens_digest_format CHECK (digest ~ '^[0-9a-f]{64}$'),
    previous_digest text CONSTRAINT api_tokens_previous_digest_format CHECK (previous_digest ~ '^[0-9a-f]{64}$'),
    previous_valid_until timestamptz,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    rotated_at timestamptz,
    revoked_at timestamptz,
    CONSTRAINT api_tokens_scope CHECK (
        (role = 'tenant-owner') = (cardinality(tenants) > 0 OR tenant_prefix IS NOT NULL)
        AND (role = 'tenant-owner' OR cardinality(policies) = 0)
    ),
    CONSTRAINT api_tokens_previous CHECK ((previous_digest IS NULL) = (previous_valid_until IS NULL))
);
-- Every request with a token that is not a start-up one looks its digest up, current or previous.
CREATE INDEX api_tokens_previous_digest ON api_tokens (previous_digest) WHERE previous_digest IS NOT NULL;
