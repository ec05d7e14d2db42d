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
use super::payload::Payload;
use super::request::{Kind, Request, Response};
use super::scale::scale;
use super::slot::Slots;
use super::wire;
use crate::call::{Call, Collective, RawBuf};
use crate::{CommError, Communicator};

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
    fn of(data: Vec<u8>) -> Self {
        Self {
            data,
            ..Self::default()
        }
    }
}

#[derive(Debug, Default)]
struct Slot {
    done: Mutex<Option<Result<Output, NegotiateError>>>,
    cv: Condvar,
    /// Submitted, negotiated, done (Unix µs).
    times: Mutex<[u64; 3]>,
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Slot {
    fn mark(&self, i: usize) {
        self.times.lock().unwrap_or_else(|p| p.into_inner())[i] = now_us();
    }

    fn finish(&self, r: Result<Output, NegotiateError>) {
        self.mark(2);
        let times = *self.times.lock().unwrap_or_else(|p| p.into_inner());
        let r = r.map(|o| Output { times, ..o });
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        self.cv.notify_all();
    }
}

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

struct Local {
    request: Request,
    data: Payload,
    slot: Owed,
}

/// A submitted operation's slot as the negotiator holds it. Dropped unfinished (a collective
/// failed while the operation ran, and the error left it behind), it fails the operation, so
/// its waiter is never left blocked; the error itself fails everything else pending.
struct Owed(Arc<Slot>, String);

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

/// What a cycle counts toward the stall deadline: the cycle times since the previous one
/// (`elapsed`), at least 1 when the rank waited its whole cycle time, 0 for an early cycle that
/// came within one.
fn charge(elapsed: Duration, cycle: Duration, waited: bool) -> u32 {
    let n = (elapsed.as_secs_f64() / cycle.as_secs_f64().max(1e-4)) as u32;
    if waited { n.max(1) } else { n }
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
    let mut last_cycle = Instant::now();
    loop {
        let payload = {
            let st = shared.lock();
            let (mut st, _) = shared
                .wake
                .wait_timeout_while(st, cycle, |s| !s.nudged)
                .unwrap_or_else(|p| p.into_inner());
            let waited = !std::mem::take(&mut st.nudged);
            let charge = charge(last_cycle.elapsed(), cycle, waited);
            last_cycle = Instant::now();
            let full = st.marks.as_ref().map(|m| m.len() >= MAX_MARKS);
            match full {
                Some(false) => st.marks.as_mut().expect("marking").push(now_us()),
                Some(true) => st.marks_dropped += 1,
                None => {}
            }
            let new = std::mem::take(&mut st.new);
            let flags = wire::Flags {
                stopping: st.stopping,
                charge,
            };
            wire::encode(flags, &new)
        };
        let gathered = match gather(&comm, &mut slots, &payload) {
            Ok(g) => g,
            Err(e) => return fail_all(e.to_string()),
        };
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
        let responses = coord.cycle_by(u64::from(charged));
        for resp in responses {
            if let Err(e) = execute(&comm, &shared, resp) {
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

/// `data` (elements of `head.dtype`) scaled by `head.prescale`, then allreduced in place by
/// `head.op` (the caller applies the postscale to what it keeps).
fn prescaled_allreduce(
    comm: &Communicator,
    data: &mut [u8],
    head: &Request,
) -> Result<(), CommError> {
    scale(data, head.dtype, head.prescale);
    let count = data.len() / head.dtype.size();
    let op = head.op.expect("an allreduce or reducescatter has an op");
    let call = Call::new(Collective::AllReduce { op }).recv(RawBuf::host(
        data.as_mut_ptr(),
        count,
        head.dtype,
    ));
    // SAFETY: `data` is a live, exclusively borrowed host buffer of `count` elements of
    // `dtype` for the whole blocking call.
    unsafe { comm.run(&call) }
}

fn execute(comm: &Communicator, shared: &Shared, resp: Response) -> Result<(), CommError> {
    match resp {
        Response::Error { name, message } => {
            for l in take_present(shared, &[name]) {
                l.slot
                    .finish(Err(NegotiateError::Mismatch(message.clone())));
            }
        }
        Response::Run {
            kind,
            names,
            elements,
            bytes,
            head,
        } => {
            let mut locals = take_present(shared, &names);
            for l in &locals {
                l.slot.mark(1);
            }
            if locals.is_empty() {
                // This rank has joined: it takes part without data.
                match (kind, head) {
                    (Kind::Allreduce, Some(head)) => {
                        // (zeros scaled are zeros: the prescale changes nothing here)
                        let mut zeros = vec![0u8; bytes as usize];
                        prescaled_allreduce(comm, &mut zeros, &head)?;
                    }
                    (Kind::Barrier, _) => comm.barrier()?,
                    _ => {}
                }
                return Ok(());
            }
            let head = locals[0].request.clone();
            match kind {
                Kind::Allreduce if locals.len() == 1 => {
                    // Nothing to fuse: reduce the tensor's own buffer, no copies.
                    let mut l = locals.remove(0);
                    prescaled_allreduce(comm, l.data.bytes_mut(), &head)?;
                    scale(l.data.bytes_mut(), head.dtype, head.postscale);
                    l.slot.finish(Ok(Output::of(l.data.into_result())));
                }
                Kind::Allreduce => {
                    let mut fused: Vec<u8> = Vec::new();
                    for l in &locals {
                        fused.extend_from_slice(l.data.bytes());
                    }
                    prescaled_allreduce(comm, &mut fused, &head)?;
                    scale(&mut fused, head.dtype, head.postscale);
                    let mut at = 0;
                    for l in &mut locals {
                        let n = l.data.len();
                        l.data.bytes_mut().copy_from_slice(&fused[at..at + n]);
                        at += n;
                    }
                    for l in locals {
                        l.slot.finish(Ok(Output::of(l.data.into_result())));
                    }
                }
                Kind::Broadcast => {
                    let mut l = locals.remove(0);
                    let root = head.root.expect("a broadcast has a root") as usize;
                    let count = l.data.len() / head.dtype.size();
                    let call = Call::new(Collective::Broadcast { root }).recv(RawBuf::host(
                        l.data.bytes_mut().as_mut_ptr(),
                        count,
                        head.dtype,
                    ));
                    // SAFETY: as above, `l.data` for the whole call.
                    unsafe { comm.run(&call)? };
                    l.slot.finish(Ok(Output::of(l.data.into_result())));
                }
                Kind::Allgather => {
                    let l = locals.remove(0);
                    let counts: Vec<usize> = elements.iter().map(|e| *e as usize).collect();
                    let total: usize = counts.iter().sum();
                    let mut out = vec![0u8; total * head.dtype.size()];
                    let call = Call::new(Collective::AllGather {
                        counts: Some(counts.clone()),
                    })
                    .send(RawBuf::host(
                        l.data.bytes().as_ptr().cast_mut(),
                        l.data.len() / head.dtype.size(),
                        head.dtype,
                    ))
                    .recv(RawBuf::host(out.as_mut_ptr(), total, head.dtype));
                    // SAFETY: both buffers live and unaliased for the call; send is read only.
                    unsafe { comm.run(&call)? };
                    l.slot.finish(Ok(Output {
                        data: out,
                        counts: elements,
                        times: [0; 3],
                    }));
                }
                Kind::Alltoall => {
                    let l = locals.remove(0);
                    let (me, world) = (comm.rank(), comm.world());
                    let send: Vec<usize> = (0..world)
                        .map(|p| elements[me * world + p] as usize)
                        .collect();
                    let recv: Vec<usize> = (0..world)
                        .map(|p| elements[p * world + me] as usize)
                        .collect();
                    let (ns, nr) = (send.iter().sum::<usize>(), recv.iter().sum::<usize>());
                    let mut out = vec![0u8; nr * head.dtype.size()];
                    let call = Call::new(Collective::AllToAll {
                        send_counts: Some(send),
                        recv_counts: Some(recv.clone()),
                    })
                    .send(RawBuf::host(
                        l.data.bytes().as_ptr().cast_mut(),
                        ns,
                        head.dtype,
                    ))
                    .recv(RawBuf::host(out.as_mut_ptr(), nr, head.dtype));
                    // SAFETY: `l.data` holds at least `ns` elements (splits never exceed the
                    // rows, checked by the coordinator) and `out` exactly `nr`.
                    unsafe { comm.run(&call)? };
                    l.slot.finish(Ok(Output {
                        data: out,
                        counts: recv.iter().map(|c| *c as u64).collect(),
                        times: [0; 3],
                    }));
                }
                Kind::Reducescatter => {
                    // Uneven first dimensions (the remainder rows go to the lowest ranks)
                    // are what Horovod promises: reduce the whole tensor, keep this rank's rows.
                    // (on a buffer of its own: the caller's tensor is only read)
                    let l = locals.remove(0);
                    let slot = l.slot;
                    let mut data = l.data.into_owned();
                    prescaled_allreduce(comm, &mut data, &head)?;
                    let (me, world) = (comm.rank() as u64, comm.world() as u64);
                    let rows = head.shape.first().copied().unwrap_or(0);
                    let (q, rem) = (rows / world, rows % world);
                    let first = me * q + me.min(rem);
                    let mine = q + u64::from(me < rem);
                    let row = (head.row_elements() as usize) * head.dtype.size();
                    let mut part =
                        data[first as usize * row..(first + mine) as usize * row].to_vec();
                    scale(&mut part, head.dtype, head.postscale);
                    slot.finish(Ok(Output::of(part)));
                }
                Kind::Barrier => {
                    comm.barrier()?;
                    for l in locals {
                        l.slot.finish(Ok(Output::default()));
                    }
                }
                Kind::Join => {
                    for l in locals {
                        l.slot.finish(Ok(Output {
                            data: Vec::new(),
                            counts: elements.clone(),
                            times: [0; 3],
                        }));
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_cycle_counts_the_cycle_times_it_lasted() {
        let c = Duration::from_millis(5);
        assert_eq!(charge(Duration::from_millis(5), c, true), 1);
        assert_eq!(
            charge(Duration::from_millis(1), c, true),
            1,
            "woken late, still one"
        );
        assert_eq!(
            charge(Duration::from_millis(1), c, false),
            0,
            "early: not counted"
        );
        // 100k pending names made one cycle last 80 ms: 16 cycle times, not 1.
        assert_eq!(charge(Duration::from_millis(80), c, true), 16);
        assert_eq!(charge(Duration::from_millis(80), c, false), 16);
    }

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
