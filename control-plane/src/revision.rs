//! The latest global revision, followed through Postgres LISTEN/NOTIFY and fanned out to waiting long-polls.
//!
//! One listener connection per process, however many polls wait: every change NOTIFYs `switchyard_revision`
//! with its revision in the committing transaction, so every control-plane replica hears of it at commit.
//! Notifications are lost while the listener reconnects, so the revision is also re-read from the database after
//! a reconnect and every few seconds; the watch only ever moves forward.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::db;
use crate::db::revision::CHANNEL;
use crate::db::{DbResult, WithOperation};

const RESYNC_EVERY: Duration = Duration::from_secs(5);

/// A handle on the latest revision this process knows of. Cheap to clone; the background tasks stop when the
/// last clone is dropped.
#[derive(Clone)]
pub(crate) struct RevisionWatch {
    latest: Arc<watch::Sender<i64>>,
    _tasks: Arc<Tasks>,
}

struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl RevisionWatch {
    /// Starts listening before reading the current revision, so no change can fall between the two.
    pub(crate) async fn start(pool: &PgPool) -> DbResult<RevisionWatch> {
        let mut listener = PgListener::connect_with(pool)
            .await
            .during("connecting the revision listener")?;
        listener
            .listen(CHANNEL)
            .await
            .during("listening for new revisions")?;
        let latest = Arc::new(watch::channel(db::revision::current(pool).await?).0);
        let follow = tokio::spawn(follow(listener, pool.clone(), Arc::clone(&latest)));
        let resync = tokio::spawn(resync_periodically(pool.clone(), Arc::clone(&latest)));
        Ok(RevisionWatch {
            latest,
            _tasks: Arc::new(Tasks(vec![follow, resync])),
        })
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<i64> {
        self.latest.subscribe()
    }

    pub(crate) fn latest(&self) -> i64 {
        *self.latest.borrow()
    }

    /// Records a revision seen in a commit of this process, without waiting for its NOTIFY.
    pub(crate) fn observe(&self, revision: i64) {
        advance(&self.latest, revision);
    }
}

fn advance(latest: &watch::Sender<i64>, revision: i64) {
    latest.send_if_modified(|current| {
        let newer = revision > *current;
        if newer {
            *current = revision;
        }
        newer
    });
}

async fn follow(mut listener: PgListener, pool: PgPool, latest: Arc<watch::Sender<i64>>) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => match notification.payload().parse() {
                Ok(revision) => advance(&latest, revision),
                Err(_) => tracing::warn!(
                    payload = notification.payload(),
                    "ignoring a malformed revision notification"
                ),
            },
            // The connection dropped; the next try_recv reconnects and listens again, but what was notified
            // in between is lost.
            Ok(None) => resync(&pool, &latest).await,
            Err(error) => {
                tracing::warn!(%error, "revision listener failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                resync(&pool, &latest).await;
            }
        }
    }
}

async fn resync_periodically(pool: PgPool, latest: Arc<watch::Sender<i64>>) {
    loop {
        tokio::time::sleep(RESYNC_EVERY).await;
        resync(&pool, &latest).await;
    }
}

async fn resync(pool: &PgPool, latest: &watch::Sender<i64>) {
    match db::revision::current(pool).await {
        Ok(revision) => advance(latest, revision),
        Err(error) => tracing::warn!(%error, "could not read the current revision"),
    }
}
