-- Tenant names in byte order, for GET /v1/tenants?prefix=...&after=...&limit=...: a page is one range scan of
-- this index, whatever the database's collation, however many tenants there are. (Names are ASCII, so byte order
-- is also the order people read them in; a linguistic collation may not keep the names that start with a prefix
-- together.)
CREATE INDEX tenants_name_bytes ON tenants (name COLLATE "C");
