-- Which database of which Redis each tenant's CURRENT route reaches, one row per database, named as
-- control-plane/src/databases.rs names them (a node's host, port and database number; a sentinel's, its
-- master's name and the database number). Written from the route and its resources' URLs whenever either
-- changes, and read to refuse a tenant without a key namespace in a database that namespaced tenants use, and the
-- reverse (409 namespace_overlaps: no namespace is the start of every namespace, so it overlaps them all). The
-- index on place finds who else uses a database without reading every route. The rows of routes stored before
-- this table are written when a control plane starts.
CREATE TABLE tenant_databases (
    tenant_id bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    place text NOT NULL,
    PRIMARY KEY (tenant_id, place)
);
CREATE INDEX tenant_databases_place ON tenant_databases (place);
