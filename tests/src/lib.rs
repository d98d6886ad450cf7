//! The end-to-end test harness: spawns real `redis-server` and `switchyard-gateway` processes on allocated
//! loopback ports, waits until they answer, and kills them by pid when the guard is dropped.
//!
//! The gateway binary is taken from `SWITCHYARD_GATEWAY_BIN`, or else from the cargo target directory this test
//! runs from (`scripts/test` builds it before running the tests).

mod certs;
pub mod compare;
mod control_plane;
mod ctl;
pub mod docs;
pub mod families;
pub mod fuzz;
mod gateway;
mod helpers;
mod ports;
mod postgres;
mod process;
mod protocol;
mod redis_server;
mod relay;
mod resp;
mod topology;

pub use certs::{CertFiles, Pki, Validity};
pub use control_plane::{ADMIN_TOKEN, ControlPlane, ControlPlaneBuilder};
pub use ctl::{Ctl, CtlRun};
pub use gateway::{Gateway, GatewayBuilder, StateDir};
pub use helpers::{
    client_with_flag, command_calls, connections_received, open_single_tenant, open_tenant,
    provision_script_users, wait_for_slot_map, wait_for_slot_map_as,
};
pub use ports::allocate_port;
pub use postgres::TlsPostgres;
pub use process::{binary, connect};
pub use protocol::{PROTOCOLS, assert_speaks, each_protocol, each_protocol_async, null_reply};
pub use redis_server::{RedisServer, RedisServerBuilder};
pub use relay::Relay;
pub use resp::RawClient;
pub use topology::{ClusterNode, NodeTls, RedisCluster, SentinelGroup, wait_for, wait_for_async};
