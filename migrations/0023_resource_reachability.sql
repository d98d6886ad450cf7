-- Whether each gateway reaches each backend resource its routes use (switchyard_schemas::api::ResourceReach), as
-- its latest tracking report said: one row per gateway and resource location (a URL without its secrets, so a
-- resource named in a route by URL is kept as well as a registered one, and a registered resource finds its rows
-- by its URL's location). A report replaces the gateway's rows; rows of gateways that stopped reporting are pruned
-- past the usage window at every report, and shown only while fresh (docs/usage.md#resources).
CREATE TABLE resource_reachability (
    gateway       text NOT NULL,
    location      text NOT NULL,
    up            boolean NOT NULL,
    since         timestamptz NOT NULL,
    last_error    text,
    last_error_at timestamptz,
    reported_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (location, gateway)
);

CREATE INDEX resource_reachability_by_gateway ON resource_reachability (gateway, reported_at);
