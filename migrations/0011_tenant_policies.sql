-- Per-tenant policies (switchyard_schemas::TenantPolicy): key namespace, read-only switch, command rules, client
-- address lists and blocked keys, as the API's JSON object with fields at their defaults left out ('{}': a tenant
-- without any policy). The control plane checks the fields before it writes them; the database keeps the shape and
-- one namespace per tenant (the API also refuses a namespace that starts another's, which an index cannot say).
ALTER TABLE tenants
    ADD COLUMN policy jsonb NOT NULL DEFAULT '{}'::jsonb
        CONSTRAINT tenants_policy_is_object CHECK (jsonb_typeof(policy) = 'object');

CREATE UNIQUE INDEX tenants_namespace ON tenants ((policy ->> 'namespace'))
    WHERE policy ? 'namespace';
