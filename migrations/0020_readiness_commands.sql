-- The commands a migrating tenant ran while gateways checked its traffic against the migration's destination
-- (switchyard_schemas::api::TenantReadiness::commands): calls by command name, summed per migration and gateway
-- like the counts. The control plane asks the destination which of them it knows when it answers readiness
-- (docs/migration.md#readiness); names are bounded by the gateways' command table.
ALTER TABLE migration_readiness ADD COLUMN commands jsonb NOT NULL DEFAULT '{}'::jsonb;
