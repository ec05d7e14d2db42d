//! What the native door holds for its clients, against the server's one budget
//! ([`ServerMemory`]): messages queued for connections' writers, the jobs' published
//! configuration, and (apart, in the budget's share for them) partly received frames.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::partial::PartialBudget;
use crate::server::memory::{Door, Held, ServerMemory, release};

/// Queued messages a connection may hold whatever the server's budget says: a member reading
/// at its pace (a welcome, an answer or two) is never closed for the budget.
pub(crate) const QUEUED_FLOOR: u64 = 1 << 20;

/// The native door's holdings.
#[derive(Debug)]
pub(crate) struct NativeMemory {
    /// The server's budget, over every door.
    pub(crate) server: Arc<ServerMemory>,
    /// Partly received frames (their own bound, and the budget's share for frames).
    pub(crate) partial: Arc<PartialBudget>,
    /// Bytes of messages queued for writers, over every connection (about: as
    /// `outbox::approx_len` counts them).
    queued: AtomicU64,
    /// Bytes of the jobs' published configuration.
    config: AtomicU64,
}

impl Held for NativeMemory {
    fn held(&self) -> u64 {
        self.queued.load(Ordering::Relaxed) + self.config.load(Ordering::Relaxed)
    }

    fn frames(&self) -> u64 {
        self.partial.used() as u64
    }
}

impl NativeMemory {
    /// The door's holdings, registered with `server`; partial frames at most
    /// `max_partial_frame_bytes` (and the server's share for frames).
    pub(crate) fn new(server: Arc<ServerMemory>, max_partial_frame_bytes: usize) -> Arc<Self> {
        let m = Arc::new(Self {
            partial: PartialBudget::new(max_partial_frame_bytes, server.clone()),
            server: server.clone(),
            queued: AtomicU64::new(0),
            config: AtomicU64::new(0),
        });
        server.register(Door::Native, m.clone());
        m
    }

    /// A connection with `before` bytes queued would queue `n` more: past
    /// [`QUEUED_FLOOR`] that needs the server's room. `Err`: why not.
    pub(crate) fn queue(&self, before: u64, n: u64) -> Result<(), String> {
        if before + n > QUEUED_FLOOR {
            self.server.room(Door::Native, n)?;
        }
        self.queued.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// `n` queued bytes were written or dropped.
    pub(crate) fn unqueue(&self, n: u64) {
        release(&self.queued, n);
    }

    /// The machine's published configuration is `bytes` now.
    pub(crate) fn set_config(&self, bytes: u64) {
        self.config.store(bytes, Ordering::Relaxed);
    }

    /// What the server's budget leaves for more published configuration (`None`: no budget).
    pub(crate) fn config_room(&self) -> Option<u64> {
        self.server
            .data_limit()
            .map(|l| l.saturating_sub(self.server.total()))
    }
}
