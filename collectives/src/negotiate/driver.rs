//! [`Negotiator`]: runs the negotiation over a [`Communicator`] on a background thread.
//!
//! Every cycle, each rank all-gathers what it submitted since the last one (and whether it is
//! shutting down); every rank feeds the same gathered requests, in rank order, to its own
//! [`Coordinator`], so all of them compute the same responses in the same order with no
//! broadcast, and run them: fused allreduces through one buffer, broadcasts, allgathers with a
//! first dimension of each rank's own, barriers. Submissions never run inside `submit`: an
//! operation completes on a later cycle, once every rank has submitted its name.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::coordinator::Coordinator;
use super::execute::execute;
use super::payload::Payload;
use super::pending::{Local, Owed, Slot, now_us};
pub use super::pending::{NegotiateError, Output};
use super::request::{Kind, Request};
use super::slot::Slots;
use super::stall_clock::StallClock;
use super::wire;
use crate::{CommError, Communicator};

/// An operation in flight: poll it, or wait for its result buffer. Waiting for one that has
/// not completed starts the negotiator's next cycle at once ([`Negotiator::flush`]).
#[derive(Debug, Clone)]
pub struct Handle(Arc<Slot>, Weak<Shared>);

impl Handle {
    /// Whether it has completed (successfully or not).
    pub fn poll(&self) -> bool {
        self.0
            .done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Wakes the negotiator for its next cycle when the operation is not done (its waiter
    /// needs it now). Not under the slot's lock: the cycle thread takes the state's lock, then
    /// a slot's (failing or shutting down), so the other order could deadlock.
    fn flush_unless_done(&self) {
        if !self.poll()
            && let Some(shared) = self.1.upgrade()
        {
            shared.nudge();
        }
    }

    /// Waits at most `limit` for it to complete; whether it has (the result stays for `wait`
    /// or `take`). Lets a waiter look at other things (Python's signals) between slices.
    pub fn wait_done(&self, limit: std::time::Duration) -> bool {
        self.flush_unless_done();
        let g = self.0.done.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self
            .0
            .cv
            .wait_timeout_while(g, limit, |d| d.is_none())
            .unwrap_or_else(|p| p.into_inner());
        g.is_some()
    }

    /// Waits for it; its result (a copy: the result stays for other waits).
    pub fn wait(&self) -> Result<Output, NegotiateError> {
        self.flush_unless_done();
        let mut g = self.0.done.lock().unwrap_or_else(|p| p.into_inner());
        while g.is_none() {
            g = self.0.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.clone().expect("done")
    }

    /// Waits for it and moves its result out, without copying its buffer. A later `wait` or
    /// `take` on a clone of this handle gets an error saying the result was taken.
    pub fn take(self) -> Result<Output, NegotiateError> {
        self.flush_unless_done();
        let mut g = self.0.done.lock().unwrap_or_else(|p| p.into_inner());
        while g.is_none() {
            g = self.0.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        let taken = Err(NegotiateError::BadBuffer(
            "this operation's result was already taken".into(),
        ));
        g.replace(taken).expect("done")
    }
}

/// Most cycle marks kept between two [`Negotiator::take_cycle_marks`] calls (about 17
/// minutes of 1 ms cycles); later ones are dropped and counted.
const MAX_MARKS: usize = 1 << 20;

#[derive(Default)]
struct State {
    /// Cycle start times (Unix µs) while marking (Horovod's timeline `mark_cycles`).
    marks: Option<Vec<u64>>,
    /// Marks dropped past [`MAX_MARKS`].
    marks_dropped: u64,
    /// Submitted since the last cycle.
    new: Vec<Request>,
    /// Submitted and not answered, by name.
    pending: HashMap<String, Local>,
    /// A caller asked for the next cycle now ([`Negotiator::flush`]).
    nudged: bool,
    stopping: bool,
    /// Who ended the negotiation, when another rank did.
    ended_by: Option<String>,
    failed: Option<String>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the cycle thread before its cycle time is up ([`Negotiator::flush`]).
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn nudge(&self) {
        self.lock().nudged = true;
        self.wake.notify_one();
    }
}

/// Name-based negotiation over a communicator (see the module docs).
pub struct Negotiator {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Negotiator {
    /// Starts the cycle thread over `comm`: a cycle every `cycle`, allreduces fused up to
    /// `threshold` bytes (0: none). A name some ranks do not submit fails on every rank after
    /// about the communicator's timeout (counted in cycles). While it runs, the negotiator is
    /// the communicator's only caller: other calls on it would interleave with the cycles'
    /// collectives.
    pub fn start(comm: Arc<Communicator>, cycle: Duration, threshold: u64) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("dtcomm-negotiate-{}", comm.rank()))
            .spawn(move || run(comm, s, cycle, threshold))
            .expect("spawn the negotiation thread");
        Self {
            shared,
            thread: Some(thread),
        }
    }

    /// Submits a named operation with this rank's buffer (owned bytes, or the caller's memory
    /// in place: see [`Payload`]). A name already pending is refused at once; so is a buffer
    /// whose length does not match the request.
    pub fn submit(
        &self,
        request: Request,
        data: impl Into<Payload>,
    ) -> Result<Handle, NegotiateError> {
        let data = data.into();
        let want = request.bytes() as usize;
        if !matches!(request.kind, Kind::Barrier | Kind::Join) && data.len() != want {
            return Err(NegotiateError::BadBuffer(format!(
                "{}: the buffer holds {} bytes; the request describes {want}",
                request.name,
                data.len()
            )));
        }
        let mut st = self.shared.lock();
        if let Some(why) = &st.failed {
            return Err(NegotiateError::Comm(why.clone()));
        }
        if let Some(by) = &st.ended_by {
            return Err(NegotiateError::Shutdown(request.name, by.clone()));
        }
        if st.stopping {
            return Err(NegotiateError::Shutdown(request.name, "this rank".into()));
        }
        if st.pending.contains_key(&request.name) {
            return Err(NegotiateError::Duplicate(request.name));
        }
        let slot = Arc::new(Slot::default());
        slot.mark(0);
        st.new.push(request.clone());
        let name = request.name.clone();
        st.pending.insert(
            name.clone(),
            Local {
                request,
                data,
                slot: Owed(slot.clone(), name),
            },
        );
        Ok(Handle(slot, Arc::downgrade(&self.shared)))
    }

    /// Who ended this negotiation, when another rank shut it down (see
    /// [`Negotiator::shutdown`]); `None` while it runs.
    pub fn ended_by(&self) -> Option<String> {
        self.shared.lock().ended_by.clone()
    }

    /// Starts the next cycle now rather than when the cycle time is up: for a caller about to
    /// wait for operations it submitted (no more are coming from it before they complete, so
    /// waiting out the cycle time would only add latency). Every rank still meets in the
    /// cycle; one that wakes early waits there for the others. Cycles started this way do
    /// not count toward the stall deadline unless some rank waited its whole cycle time.
    pub fn flush(&self) {
        self.shared.nudge();
    }

    /// Starts (or stops) recording when each cycle starts, for a timeline's cycle marks
    /// (Horovod's `start_timeline(..., mark_cycles=True)`, `HOROVOD_TIMELINE_MARK_CYCLES=1`).
    pub fn mark_cycles(&self, on: bool) {
        let mut st = self.shared.lock();
        st.marks = on.then(Vec::new);
        st.marks_dropped = 0;
    }

    /// The cycle start times (Unix µs) recorded since the last call, and how many were
    /// dropped because nobody took them (at most 2^20 are kept).
    pub fn take_cycle_marks(&self) -> (Vec<u64>, u64) {
        let mut st = self.shared.lock();
        let dropped = std::mem::take(&mut st.marks_dropped);
        (
            st.marks.as_mut().map(std::mem::take).unwrap_or_default(),
            dropped,
        )
    }

    /// Shuts down, and with it every rank's negotiation in the same cycle (Horovod's rule):
    /// operations still pending on any rank then fail with [`NegotiateError::Shutdown`] naming
    /// the ranks that shut down, and later submissions there fail the same way.
    pub fn shutdown(mut self) {
        self.shared.lock().stopping = true;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Negotiator {
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(comm: Arc<Communicator>, shared: Arc<Shared>, cycle: Duration, threshold: u64) {
    let world = comm.world();
    let stall = comm.config().timeout.value;
    let cycles = (stall.as_secs_f64() / cycle.as_secs_f64().max(1e-4)).ceil() as u64;
    let mut coord = Coordinator::new(world as u32, threshold).with_stall_cycles(cycles);
    let fail_all = |why: String| {
        let mut st = shared.lock();
        st.failed = Some(why.clone());
        for (_, l) in st.pending.drain() {
            l.slot.finish(Err(NegotiateError::Comm(why.clone())));
        }
    };
    let mut slots = Slots::default();
    let mut clock = StallClock::new(cycle, Instant::now());
    loop {
        let payload = {
            let st = shared.lock();
            let (mut st, _) = shared
                .wake
                .wait_timeout_while(st, cycle, |s| !s.nudged)
                .unwrap_or_else(|p| p.into_inner());
            st.nudged = false;
            let full = st.marks.as_ref().map(|m| m.len() >= MAX_MARKS);
            match full {
                Some(false) => st.marks.as_mut().expect("marking").push(now_us()),
                Some(true) => st.marks_dropped += 1,
                None => {}
            }
            let new = std::mem::take(&mut st.new);
            let flags = wire::Flags {
                stopping: st.stopping,
                charge: clock.propose(),
            };
            wire::encode(flags, &new)
        };
        let gathered = match gather(&comm, &mut slots, &payload) {
            Ok(g) => g,
            Err(e) => return fail_all(e.to_string()),
        };
        clock.gathered(Instant::now());
        let (mut stoppers, mut charged) = (Vec::new(), 0u32);
        for (rank, bytes) in gathered.iter().enumerate() {
            match wire::decode(bytes) {
                Ok((flags, reqs)) => {
                    if flags.stopping {
                        stoppers.push(rank);
                    }
                    charged = charged.max(flags.charge);
                    for r in reqs {
                        // Duplicates were refused at submission, so this cannot fail.
                        let _ = coord.submit(rank as u32, r);
                    }
                }
                Err(e) => return fail_all(format!("rank {rank}'s negotiation message: {e}")),
            }
        }
        // Every rank saw the same flags, so all count the same cycles.
        clock.charged(charged);
        let responses = coord.cycle_by(u64::from(charged));
        for resp in responses {
            if let Err(e) = execute(&comm, &mut |names| take_present(&shared, names), resp) {
                return fail_all(e.to_string());
            }
        }
        // One rank's shutdown ends the negotiation for every rank, in the same cycle on all
        // (they saw the same flags): what every rank submitted has run above; what is left
        // could never complete, so it fails now rather than at the stall deadline.
        if !stoppers.is_empty() {
            let by = if stoppers.len() == 1 {
                format!("rank {}", stoppers[0])
            } else {
                format!("ranks {stoppers:?}")
            };
            let mut st = shared.lock();
            if !stoppers.contains(&comm.rank()) {
                st.ended_by = Some(format!(
                    "{by} (it called shutdown or exited; an exception there is in its log; \
                     call init again to go on)"
                ));
            }
            let by = st.ended_by.clone().unwrap_or(by);
            for (name, l) in st.pending.drain() {
                l.slot
                    .finish(Err(NegotiateError::Shutdown(name, by.clone())));
            }
            return;
        }
    }
}

/// Every rank's bytes, in rank order: one all-gather of fixed-size slots, and a second of
/// the overflows only when some rank's bytes did not fit (see [`Slots`]).
fn gather(
    comm: &Communicator,
    slots: &mut Slots,
    payload: &[u8],
) -> Result<Vec<Vec<u8>>, CommError> {
    let mine = slots.pack(payload);
    let mut all = vec![0u8; mine.len() * comm.world()];
    comm.all_gather(&mine, &mut all)?;
    let heads = slots.unpack(&all);
    let lens: Vec<usize> = heads.iter().map(|(l, _)| *l).collect();
    let mut out: Vec<Vec<u8>> = heads.iter().map(|(_, h)| h.to_vec()).collect();
    let over = slots.overflow(&lens);
    if over.iter().any(|&o| o > 0) {
        let tail = &payload[payload.len() - over[comm.rank()]..];
        let mut rest = vec![0u8; over.iter().sum()];
        comm.all_gather_v(tail, &mut rest, &over)?;
        let mut at = 0;
        for (o, n) in out.iter_mut().zip(&over) {
            o.extend_from_slice(&rest[at..at + n]);
            at += n;
        }
    }
    slots.settle(&lens);
    Ok(out)
}

/// This rank's entries for `names` (none when it has joined, or for a stalled name it never
/// submitted).
fn take_present(shared: &Shared, names: &[String]) -> Vec<Local> {
    let mut st = shared.lock();
    names.iter().filter_map(|n| st.pending.remove(n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_left_behind_by_a_failed_collective_fails_instead_of_blocking() {
        let slot = Arc::new(Slot::default());
        let handle = Handle(slot.clone(), Weak::new());
        let done = Owed(slot.clone(), "allreduce.g".into());
        done.finish(Ok(Output::default()));
        drop(done);
        assert!(handle.wait().is_ok(), "a finished one keeps its result");

        let slot = Arc::new(Slot::default());
        let handle = Handle(slot.clone(), Weak::new());
        drop(Owed(slot, "allreduce.h".into()));
        assert!(handle.poll());
        let e = handle.take().unwrap_err();
        assert!(
            matches!(&e, NegotiateError::Comm(m) if m.starts_with("allreduce.h:")),
            "{e}"
        );
    }
}
