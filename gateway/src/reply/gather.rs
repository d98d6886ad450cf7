//! The parts of a reply that a backend gathers itself (a cluster's fan-out to every master): the combined reply
//! goes to the handle the parts were split from once every part has answered.

use std::cell::{Cell, RefCell};

use bytes::Bytes;

use super::{Combine, ReplyHandle};

/// The parts of a reply a backend gathers itself; the combined reply goes to `whole`.
pub(super) struct Gather {
    parts: RefCell<Vec<Option<Bytes>>>,
    missing: Cell<usize>,
    whole: RefCell<Option<(ReplyHandle, Combine)>>,
}

impl Gather {
    pub(super) fn new(whole: ReplyHandle, parts: usize, combine: Combine) -> Gather {
        Gather {
            parts: RefCell::new(vec![None; parts]),
            missing: Cell::new(parts),
            whole: RefCell::new(Some((whole, combine))),
        }
    }

    pub(super) fn fill(&self, index: usize, reply: Bytes) {
        {
            let mut parts = self.parts.borrow_mut();
            match parts.get_mut(index) {
                Some(entry @ None) => *entry = Some(reply),
                _ => return,
            }
        }
        self.missing.set(self.missing.get() - 1);
        if self.missing.get() > 0 {
            return;
        }
        let replies = self
            .parts
            .borrow_mut()
            .iter_mut()
            .map(|p| p.take().unwrap_or_default())
            .collect();
        let whole = self.whole.borrow_mut().take();
        if let Some((whole, combine)) = whole {
            whole.deliver(combine(replies));
        }
    }
}
