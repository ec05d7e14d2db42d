//! What other parts of a member's process hold besides the client itself: a
//! [`MemberHandle`] lets a communicator hear at once when the server ends the round it was built
//! for ([`MemberHandle::on_round_end`]), and send the server what its links saw
//! ([`MemberHandle::report`]), without the client's owner (which may be blocked waiting for a
//! message) and without a thread of its own: the session task runs the callbacks as the
//! server's messages arrive.
//!
//! Only the server's word ends a round here: a `RoundEnded`, a `Welcome` for a later round, the
//! job's end, or the server closing this member's connection on purpose (it was declared lost
//! or the job was stopped). A connection lost to a server restart or a network failure ends
//! nothing: the member keeps training while its session reconnects.

use std::sync::{Arc, Mutex};

use dt_rdzv_proto::native::ClientMsg;
use tokio::sync::mpsc;

use super::error::NativeError;

pub use dt_rdzv_proto::native::RoundEnd;

type Callback = Box<dyn FnOnce(&RoundEnd) + Send>;

/// What a dump watcher is told: the round, the asking rank, what timed out there.
type DumpCallback = Arc<dyn Fn(u64, u32, &str) + Send + Sync>;

#[derive(Default)]
struct State {
    /// Every round up to this one has ended (0: none).
    ended_through: u64,
    /// Why the latest of them ended.
    last: Option<RoundEnd>,
    /// Every round ended (the job ended, or this member was removed).
    all: Option<RoundEnd>,
    waiting: Vec<(u64, Callback)>,
    /// Called on every ask to dump (see [`MemberHandle::on_dump`]).
    dumps: Vec<DumpCallback>,
}

/// The session's list of round watchers.
#[derive(Default)]
pub(crate) struct Watchers {
    state: Mutex<State>,
}

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("Watchers")
            .field("ended_through", &s.ended_through)
            .field("waiting", &s.waiting.len())
            .finish()
    }
}

impl Watchers {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Calls `f` when round `round` ends, or at once if it already has.
    pub(crate) fn add(&self, round: u64, f: Callback) {
        let now = {
            let mut s = self.lock();
            match (&s.all, &s.last) {
                (Some(e), _) => Some(e.clone()),
                (None, Some(e)) if round <= s.ended_through => Some(e.clone()),
                _ => {
                    s.waiting.push((round, f));
                    return;
                }
            }
        };
        if let Some(e) = now {
            f(&e);
        }
    }

    /// A peer asked every member of `round` to dump its flight recorder.
    pub(crate) fn dump(&self, round: u64, rank: u32, why: &str) {
        let due = self.lock().dumps.clone();
        for f in due {
            f(round, rank, why);
        }
    }

    /// Every round up to `end.round` ended.
    pub(crate) fn end_through(&self, end: RoundEnd) {
        let due = {
            let mut s = self.lock();
            if end.round < s.ended_through || s.all.is_some() {
                return;
            }
            s.ended_through = end.round;
            s.last = Some(end.clone());
            let (due, keep): (Vec<_>, Vec<_>) =
                s.waiting.drain(..).partition(|(r, _)| *r <= end.round);
            s.waiting = keep;
            due
        };
        for (_, f) in due {
            f(&end);
        }
    }

    /// Every round ended (the job, or this member's place in it).
    pub(crate) fn end_all(&self, end: RoundEnd) {
        let due = {
            let mut s = self.lock();
            if s.all.is_some() {
                return;
            }
            s.all = Some(end.clone());
            std::mem::take(&mut s.waiting)
        };
        for (_, f) in due {
            f(&end);
        }
    }
}

/// A handle on a member's connection for the rest of its process (see the module docs).
/// Cheap to clone; outlives nothing: once the client is closed, reports go nowhere.
#[derive(Clone)]
pub struct MemberHandle {
    pub(crate) out: mpsc::UnboundedSender<ClientMsg>,
    pub(crate) watchers: Arc<Watchers>,
}

impl std::fmt::Debug for MemberHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberHandle")
            .field("watchers", &self.watchers)
            .finish()
    }
}

impl MemberHandle {
    /// Calls `f` once, on the client's session task, when the server ends round `round` (or
    /// the job, or this member's place in it); at once if that already happened. `f` must not
    /// block.
    pub fn on_round_end(&self, round: u64, f: impl FnOnce(&RoundEnd) + Send + 'static) {
        self.watchers.add(round, Box::new(f));
    }

    /// Calls `f(round, rank, why)` on the client's session task whenever a member of this
    /// member's round asks every member to dump its flight recorder (rank `rank`'s call timed
    /// out: `why`). `f` must not block for long.
    pub fn on_dump(&self, f: impl Fn(u64, u32, &str) + Send + Sync + 'static) {
        self.watchers.lock().dumps.push(Arc::new(f));
    }

    /// Asks the server to have every other member of `round` dump its flight recorder: this
    /// member's call timed out (`why`). The server passes on the first ask of a round only.
    pub fn ask_dump(&self, round: u64, why: String) -> Result<(), NativeError> {
        self.out
            .send(ClientMsg::Dump { round, why })
            .map_err(|_| NativeError::Lost("connection closed".into()))
    }

    /// Tells the server this member's link to `rank` of `round` broke, and how (evidence; the
    /// server probes that member before acting on it).
    pub fn report(&self, round: u64, rank: u32, evidence: String) -> Result<(), NativeError> {
        self.out
            .send(ClientMsg::Report {
                round,
                rank,
                evidence,
            })
            .map_err(|_| NativeError::Lost("connection closed".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn end(round: u64) -> RoundEnd {
        RoundEnd {
            round,
            lost: Some(1),
            why: format!("round {round} over"),
            removed: false,
        }
    }

    #[test]
    fn watchers_fire_once_for_their_round_or_at_once_when_late() {
        let w = Watchers::default();
        let hits = Arc::new(AtomicU32::new(0));
        for r in [1u64, 2, 3] {
            let h = hits.clone();
            w.add(
                r,
                Box::new(move |e: &RoundEnd| {
                    assert!(e.round >= r);
                    h.fetch_add(1, Ordering::SeqCst);
                }),
            );
        }
        w.end_through(end(2));
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        w.end_through(end(1)); // older news changes nothing
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        let h = hits.clone();
        w.add(
            2,
            Box::new(move |_: &RoundEnd| {
                h.fetch_add(10, Ordering::SeqCst);
            }),
        );
        assert_eq!(
            hits.load(Ordering::SeqCst),
            12,
            "a late watcher fires at once"
        );
        w.end_all(RoundEnd {
            removed: true,
            ..end(3)
        });
        assert_eq!(hits.load(Ordering::SeqCst), 13);
        let h = hits.clone();
        w.add(
            99,
            Box::new(move |e: &RoundEnd| {
                assert!(e.removed);
                h.fetch_add(100, Ordering::SeqCst);
            }),
        );
        assert_eq!(hits.load(Ordering::SeqCst), 113);
    }
}
