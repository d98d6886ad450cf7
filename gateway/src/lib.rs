//! Switchyard's gateway: accepts Redis clients, authenticates them as tenants and routes their commands.
//!
//! Data flow: [`session`] reads and decodes requests ([`resp`]), looks them up in the command table ([`cmd`]),
//! answers the gateway's own commands, and forwards the rest along the tenant's route ([`route`]) to pipelined
//! backend connections ([`backend`]); [`reply`] puts the answers back in request order.

mod admin;
mod admission;
mod backend;
mod backoff;
mod cache;
mod client_tracking;
mod clients;
pub mod cmd;
mod failure;
mod family;
mod health;
mod info;
mod metrics;
mod missed;
mod monitor;
mod near_cache;
mod net;
mod proxy_protocol;
mod reach;
mod repair;
mod reply;
mod report;
mod resp;
mod route;
mod server;
mod session;
mod signal;
mod state;
mod sync;
mod tenancy;
mod tenant;
mod tls;
pub mod tracking;
mod worker;

pub use metrics::MetricsConfig;
pub use resp::{Limits, Protocol};
pub use route::explain;
pub use server::run;
pub use state::{
    ClientLimits, Config, ControlPlaneConfig, RouteSource, TlsListen, parse_bytes,
    parse_output_buffer_limit,
};
pub use sync::parse_control_plane_urls;
pub use tls::{ClientAuth, ListenerFiles};

/// The Redis version the gateway presents itself as (INFO, HELLO): the one its command table came from.
pub use cmd::REDIS_VERSION;
