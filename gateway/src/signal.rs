//! A wake-up signal between tasks of one worker thread.
//!
//! `tokio::sync::Notify` is built for threads: every wait registers in a mutex-guarded list, and every wake takes
//! the lock. The gateway's hot paths (a backend reply waking its client's task, a request waking its backend
//! connection's task) stay on one thread, so a flag and one stored waker do the same job without atomics beyond
//! the waker's own reference count.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::{Rc, Weak};
use std::task::{Poll, Waker};

/// One task waits, any code on the same thread signals. Like `Notify::notify_one`, a signal sent while nobody
/// waits is kept (one, not counted) and ends the next wait at once.
#[derive(Default)]
pub(crate) struct LocalSignal {
    signalled: Cell<bool>,
    waiter: Cell<Option<Waker>>,
}

impl LocalSignal {
    /// Wakes the waiting task, or lets its next wait end at once.
    pub(crate) fn notify(&self) {
        self.signalled.set(true);
        if let Some(waker) = self.waiter.take() {
            waker.wake();
        }
    }

    /// Waits for a signal sent since the last wait ended. Dropping the wait early is fine: at worst the task is
    /// woken once for nothing.
    pub(crate) async fn notified(&self) {
        poll_fn(|cx| {
            if self.signalled.replace(false) {
                return Poll::Ready(());
            }
            let waker = match self.waiter.take() {
                Some(waker) if waker.will_wake(cx.waker()) => waker,
                _ => cx.waker().clone(),
            };
            self.waiter.set(Some(waker));
            Poll::Pending
        })
        .await;
    }
}

/// Returns once every task already scheduled on this worker has run: the caller's task goes to the back of the
/// worker's run queue. (`tokio::task::yield_now` waits for the next poll of the sockets as well.) A backend
/// connection waits so before it writes, and the sessions woken with it add their requests to the same write.
pub(crate) async fn after_queued_tasks() {
    let mut queued = false;
    poll_fn(|cx| {
        if queued {
            return Poll::Ready(());
        }
        queued = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
}

/// Signals every listener at once, each through its own [`LocalSignal`]: a worker tells its sessions about a new
/// snapshot or a shutdown this way, so that a session's wait for those is a flag check rather than a
/// registration with a channel shared by every thread.
#[derive(Default)]
pub(crate) struct LocalBroadcast {
    listeners: RefCell<Vec<Weak<LocalSignal>>>,
}

impl LocalBroadcast {
    /// A signal that every [`LocalBroadcast::notify_all`] from now on notifies, until it is dropped.
    pub(crate) fn listen(&self) -> Rc<LocalSignal> {
        let signal = Rc::new(LocalSignal::default());
        let mut listeners = self.listeners.borrow_mut();
        if listeners.len() == listeners.capacity() {
            // Forget the listeners that are gone before growing: the list stays proportional to the live ones.
            listeners.retain(|listener| listener.strong_count() > 0);
        }
        listeners.push(Rc::downgrade(&signal));
        signal
    }

    pub(crate) fn notify_all(&self) {
        self.listeners
            .borrow_mut()
            .retain(|listener| match listener.upgrade() {
                Some(signal) => {
                    signal.notify();
                    true
                }
                None => false,
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_signal_wakes_the_waiter_and_one_sent_early_is_kept() {
        let signal = Rc::new(LocalSignal::default());
        signal.notify();
        signal.notify();
        signal.notified().await; // kept: ends at once
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let waiter = tokio::task::spawn_local({
                    let signal = Rc::clone(&signal);
                    async move { signal.notified().await }
                });
                tokio::task::yield_now().await;
                assert!(!waiter.is_finished(), "the second notify was not counted");
                signal.notify();
                tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                    .await
                    .expect("woken")
                    .expect("no panic");
            })
            .await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_task_waiting_for_the_queued_tasks_resumes_after_those_woken_behind_it() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let log = Rc::new(RefCell::new(Vec::new()));
                let signals: Vec<Rc<LocalSignal>> = (0..4).map(|_| Rc::default()).collect();
                let writer = tokio::task::spawn_local({
                    let (signal, log) = (Rc::clone(&signals[0]), Rc::clone(&log));
                    async move {
                        signal.notified().await;
                        after_queued_tasks().await;
                        log.borrow().clone()
                    }
                });
                for (i, signal) in signals.iter().enumerate().skip(1) {
                    let (signal, log) = (Rc::clone(signal), Rc::clone(&log));
                    tokio::task::spawn_local(async move {
                        signal.notified().await;
                        log.borrow_mut().push(i);
                    });
                }
                tokio::task::yield_now().await; // every task waits for its signal
                // The writer is woken first, the others after it: they run before it goes on.
                for signal in &signals {
                    signal.notify();
                }
                let seen = tokio::time::timeout(std::time::Duration::from_secs(5), writer)
                    .await
                    .expect("resumed")
                    .expect("no panic");
                assert_eq!(seen, vec![1, 2, 3]);
            })
            .await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_broadcast_signals_every_live_listener_and_forgets_the_others() {
        let broadcast = LocalBroadcast::default();
        let kept: Vec<Rc<LocalSignal>> = (0..3).map(|_| broadcast.listen()).collect();
        for _ in 0..100 {
            drop(broadcast.listen());
        }
        assert!(
            broadcast.listeners.borrow().len() < 100,
            "gone listeners are forgotten"
        );
        broadcast.notify_all();
        for signal in &kept {
            signal.notified().await; // ends at once: signalled
        }
        assert_eq!(broadcast.listeners.borrow().len(), 3);
    }
}
