//! The control plane's REST API end to end: the real router over a real Postgres database (a fresh one per
//! test, made by `#[sqlx::test]` from `DATABASE_URL`).

mod access;
mod audit;
mod common;
mod console;
mod credentials;
mod divergence;
mod dry_run;
mod gateways;
mod guard;
mod import;
mod migration_destination;
mod migrations;
mod reachability;
mod resources;
mod roles;
mod routes;
mod server;
mod snapshot;
mod snapshot_delta;
mod statuses;
mod system;
mod tenant_limits;
mod tenant_migrations;
mod tenant_policies;
mod tenants;
mod tokens;
mod usage;
