//! Switchyard's gateway: accepts Redis clients, authenticates them as tenants and routes their commands.
//!
//! Data flow: [`session`] reads and decodes requests ([`resp`]), looks them up in the command table ([`cmd`]),
//! answers the gateway's own commands, and forwards the rest along the tenant's route ([`route`]) to pipelined
//! backend connections ([`backend`]); [`reply`] puts the answers back in request order.

pub mod admin;
pub mod admission;
pub mod backend;
pub mod clients;
pub mod cmd;
pub mod metrics;
pub mod reply;
pub mod resp;
pub mod route;
pub mod server;
mod session;
pub mod signal;

pub use route::sync::ControlPlaneConfig;
pub use server::{Config, RouteSource, explain, run};

/// The Redis version the gateway presents itself as (INFO, HELLO): the one its command table came from.
pub use cmd::REDIS_VERSION;
