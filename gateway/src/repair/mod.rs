//! Repair of double-write secondaries: the keys they missed (see `missed`) are copied again from the primary once
//! the secondary answers, so that the copies converge without an operator.
//!
//! The repair task (`task`) takes the recorded keys while the secondary answers and makes each equal to the
//! primary (`key`): value, type and expiry from the primary's `DUMP` and `PEXPIRETIME`, or a delete when the
//! primary has none, written in a transaction that `WATCH`es the key on the secondary, so that a live write that
//! reached the secondary after the repair read it makes the repair start over instead of being overwritten. A key
//! leaves the record only when a comparison made after the writes in flight had time to land finds both copies
//! equal. A catch-up (`scan`) walks every key of the tenant instead when the record asks for one, as it does for
//! every tenant of a secondary that came back as another server (`restarts`).
//!
//! Beside it, the sampler (`sample`) compares random keys of every double-write route the same way, to estimate
//! how far each secondary is from its primary (`missed::divergence`) and to hand the keys it finds different to the
//! repair: divergence that no failed write recorded is found and repaired too.

mod key;
mod links;
mod restarts;
mod sample;
mod scan;
mod sides;
mod task;

use std::sync::Arc;

/// Bounds every connect and exchange of the repair's and the sampler's connections.
fn exchange_timeout(config: &crate::state::Config) -> std::time::Duration {
    config.connect_timeout.max(config.command_timeout)
}

/// Starts the repair task on a thread of its own (its connections are the worker kind, which stay on one thread).
pub(crate) fn start(gateway: Arc<crate::state::Gateway>) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("switchyard-repair".to_string())
        // Local: a cluster's or a sentinel set's topology that the repair is the first to use keeps itself fresh
        // with a task on this thread (see `backend::topology`).
        .spawn(move || {
            tokio::task::LocalSet::new().block_on(&runtime, async {
                tokio::join!(task::run(Arc::clone(&gateway)), sample::run(gateway));
            })
        })?;
    Ok(())
}
