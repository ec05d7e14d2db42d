//! An operation between its submission and its result: how it can end badly
//! ([`NegotiateError`]), what it yields ([`Output`]), the slot its caller waits on, and what the
//! negotiator holds while the operation waits for its cycle ([`Local`], whose slot fails the
//! operation if it is dropped unfinished).

use std::sync::{Arc, Condvar, Mutex};

use super::payload::Payload;
use super::request::Request;

/// How an operation ended badly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NegotiateError {
    /// The ranks disagreed about the operation, or some did not submit it before the
    /// deadline (every rank that did gets this).
    #[error("{0}")]
    Mismatch(String),
    /// The communicator failed; this and every later operation fail.
    #[error("{0}")]
    Comm(String),
    /// The negotiation ended before the operation ran: this rank or another shut down
    /// (Horovod's rule: one rank's shutdown ends it for every rank). The operation's name and
    /// who shut down.
    #[error("{0} did not run: the negotiation was shut down by {1}")]
    Shutdown(String, String),
    /// The buffer does not hold what the request describes.
    #[error("{0}")]
    BadBuffer(String),
    /// An operation of this name is already pending on this rank (Horovod's `ValueError`).
    #[error(
        "an operation named {0:?} is already pending (names must be unique until the operation completes)"
    )]
    Duplicate(String),
}

/// A completed operation's result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// The result buffer (for an allgather or alltoall, every source's part in rank order).
    pub data: Vec<u8>,
    /// Allgather: elements from each rank; alltoall: elements received from each rank; empty
    /// otherwise.
    pub counts: Vec<u64>,
    /// Unix microseconds when it was submitted, when every rank had submitted it (the end of
    /// its negotiation) and when it completed (for timelines).
    pub times: [u64; 3],
}

impl Output {
    pub(super) fn of(data: Vec<u8>) -> Self {
        Self {
            data,
            ..Self::default()
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) done: Mutex<Option<Result<Output, NegotiateError>>>,
    pub(super) cv: Condvar,
    /// Submitted, negotiated, done (Unix µs).
    times: Mutex<[u64; 3]>,
}

pub(super) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Slot {
    pub(super) fn mark(&self, i: usize) {
        self.times.lock().unwrap_or_else(|p| p.into_inner())[i] = now_us();
    }

    pub(super) fn finish(&self, r: Result<Output, NegotiateError>) {
        self.mark(2);
        let times = *self.times.lock().unwrap_or_else(|p| p.into_inner());
        let r = r.map(|o| Output { times, ..o });
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        self.cv.notify_all();
    }
}

/// An operation waiting for its cycle: what was asked, its buffer, and its slot.
pub(super) struct Local {
    pub(super) request: Request,
    pub(super) data: Payload,
    pub(super) slot: Owed,
}

/// A submitted operation's slot as the negotiator holds it. Dropped unfinished (a collective
/// failed while the operation ran, and the error left it behind), it fails the operation, so
/// its waiter is never left blocked; the error itself fails everything else pending.
pub(super) struct Owed(pub(super) Arc<Slot>, pub(super) String);

impl std::ops::Deref for Owed {
    type Target = Slot;
    fn deref(&self) -> &Slot {
        &self.0
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        let done = self
            .0
            .done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if !done {
            self.0.finish(Err(NegotiateError::Comm(format!(
                "{}: the communicator failed while it ran",
                self.1
            ))));
        }
    }
}
