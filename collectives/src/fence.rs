//! The round fence: how a communicator hears the membership service's word, and tells it what
//! its links saw.
//!
//! A communicator belongs to one round of a job. When the rendezvous server ends that round
//! because a member was lost or left (or stops the job, or removes this member), whoever holds
//! the member's connection calls [`RoundFence::end`]: the collective in flight fails within
//! [`FENCE_POLL`] with [`CommError::RoundEnded`](crate::CommError::RoundEnded), naming the
//! lost rank, the round and the cause, and so does every later call, without waiting for
//! their deadlines. The other way, when this rank's link to a peer breaks without a goodbye,
//! the fence's reporter (if one was set) hears of it, to pass it on to the server as evidence.
//!
//! A fence nobody arms costs one relaxed atomic load per control-plane check. The engine's
//! links read it (`transport/links.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Longest a parked call sleeps between looks at an armed fence.
pub const FENCE_POLL: Duration = Duration::from_millis(20);

/// Why a communicator's round ended (the rendezvous client's type: one `RoundEnd`).
pub use dt_rdzv_proto::native::RoundEnd;

/// Called with (peer rank, what the link said) when a link to a peer breaks without goodbye.
pub type Reporter = Box<dyn Fn(usize, &str) + Send + Sync>;

/// Called with what timed out when one of this rank's calls timed out and the environment asks
/// for dumps on a timeout: asks the membership service to have every rank dump its trace.
pub type DumpAsker = Box<dyn Fn(&str) + Send + Sync>;

/// See the module docs. Shared by a communicator, its engine and whoever watches its round.
#[derive(Default)]
pub struct RoundFence {
    tripped: AtomicBool,
    armed: AtomicBool,
    end: Mutex<Option<RoundEnd>>,
    reporter: Mutex<Option<Reporter>>,
    dump_asker: Mutex<Option<DumpAsker>>,
}

impl std::fmt::Debug for RoundFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoundFence")
            .field("armed", &self.armed.load(Ordering::Relaxed))
            .field("end", &self.ended())
            .finish()
    }
}

impl RoundFence {
    /// A fence that has not ended.
    pub fn new() -> Arc<RoundFence> {
        Arc::new(RoundFence::default())
    }

    /// Says someone watches this round: parked calls look at the fence every [`FENCE_POLL`].
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    /// Whether [`arm`](Self::arm) was called.
    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// Ends the round (the first end wins; later ones are ignored).
    pub fn end(&self, end: RoundEnd) {
        let mut g = self.end.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(end);
            self.tripped.store(true, Ordering::Release);
        }
    }

    /// How the round ended, if it has.
    pub fn ended(&self) -> Option<RoundEnd> {
        if !self.tripped.load(Ordering::Acquire) {
            return None;
        }
        self.end.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sets who hears of peers lost by this rank's links (and arms the fence).
    pub fn set_reporter(&self, f: Reporter) {
        *self.reporter.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
        self.arm();
    }

    /// Sets who asks every rank of the round to dump its flight recorder when a call of this
    /// rank's times out (`TORCH_FR_DUMP_ON_TIMEOUT`).
    pub fn set_dump_asker(&self, f: DumpAsker) {
        *self.dump_asker.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// A call of this rank's timed out (`why`): ask every rank to dump, if someone can.
    pub(crate) fn ask_dump(&self, why: &str) {
        if let Some(f) = self
            .dump_asker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            f(why);
        }
    }

    /// A link to `peer` broke without goodbye: tell the reporter, if any.
    pub(crate) fn report_lost(&self, peer: usize, detail: &str) {
        if let Some(f) = self
            .reporter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            f(peer, detail);
        }
    }
}
