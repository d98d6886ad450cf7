//! Switchyard's gateway: accepts Redis clients, authenticates them as tenants and routes their commands.

pub mod cmd;
