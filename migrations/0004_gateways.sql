-- Gateways report themselves by heartbeat, so admins can see which revision each one serves. Not part of the
-- revision: a heartbeat changes nothing a gateway serves.
CREATE TABLE gateways (
    id text PRIMARY KEY CONSTRAINT gateways_id_format CHECK (length(id) BETWEEN 1 AND 200),
    address text NOT NULL DEFAULT '' CONSTRAINT gateways_address_length CHECK (length(address) <= 200),
    revision bigint NOT NULL CONSTRAINT gateways_revision_not_negative CHECK (revision >= 0),
    first_seen timestamptz NOT NULL DEFAULT now(),
    last_seen timestamptz NOT NULL DEFAULT now()
);
