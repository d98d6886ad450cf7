-- Which control-plane replica each gateway follows (its URL among the gateway's --control-plane URLs, and the
-- address it is pinned to when the URL's name resolves to several), as its last heartbeat said: empty for gateways
-- that do not say.
ALTER TABLE gateways
    ADD COLUMN following_url text NOT NULL DEFAULT ''
        CONSTRAINT gateways_following_url_length CHECK (length(following_url) <= 200),
    ADD COLUMN following_address text NOT NULL DEFAULT ''
        CONSTRAINT gateways_following_address_length CHECK (length(following_address) <= 100);

-- Fleet limits (docs/tenant-policies.md, "Fleet limits"): a tenant's max_ops_per_sec and max_connections hold for
-- every gateway together, each live gateway enforcing a share that the control plane hands it in the answer to its
-- heartbeat, by the tenant's recent demand there. Not part of the revision: shares change nothing a snapshot
-- carries.

-- How often a gateway sends heartbeats: its shares count while it has missed fewer than three. NULL: a gateway
-- from before fleet limits, which enforces every limit on its own and takes no share.
ALTER TABLE gateways
    ADD COLUMN heartbeat_interval_ms integer
        CONSTRAINT gateways_heartbeat_interval_positive CHECK (heartbeat_interval_ms > 0);

-- One row per tenant and gateway while the tenant has some demand somewhere in the fleet: what the gateway's last
-- heartbeat said of it (commands per second asked, those refused included; connections open; connections
-- refused since the heartbeat before), and the share last handed to it (NULL: none yet, it enforces its limit
-- divided by the live gateways). A tenant's rows go once no live gateway reports any demand for it; a gateway's
-- once it is no longer live.
CREATE TABLE limit_shares (
    tenant_id           bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    gateway_id          text NOT NULL REFERENCES gateways (id) ON DELETE CASCADE,
    ops_demand          double precision NOT NULL DEFAULT 0
        CONSTRAINT limit_shares_ops_demand_not_negative CHECK (ops_demand >= 0),
    connections         bigint NOT NULL DEFAULT 0
        CONSTRAINT limit_shares_connections_not_negative CHECK (connections >= 0),
    connections_refused bigint NOT NULL DEFAULT 0
        CONSTRAINT limit_shares_refused_not_negative CHECK (connections_refused >= 0),
    ops_share           double precision,
    connection_share    bigint,
    PRIMARY KEY (tenant_id, gateway_id)
);

CREATE INDEX limit_shares_by_gateway ON limit_shares (gateway_id);
