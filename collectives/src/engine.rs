//! The engine: runs one rank's [`Schedule`] over a [`Transport`], step by step. Within a step,
//! every send and receive is a state machine over frames; a single loop drives them all without
//! blocking, so sending, receiving and reducing overlap. When nothing moves, it spins briefly
//! (small messages then never pay an idle core's wake-up), then parks in the transport with the
//! deadline in view.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::call::CallDesc;
use crate::error::CommError;
use crate::fence::RoundFence;
use crate::op::ReduceOp;
use crate::reduce::reduce_bytes;
use crate::schedule::{Buf, Region, Schedule};
use crate::spin::SpinPolicy;
use crate::transport::frame::{self, FRAME_BYTES, HEADER_LEN};
use crate::transport::links::Links;
use crate::transport::{ControlPlane, DataPlane, StreamId, Transport};
use crate::watchdog::{Deadline, Phase, suspects};

pub(crate) mod error;
mod failure;
mod header;

pub(crate) use self::error::EngineError;

/// The buffers of one call, as bytes.
pub(crate) struct Bufs<'a> {
    pub work: &'a mut [u8],
    pub input: &'a [u8],
}

struct TxFrame {
    src: Region,
    range: (usize, usize),
}

struct Tx {
    id: StreamId,
    frames: VecDeque<TxFrame>,
    hdr: [u8; HEADER_LEN],
    written: usize,
}

struct RxFrame {
    dst: Region,
    range: (usize, usize),
    reduce: bool,
    with: Option<Region>,
}

struct Rx {
    id: StreamId,
    frames: VecDeque<RxFrame>,
    hdr: [u8; HEADER_LEN],
    got: usize,
    checked: bool,
    /// Staging for reducing frames (u64 for alignment).
    stage: Vec<u64>,
}

/// One rank's engine: its links plus reusable scratch.
pub(crate) struct Engine {
    pub rank: usize,
    /// Each peer's link, behind the round's fence (`transport/links.rs`).
    pub links: Links,
    /// How long this rank's waits on the links spin before they park (`spin.rs`).
    pub spin: SpinPolicy,
    /// The round's fence (the links read it; see `fence`).
    pub fence: Arc<RoundFence>,
    /// The communicator's cancel flag (`interrupt.rs`): every deadline of this engine reads it.
    pub cancel: crate::interrupt::Cancel,
    scratch: Vec<u64>,
    stages: Vec<Vec<u64>>,
}

fn bytes_of(r: &Region, es: usize) -> (usize, usize) {
    (r.off * es, (r.off + r.len) * es)
}

fn u64_bytes(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no invalid bit patterns and no padding; the view covers the same memory.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

struct Ctx<'a, 'b> {
    bufs: &'a mut Bufs<'b>,
    scratch: &'a mut [u8],
}

impl Ctx<'_, '_> {
    fn src(&self, r: &Region, es: usize) -> &[u8] {
        let (a, b) = bytes_of(r, es);
        match r.buf {
            Buf::Work => &self.bufs.work[a..b],
            Buf::Input => &self.bufs.input[a..b],
            Buf::Scratch => &self.scratch[a..b],
        }
    }
    /// Copies bytes `range` of region `from` onto the same bytes of region `to`.
    fn copy_into(&mut self, from: &Region, to: &Region, range: (usize, usize), es: usize) {
        let (fa, _) = bytes_of(from, es);
        let (ta, _) = bytes_of(to, es);
        let (f, t) = ((fa + range.0, fa + range.1), (ta + range.0, ta + range.1));
        match (from.buf, to.buf) {
            (Buf::Input, Buf::Work) => {
                self.bufs.work[t.0..t.1].copy_from_slice(&self.bufs.input[f.0..f.1])
            }
            (Buf::Input, Buf::Scratch) => {
                self.scratch[t.0..t.1].copy_from_slice(&self.bufs.input[f.0..f.1])
            }
            (Buf::Work, Buf::Work) => self.bufs.work.copy_within(f.0..f.1, t.0),
            _ => {
                let tmp = self.src(from, es)[range.0..range.1].to_vec();
                self.dst(to, es)[range.0..range.1].copy_from_slice(&tmp);
            }
        }
    }

    fn dst(&mut self, r: &Region, es: usize) -> &mut [u8] {
        let (a, b) = bytes_of(r, es);
        match r.buf {
            Buf::Work => &mut self.bufs.work[a..b],
            Buf::Scratch => &mut self.scratch[a..b],
            Buf::Input => unreachable!("schedules never write Input"),
        }
    }
}

impl Engine {
    pub(crate) fn new(rank: usize, transport: Box<dyn Transport>, spin: Duration) -> Engine {
        let fence = RoundFence::new();
        Engine {
            rank,
            links: Links::new(transport, fence.clone()),
            spin: SpinPolicy::new(spin, 1, crate::spin::usable_cores()),
            fence,
            cancel: Default::default(),
            scratch: Vec::new(),
            stages: Vec::new(),
        }
    }

    /// Runs `sched` for `call` within `timeout`. `combine` is the operator receives reduce
    /// with.
    pub(crate) fn run(
        &mut self,
        sched: &Schedule,
        call: &CallDesc,
        combine: ReduceOp,
        bufs: &mut Bufs<'_>,
        timeout: Duration,
    ) -> Result<(), CommError> {
        let mut deadline = Deadline::new(self.rank, timeout, &self.cancel);
        self.run_within(sched, call, combine, bufs, &mut deadline)
            .map_err(|e| self.fail(e, call, &deadline))
    }

    /// Waits until some peer `p`'s next point-to-point frame to this rank (sequence number
    /// `recv_seq[p]`) has its header waiting, and returns `p` (the lowest such rank when
    /// several are): the sender of a receive from any source. Frames of other calls are left
    /// where they are. `call` names the receive in errors.
    pub(crate) fn probe_any(
        &mut self,
        recv_seq: &[u64],
        call: &CallDesc,
        timeout: Duration,
    ) -> Result<usize, CommError> {
        let mut deadline = Deadline::new(self.rank, timeout, &self.cancel);
        let peers: Vec<StreamId> = (0..recv_seq.len())
            .filter(|&p| p != self.rank)
            .map(|p| (p, 0))
            .collect();
        let spin_until = std::time::Instant::now() + self.spin.budget();
        let r = (|| loop {
            for &(p, s) in &peers {
                let mut h = [0u8; HEADER_LEN];
                if self.links.peek(p, s, &mut h)? == HEADER_LEN
                    && let Ok((theirs, _)) = frame::decode(&h)
                    && theirs.op == crate::call::OpKind::SendRecv
                    && theirs.seq == recv_seq[p]
                {
                    return Ok(p);
                }
            }
            self.links.check()?;
            if std::time::Instant::now() < spin_until {
                std::hint::spin_loop();
                continue;
            }
            let everyone: Vec<usize> = peers.iter().map(|&(p, _)| p).collect();
            match deadline.check(call, &everyone) {
                Phase::Expired(elapsed) => {
                    return Err(EngineError::Comm(CommError::Timeout {
                        rank: self.rank,
                        call: *call,
                        elapsed,
                        waiting_for: everyone,
                        suspects: Box::default(),
                        strangers: Box::new(self.links.strangers()),
                    }));
                }
                Phase::Wait(t) | Phase::Half(t) => self.links.park(&[], &peers, t)?,
                Phase::Interrupted(e) => return Err(EngineError::Comm(e)),
            }
        })();
        r.map_err(|e| self.fail(e, call, &deadline))
    }

    /// Runs `sched` as part of a larger call (the cross-host step of a hierarchical
    /// allreduce): under the caller's deadline, leaving the failure to the caller.
    pub(crate) fn run_within(
        &mut self,
        sched: &Schedule,
        call: &CallDesc,
        combine: ReduceOp,
        bufs: &mut Bufs<'_>,
        deadline: &mut Deadline,
    ) -> Result<(), EngineError> {
        let es = call.dtype.size();
        let need = (sched.scratch * es).div_ceil(8);
        if self.scratch.len() < need {
            self.scratch.resize(need, 0);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = (|| {
            let mut ctx = Ctx {
                bufs,
                scratch: &mut u64_bytes(&mut scratch)[..sched.scratch * es],
            };
            for step in &sched.steps {
                for l in &step.locals {
                    let src = ctx.src(&l.src, es).to_vec();
                    let dst = ctx.dst(&l.dst, es);
                    if l.reduce {
                        reduce_bytes(call.dtype, combine, dst, &src);
                    } else {
                        dst.copy_from_slice(&src);
                    }
                }
                self.run_step(step, call, combine, &mut ctx, deadline)?;
            }
            Ok(())
        })();
        self.scratch = scratch;
        result
    }

    fn run_step(
        &mut self,
        step: &crate::schedule::Step,
        call: &CallDesc,
        combine: ReduceOp,
        ctx: &mut Ctx<'_, '_>,
        deadline: &mut Deadline,
    ) -> Result<(), EngineError> {
        let es = call.dtype.size();
        let mut txs: Vec<Tx> = Vec::new();
        let mut counters: Vec<(usize, usize)> = Vec::new();
        let next_stream = |peer: usize, counters: &mut Vec<(usize, usize)>, n: usize| {
            let c = match counters.iter_mut().find(|(p, _)| *p == peer) {
                Some((_, c)) => c,
                None => {
                    counters.push((peer, 0));
                    &mut counters.last_mut().expect("just pushed").1
                }
            };
            let s = *c % n;
            *c += 1;
            s
        };
        for s in &step.sends {
            let (a, b) = bytes_of(&s.src, es);
            for (fa, fb) in frame::split(b - a) {
                let id = (
                    s.peer,
                    next_stream(s.peer, &mut counters, self.links.streams(s.peer)),
                );
                let f = TxFrame {
                    src: s.src,
                    range: (fa, fb),
                };
                match txs.iter_mut().find(|t| t.id == id) {
                    Some(t) => t.frames.push_back(f),
                    None => txs.push(Tx {
                        id,
                        frames: VecDeque::from([f]),
                        hdr: [0; HEADER_LEN],
                        written: 0,
                    }),
                }
            }
        }
        counters.clear();
        let mut rxs: Vec<Rx> = Vec::new();
        for r in &step.recvs {
            let (a, b) = bytes_of(&r.dst, es);
            for (fa, fb) in frame::split(b - a) {
                let id = (
                    r.peer,
                    next_stream(r.peer, &mut counters, self.links.streams(r.peer)),
                );
                let f = RxFrame {
                    dst: r.dst,
                    range: (fa, fb),
                    reduce: r.reduce,
                    with: r.with,
                };
                match rxs.iter_mut().find(|t| t.id == id) {
                    Some(t) => t.frames.push_back(f),
                    None => {
                        let stage = if r.reduce {
                            self.stages.pop().unwrap_or_default()
                        } else {
                            Vec::new()
                        };
                        rxs.push(Rx {
                            id,
                            frames: VecDeque::from([f]),
                            hdr: [0; HEADER_LEN],
                            got: 0,
                            checked: false,
                            stage,
                        })
                    }
                }
            }
        }
        for t in &mut txs {
            let f = &t.frames[0];
            t.hdr = frame::encode(call, f.range.1 - f.range.0);
        }
        let result = self.drive(&mut txs, &mut rxs, call, combine, ctx, deadline);
        for r in rxs {
            if r.stage.capacity() > 0 {
                self.stages.push(r.stage);
            }
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn drive(
        &mut self,
        txs: &mut [Tx],
        rxs: &mut [Rx],
        call: &CallDesc,
        combine: ReduceOp,
        ctx: &mut Ctx<'_, '_>,
        deadline: &mut Deadline,
    ) -> Result<(), EngineError> {
        let es = call.dtype.size();
        let mut idle_since: Option<Instant> = None;
        let mut spin_for = Duration::ZERO;
        let mut idle_rounds = 0u32;
        loop {
            let mut progress = false;
            let mut open = false;
            for t in txs.iter_mut() {
                while let Some(f) = t.frames.front() {
                    let (a, b) = bytes_of(&f.src, es);
                    let payload = &ctx.src(&f.src, es)[f.range.0..f.range.1];
                    debug_assert!(a + f.range.1 <= b);
                    let (ha, pa) = if t.written < HEADER_LEN {
                        (&t.hdr[t.written..], payload)
                    } else {
                        (&[][..], &payload[t.written - HEADER_LEN..])
                    };
                    let total = HEADER_LEN + payload.len();
                    let n = match self.links.try_send(t.id.0, t.id.1, ha, pa) {
                        Ok(n) => n,
                        Err(e) => return Err(self.mismatch_first(rxs, call, e)),
                    };
                    if n == 0 && total > t.written {
                        break;
                    }
                    progress = true;
                    t.written += n;
                    if t.written == total {
                        t.frames.pop_front();
                        t.written = 0;
                        if let Some(nf) = t.frames.front() {
                            t.hdr = frame::encode(call, nf.range.1 - nf.range.0);
                        }
                    }
                }
                open |= !t.frames.is_empty();
            }
            for r in rxs.iter_mut() {
                while let Some(f) = r.frames.front() {
                    let len = f.range.1 - f.range.0;
                    let (reduce, dst_region, range, with) = (f.reduce, f.dst, f.range, f.with);
                    let n = {
                        let stage;
                        let target: &mut [u8] = if reduce {
                            if r.stage.len() < FRAME_BYTES / 8 {
                                r.stage.resize(FRAME_BYTES / 8, 0);
                            }
                            stage = &mut u64_bytes(&mut r.stage)[..len];
                            stage
                        } else {
                            &mut ctx.dst(&dst_region, es)[range.0..range.1]
                        };
                        if r.got < HEADER_LEN {
                            self.links
                                .try_recv(r.id.0, r.id.1, &mut r.hdr[r.got..], target)?
                        } else {
                            self.links.try_recv(
                                r.id.0,
                                r.id.1,
                                &mut [],
                                &mut target[r.got - HEADER_LEN..],
                            )?
                        }
                    };
                    if n == 0 && HEADER_LEN + len > r.got {
                        break;
                    }
                    progress = true;
                    r.got += n;
                    if !r.checked && r.got >= HEADER_LEN {
                        self.check_header(r.id.0, &r.hdr, call, len)?;
                        r.checked = true;
                    }
                    if r.got == HEADER_LEN + len {
                        if reduce {
                            let src = &u64_bytes(&mut r.stage)[..len];
                            if let Some(w) = with {
                                ctx.copy_into(&w, &dst_region, range, es);
                            }
                            let dst = &mut ctx.dst(&dst_region, es)[range.0..range.1];
                            reduce_bytes(call.dtype, combine, dst, src);
                        }
                        r.frames.pop_front();
                        r.got = 0;
                        r.checked = false;
                    }
                }
                open |= !r.frames.is_empty();
            }
            if !open {
                return Ok(());
            }
            if progress {
                if let Some(since) = idle_since.take() {
                    self.spin.record(since.elapsed());
                }
                continue;
            }
            let now = Instant::now();
            let since = *idle_since.get_or_insert_with(|| {
                spin_for = self.spin.budget();
                now
            });
            idle_rounds = idle_rounds.wrapping_add(1);
            if now - since < spin_for {
                if idle_rounds.is_multiple_of(256) {
                    self.links.check()?;
                }
                std::thread::yield_now();
                continue;
            }
            self.links.check()?;
            let mut waiting: Vec<usize> = rxs
                .iter()
                .filter(|r| !r.frames.is_empty())
                .map(|r| r.id.0)
                .collect();
            waiting.sort_unstable();
            waiting.dedup();
            crate::flight::waiting(&waiting);
            let wait = match deadline.check(call, &waiting) {
                Phase::Wait(d) => d,
                Phase::Interrupted(e) => return Err(EngineError::Comm(e)),
                Phase::Half(d) => {
                    self.links.report_stall(call.op as u8, call.seq, &waiting);
                    d
                }
                Phase::Expired(elapsed) => {
                    // Peers may be failing at this moment too, with a better diagnosis: take a
                    // last look at the control plane first.
                    self.links.check()?;
                    let reports = self.links.stalls(call.op as u8, call.seq);
                    let suspects = suspects(self.rank, &waiting, &reports);
                    return Err(EngineError::Comm(CommError::Timeout {
                        rank: self.rank,
                        call: *call,
                        elapsed,
                        waiting_for: waiting,
                        suspects: suspects.into(),
                        strangers: Box::new(self.links.strangers()),
                    }));
                }
            };
            let sends: Vec<StreamId> = txs
                .iter()
                .filter(|t| !t.frames.is_empty())
                .map(|t| t.id)
                .collect();
            let recvs: Vec<StreamId> = rxs
                .iter()
                .filter(|r| !r.frames.is_empty())
                .map(|r| r.id)
                .collect();
            self.links.park(&sends, &recvs, wait)?;
        }
    }
}
