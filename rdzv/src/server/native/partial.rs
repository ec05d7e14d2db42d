//! The server-wide budget for partly received native frames: every connection's bytes of a
//! frame not yet complete are charged to one budget, so that many connections each holding
//! most of a frame (1,200 x 1.9 MiB took the server to 2.3 GB) cannot exhaust memory. A
//! connection whose bytes do not fit is closed, naming the budget
//! (`--max-partial-frame-bytes`, 256 MiB by default: 128 connections each holding the largest
//! client frame, 2 MiB), and within the server's budget for every door's partial frames.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::server::memory::{Door, ServerMemory};

/// Bytes of partly received frames, server-wide.
#[derive(Debug)]
pub(crate) struct PartialBudget {
    limit: usize,
    used: AtomicUsize,
    server: Arc<ServerMemory>,
}

impl PartialBudget {
    /// A budget of `limit` bytes, within `server`'s share for partial frames.
    pub(crate) fn new(limit: usize, server: Arc<ServerMemory>) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            server,
        })
    }

    /// Bytes charged now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// One connection's charge; released when dropped.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<PartialBudget>,
    held: usize,
}

impl Charge {
    /// No bytes charged yet.
    pub(crate) fn new(budget: Arc<PartialBudget>) -> Self {
        Self { budget, held: 0 }
    }

    /// The connection now holds `bytes` of a partial frame; `Err` (why, naming the budget)
    /// when they do not fit.
    pub(crate) fn set(&mut self, bytes: usize) -> Result<(), String> {
        if bytes <= self.held {
            self.budget
                .used
                .fetch_sub(self.held - bytes, Ordering::AcqRel);
            self.held = bytes;
            return Ok(());
        }
        let more = bytes - self.held;
        self.budget.server.frame_room(Door::Native, more as u64)?;
        let limit = self.budget.limit;
        self.budget
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u + more <= limit).then_some(u + more)
            })
            .map_err(|used| {
                format!(
                    "the server-wide budget for partly received frames is spent ({used} of \
                     {limit} bytes held by connections' incomplete frames; this one needed \
                     {more} more; --max-partial-frame-bytes)"
                )
            })?;
        self.held = bytes;
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.held, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_past_the_budget_are_refused_and_released_on_drop() {
        let b = PartialBudget::new(100, ServerMemory::new(None));
        let mut one = Charge::new(b.clone());
        let mut two = Charge::new(b.clone());
        one.set(60).unwrap();
        let err = two.set(50).unwrap_err();
        assert!(err.contains("budget") && err.contains("100 bytes"), "{err}");
        two.set(40).unwrap();
        one.set(10).unwrap();
        assert_eq!(b.used(), 50);
        drop(one);
        drop(two);
        assert_eq!(b.used(), 0);
    }
}
