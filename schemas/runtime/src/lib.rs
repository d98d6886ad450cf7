//! What Switchyard's binaries run on alike, beside the contract they share (`switchyard-schemas`): how they log
//! and the process series of their `/metrics` ([`telemetry`]), the rustls configuration they build from PEM files
//! and a resource's TLS options ([`tls`]), and the few fields of an X.509 certificate they read themselves
//! ([`x509`]).

pub mod telemetry;
pub mod tls;
pub mod x509;
