-- How long one of a tenant's script or function calls may run, in milliseconds (TenantLimits::script_timeout_ms):
-- the gateway's deadline for its reply in place of the command timeout, past which a non-admin tenant's script is
-- killed. NULL: the default, 5000 ms (Redis' busy-reply-threshold). bigint as the other limits' counts: the
-- API's u32 does not fit an integer.
ALTER TABLE tenants
    ADD COLUMN script_timeout_ms bigint
        CONSTRAINT tenants_script_timeout_ms_positive CHECK (script_timeout_ms > 0);
