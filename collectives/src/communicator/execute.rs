//! A [`Call`] checked against this communicator, then run: the choice of schedule, the local
//! pre- and post-processing (out-of-place copies, the division of `Avg`), the sequence number,
//! and the engine. Everything here works on bytes; the dtype travels as a tag.

use super::{Inner, State};
use crate::call::{Call, CallDesc, Collective, Memory, OpKind, RawBuf};
use crate::config::{Algo, Config};
use crate::dtype::DType;
use crate::engine::Bufs;
use crate::error::CommError;
use crate::op::ReduceOp;
use crate::reduce::divide_bytes;
use crate::schedule::{Schedule, direct, doubling, ring, tree};

/// Which sequence counter a call uses.
#[derive(Clone, Copy)]
enum SeqKind {
    Collective,
    SendTo(usize),
    RecvFrom(usize),
}

/// The allreduce algorithm `auto` picks: the latency-optimal one up to the threshold (and
/// whenever there are fewer elements than ranks), the ring above it.
pub(crate) fn allreduce_algo(cfg: &Config, world: usize, count: usize, dtype: DType) -> Algo {
    match cfg.algo.value {
        Algo::Auto
            if count.saturating_mul(dtype.size()) <= cfg.tree_threshold.value || count < world =>
        {
            Algo::Doubling
        }
        Algo::Auto => Algo::Ring,
        a => a,
    }
}

fn allreduce_schedule(
    cfg: &Config,
    rank: usize,
    world: usize,
    count: usize,
    dtype: DType,
) -> Schedule {
    match allreduce_algo(cfg, world, count, dtype) {
        Algo::Ring => ring::allreduce(rank, world, count),
        Algo::Direct => direct::allreduce(rank, world, count),
        Algo::Tree => tree::allreduce(rank, world, count),
        _ => doubling::allreduce(rank, world, count),
    }
}

fn broadcast_schedule(
    cfg: &Config,
    rank: usize,
    world: usize,
    root: usize,
    count: usize,
    dtype: DType,
) -> Schedule {
    let bytes = count * dtype.size();
    let chain = match cfg.algo.value {
        Algo::Auto | Algo::Direct => bytes > cfg.tree_threshold.value && world > 2,
        a => a == Algo::Ring,
    };
    if chain {
        tree::broadcast_chain(
            rank,
            world,
            root,
            count,
            (bytes / (512 << 10)).clamp(1, 1024),
        )
    } else {
        tree::broadcast_binomial(rank, world, root, count)
    }
}

/// The bytes of a checked buffer (empty for none).
///
/// # Safety
/// `b` passed [`Inner::check`]; the caller of `run`/`submit` vouches for the memory.
unsafe fn bytes_mut<'a>(b: Option<&RawBuf>) -> &'a mut [u8] {
    match b {
        Some(b) if b.count() > 0 => {
            let len = b.count() * b.dtype().size();
            // SAFETY: checked non-null, aligned and not overflowing; valid per the contract.
            unsafe { std::slice::from_raw_parts_mut(b.ptr(), len) }
        }
        _ => &mut [],
    }
}

/// An element-aligned copy of `b`'s bytes (for inputs that overlap the output, and for the
/// scratch copies reduce and reduce_scatter work in).
///
/// # Safety
/// As for [`bytes_mut`].
unsafe fn staged(b: Option<&RawBuf>) -> Vec<u64> {
    // SAFETY: per the contract.
    let src = unsafe { bytes_mut(b) };
    let mut v = vec![0u64; src.len().div_ceil(8)];
    as_bytes(&mut v)[..src.len()].copy_from_slice(src);
    v
}

fn as_bytes(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no padding; the byte view covers the same memory.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// `send`, copied if it overlaps `recv` (the engine reads one while it writes the other).
///
/// # Safety
/// As for [`bytes_mut`].
unsafe fn input<'a>(
    send: Option<&RawBuf>,
    recv: Option<&RawBuf>,
    copy: &'a mut Vec<u64>,
) -> &'a [u8] {
    match (send, recv) {
        (Some(s), Some(r)) if s.overlaps(r) => {
            // SAFETY: per the contract.
            *copy = unsafe { staged(Some(s)) };
            let n = s.count() * s.dtype().size();
            &as_bytes(copy)[..n]
        }
        // SAFETY: per the contract.
        (s, _) => unsafe { bytes_mut(s) },
    }
}

/// Copies `from`'s bytes onto `to` (which may overlap) unless they are the same buffer.
///
/// # Safety
/// As for [`bytes_mut`]; both are checked to hold the same number of bytes.
unsafe fn copy_over(from: &RawBuf, to: &RawBuf) {
    let n = from.count() * from.dtype().size();
    if n > 0 && from.ptr() != to.ptr() {
        // SAFETY: per the contract; `copy` allows overlap.
        unsafe { std::ptr::copy(from.ptr(), to.ptr(), n) };
    }
}

impl Inner {
    fn check_buf(&self, op: &'static str, what: &str, b: &RawBuf) -> Result<(), CommError> {
        #[allow(unreachable_patterns)]
        match b.memory() {
            Memory::Host => {}
            other => {
                return Err(self.invalid(op, format!("{what}: {other:?} memory is not supported")));
            }
        }
        let Some(len) = b.byte_len().filter(|l| *l <= isize::MAX as usize) else {
            return Err(self.invalid(
                op,
                format!(
                    "{what}: {} elements of {} overflow the address space",
                    b.count(),
                    b.dtype()
                ),
            ));
        };
        if len > 0 && b.ptr().is_null() {
            return Err(self.invalid(
                op,
                format!("{what} is a null pointer with {} elements", b.count()),
            ));
        }
        if len > 0 && (b.ptr() as usize) % b.dtype().size() != 0 {
            return Err(self.invalid(
                op,
                format!(
                    "{what} at {:p} is not aligned for {} ({} bytes)",
                    b.ptr(),
                    b.dtype(),
                    b.dtype().size()
                ),
            ));
        }
        Ok(())
    }

    fn need<'c>(
        &self,
        op: &'static str,
        what: &str,
        b: Option<&'c RawBuf>,
    ) -> Result<&'c RawBuf, CommError> {
        let b = b.ok_or_else(|| self.invalid(op, format!("needs a {what} buffer")))?;
        self.check_buf(op, what, b)?;
        Ok(b)
    }

    fn check_root(&self, op: &'static str, root: usize) -> Result<(), CommError> {
        if root >= self.world {
            return Err(self.invalid(
                op,
                format!("root {root} is not in a world of {}", self.world),
            ));
        }
        Ok(())
    }

    fn check_peer(&self, op: &'static str, peer: usize) -> Result<(), CommError> {
        if peer >= self.world || peer == self.rank {
            return Err(self.invalid(
                op,
                format!("peer {peer} (this is rank {} of {})", self.rank, self.world),
            ));
        }
        Ok(())
    }

    fn same_dtype(&self, op: &'static str, s: &RawBuf, r: &RawBuf) -> Result<(), CommError> {
        if s.dtype() != r.dtype() {
            return Err(self.invalid(
                op,
                format!("send is {} but recv is {}", s.dtype(), r.dtype()),
            ));
        }
        Ok(())
    }

    fn same_count(&self, op: &'static str, s: &RawBuf, r: &RawBuf) -> Result<(), CommError> {
        self.same_dtype(op, s, r)?;
        if s.count() != r.count() {
            return Err(self.invalid(
                op,
                format!("send has {} elements but recv has {}", s.count(), r.count()),
            ));
        }
        Ok(())
    }

    fn counts(
        &self,
        op: &'static str,
        what: &str,
        counts: &[usize],
        total: usize,
    ) -> Result<(), CommError> {
        let sum = counts.iter().try_fold(0usize, |a, c| a.checked_add(*c));
        if counts.len() != self.world || sum != Some(total) {
            return Err(self.invalid(
                op,
                format!(
                    "{what} {counts:?} must have {} entries summing to {total}",
                    self.world
                ),
            ));
        }
        Ok(())
    }

    /// Checks `call`'s arguments against this communicator without touching any buffer's
    /// contents: an error here sends nothing and does not fail the communicator.
    pub(super) fn check(&self, call: &Call) -> Result<(), CommError> {
        let op = call.collective.name();
        if call.deadline.is_some_and(|d| d.is_zero()) {
            return Err(self.invalid(op, "the deadline must be positive"));
        }
        let (rank, world) = (self.rank, self.world);
        let (send, recv) = (call.send.as_ref(), call.recv.as_ref());
        match &call.collective {
            Collective::AllReduce { .. } | Collective::Broadcast { .. } => {
                let r = self.need(op, "recv", recv)?;
                if let Collective::Broadcast { root } = call.collective {
                    self.check_root(op, root)?;
                    if rank != root {
                        return Ok(());
                    }
                }
                if let Some(s) = send {
                    self.check_buf(op, "send", s)?;
                    self.same_count(op, s, r)?;
                }
            }
            Collective::Reduce { root, .. } => {
                self.check_root(op, *root)?;
                match send {
                    Some(s) => {
                        self.check_buf(op, "send", s)?;
                        if rank == *root {
                            let r = self.need(op, "recv", recv)?;
                            self.same_count(op, s, r)?;
                        }
                    }
                    None => {
                        self.need(op, "recv", recv)?;
                    }
                }
            }
            Collective::AllGather { counts } => {
                let s = self.need(op, "send", send)?;
                let r = self.need(op, "recv", recv)?;
                self.same_dtype(op, s, r)?;
                match counts {
                    Some(c) => {
                        self.counts(op, "counts", c, r.count())?;
                        if c[rank] != s.count() {
                            return Err(self.invalid(
                                op,
                                format!(
                                    "counts[{rank}] is {} but send has {} elements",
                                    c[rank],
                                    s.count()
                                ),
                            ));
                        }
                    }
                    None if s.count().checked_mul(world) != Some(r.count()) => {
                        return Err(self.invalid(
                            op,
                            format!(
                                "recv has {} elements, need send's {} x world {world}",
                                r.count(),
                                s.count()
                            ),
                        ));
                    }
                    None => {}
                }
            }
            Collective::ReduceScatter { .. } => {
                let s = self.need(op, "send", send)?;
                let r = self.need(op, "recv", recv)?;
                self.same_dtype(op, s, r)?;
                if r.count().checked_mul(world) != Some(s.count()) {
                    return Err(self.invalid(
                        op,
                        format!(
                            "send has {} elements, need recv's {} x world {world}",
                            s.count(),
                            r.count()
                        ),
                    ));
                }
            }
            Collective::Gather { root } | Collective::Scatter { root } => {
                self.check_root(op, *root)?;
                let gather = matches!(call.collective, Collective::Gather { .. });
                let (mine, mine_name, rooted, rooted_name) = if gather {
                    (send, "send", recv, "recv")
                } else {
                    (recv, "recv", send, "send")
                };
                let m = self.need(op, mine_name, mine)?;
                if rank == *root {
                    let r = self.need(op, rooted_name, rooted)?;
                    self.same_dtype(op, m, r)?;
                    if m.count().checked_mul(world) != Some(r.count()) {
                        return Err(self.invalid(
                            op,
                            format!(
                                "the root's {rooted_name} has {} elements, need {} x world {world}",
                                r.count(),
                                m.count()
                            ),
                        ));
                    }
                }
            }
            Collective::AllToAll {
                send_counts,
                recv_counts,
            } => {
                let s = self.need(op, "send", send)?;
                let r = self.need(op, "recv", recv)?;
                self.same_dtype(op, s, r)?;
                match (send_counts, recv_counts) {
                    (None, None) => {
                        if s.count() != r.count() || s.count() % world != 0 {
                            return Err(self.invalid(
                                op,
                                format!(
                                    "send {} / recv {} elements must be equal multiples of world {world}",
                                    s.count(),
                                    r.count()
                                ),
                            ));
                        }
                    }
                    (sc, rc) => {
                        let sc = sc.clone().unwrap_or_else(|| vec![s.count() / world; world]);
                        let rc = rc.clone().unwrap_or_else(|| vec![r.count() / world; world]);
                        self.counts(op, "send counts", &sc, s.count())?;
                        self.counts(op, "recv counts", &rc, r.count())?;
                        if sc[rank] != rc[rank] {
                            return Err(self.invalid(
                                op,
                                format!(
                                    "this rank sends itself {} elements but receives {}",
                                    sc[rank], rc[rank]
                                ),
                            ));
                        }
                    }
                }
            }
            Collective::Barrier => {}
            Collective::Send { peer } => {
                self.check_peer(op, *peer)?;
                self.need(op, "send", send)?;
            }
            Collective::Recv { peer } => {
                self.check_peer(op, *peer)?;
                self.need(op, "recv", recv)?;
            }
        }
        Ok(())
    }

    /// Runs a checked call under the state lock.
    ///
    /// # Safety
    /// `call` passed [`check`](Self::check); its buffers are valid as `Communicator::run`
    /// requires.
    pub(super) unsafe fn execute(&self, st: &mut State, call: &Call) -> Result<(), CommError> {
        if let Some(e) = &st.failed {
            return Err(match e {
                CommError::Shutdown { detail, .. } => CommError::Shutdown {
                    rank: self.rank,
                    op: call.collective.name(),
                    detail: detail.clone(),
                },
                e => CommError::Failed(Box::new(e.clone())),
            });
        }
        let (rank, world, cfg) = (self.rank, self.world, &self.config);
        let (send, recv) = (call.send.as_ref(), call.recv.as_ref());
        let dtype = recv.or(send).map_or(DType::U8, |b| b.dtype());
        let timeout = call.deadline.unwrap_or(cfg.timeout.value);
        let mut copy = Vec::new();
        let mut scratch: Vec<u64>;
        let run = |st: &mut State,
                   kind: OpKind,
                   redop: Option<ReduceOp>,
                   count: usize,
                   root: Option<usize>,
                   seq: SeqKind,
                   sched: Schedule,
                   work: &mut [u8],
                   input: &[u8]| {
            let seq = match seq {
                SeqKind::Collective => &mut st.seq,
                SeqKind::SendTo(p) => &mut st.send_seq[p],
                SeqKind::RecvFrom(p) => &mut st.recv_seq[p],
            };
            let desc = CallDesc {
                op: kind,
                dtype,
                redop,
                count: count as u64,
                root,
                seq: *seq,
            };
            *seq += 1;
            let combine = redop.map_or(ReduceOp::Sum, ReduceOp::combine);
            let mut bufs = Bufs { work, input };
            st.engine
                .run(&sched, &desc, combine, &mut bufs, timeout)
                .inspect_err(|e| {
                    tracing::error!(rank, "dtcomm: {e}");
                    st.failed = Some(e.clone());
                })
        };
        let c = SeqKind::Collective;
        // SAFETY (every block below): the buffers passed `check` and are valid per the
        // caller's contract; `input` copies a send that overlaps the output.
        match &call.collective {
            Collective::AllReduce { op } => {
                let r = recv.expect("checked");
                let n = r.count();
                let algo = allreduce_algo(cfg, world, n, dtype);
                match send {
                    Some(s) if s.ptr() != r.ptr() && !s.overlaps(r) && algo == Algo::Ring => {
                        let sched = ring::allreduce_out_of_place(rank, world, n);
                        let (w, i) = unsafe { (bytes_mut(recv), bytes_mut(send)) };
                        run(st, OpKind::AllReduce, Some(*op), n, None, c, sched, w, i)?;
                    }
                    _ => {
                        if let Some(s) = send {
                            unsafe { copy_over(s, r) };
                        }
                        let sched = allreduce_schedule(cfg, rank, world, n, dtype);
                        let w = unsafe { bytes_mut(recv) };
                        run(st, OpKind::AllReduce, Some(*op), n, None, c, sched, w, &[])?;
                    }
                }
                if *op == ReduceOp::Avg {
                    divide_bytes(dtype, unsafe { bytes_mut(recv) }, world);
                }
            }
            Collective::Broadcast { root } => {
                let r = recv.expect("checked");
                if let (Some(s), true) = (send, rank == *root) {
                    unsafe { copy_over(s, r) };
                }
                let n = r.count();
                let sched = broadcast_schedule(cfg, rank, world, *root, n, dtype);
                let w = unsafe { bytes_mut(recv) };
                run(
                    st,
                    OpKind::Broadcast,
                    None,
                    n,
                    Some(*root),
                    c,
                    sched,
                    w,
                    &[],
                )?;
            }
            Collective::Reduce { op, root } => {
                let input = send.or(recv).expect("checked");
                let n = input.count();
                let sched = tree::reduce_binomial(rank, world, *root, n);
                let args = (OpKind::Reduce, Some(*op), n, Some(*root));
                if rank == *root {
                    let r = recv.expect("checked");
                    unsafe { copy_over(input, r) };
                    let w = unsafe { bytes_mut(recv) };
                    run(st, args.0, args.1, args.2, args.3, c, sched, w, &[])?;
                    if *op == ReduceOp::Avg {
                        divide_bytes(dtype, unsafe { bytes_mut(recv) }, world);
                    }
                } else {
                    // Non-root buffers stay as they were: the tree writes partial sums.
                    scratch = unsafe { staged(Some(input)) };
                    let w = &mut as_bytes(&mut scratch)[..n * dtype.size()];
                    run(st, args.0, args.1, args.2, args.3, c, sched, w, &[])?;
                }
            }
            Collective::AllGather { counts } => {
                let s = send.expect("checked");
                let counts = counts.clone().unwrap_or_else(|| vec![s.count(); world]);
                let total = counts.iter().sum();
                let sched = ring::allgather(rank, world, &counts, true);
                let i = unsafe { input(send, recv, &mut copy) };
                let w = unsafe { bytes_mut(recv) };
                run(st, OpKind::AllGather, None, total, None, c, sched, w, i)?;
            }
            Collective::ReduceScatter { op } => {
                let (s, r) = (send.expect("checked"), recv.expect("checked"));
                let n = r.count();
                let es = dtype.size();
                scratch = unsafe { staged(Some(s)) };
                let w = &mut as_bytes(&mut scratch)[..s.count() * es];
                let sched = ring::reduce_scatter(rank, world, &vec![n; world]);
                run(
                    st,
                    OpKind::ReduceScatter,
                    Some(*op),
                    s.count(),
                    None,
                    c,
                    sched,
                    w,
                    &[],
                )?;
                let out = unsafe { bytes_mut(recv) };
                out.copy_from_slice(&w[rank * n * es..(rank + 1) * n * es]);
                if *op == ReduceOp::Avg {
                    divide_bytes(dtype, out, world);
                }
            }
            Collective::Gather { root } => {
                let s = send.expect("checked");
                let sched = direct::gather(rank, world, *root, &vec![s.count(); world]);
                let (i, w) = if rank == *root {
                    unsafe { (input(send, recv, &mut copy), bytes_mut(recv)) }
                } else {
                    (unsafe { bytes_mut(send) } as &[u8], &mut [][..])
                };
                run(
                    st,
                    OpKind::Gather,
                    None,
                    s.count(),
                    Some(*root),
                    c,
                    sched,
                    w,
                    i,
                )?;
            }
            Collective::Scatter { root } => {
                let r = recv.expect("checked");
                let sched = direct::scatter(rank, world, *root, &vec![r.count(); world]);
                let i: &[u8] = if rank == *root {
                    unsafe { input(send, recv, &mut copy) }
                } else {
                    &[]
                };
                let w = unsafe { bytes_mut(recv) };
                run(
                    st,
                    OpKind::Scatter,
                    None,
                    r.count(),
                    Some(*root),
                    c,
                    sched,
                    w,
                    i,
                )?;
            }
            Collective::AllToAll {
                send_counts,
                recv_counts,
            } => {
                let (s, r) = (send.expect("checked"), recv.expect("checked"));
                // Headers carry the count only for equal blocks; with per-peer counts a rank
                // whose counts disagree with its peer's fails on the frame length.
                let count = match (send_counts, recv_counts) {
                    (None, None) => s.count(),
                    _ => 0,
                };
                let sc = send_counts
                    .clone()
                    .unwrap_or_else(|| vec![s.count() / world; world]);
                let rc = recv_counts
                    .clone()
                    .unwrap_or_else(|| vec![r.count() / world; world]);
                let sched = direct::all_to_all(rank, world, &sc, &rc);
                let i = unsafe { input(send, recv, &mut copy) };
                let w = unsafe { bytes_mut(recv) };
                run(st, OpKind::AllToAll, None, count, None, c, sched, w, i)?;
            }
            Collective::Barrier => {
                let sched = doubling::barrier(rank, world);
                run(st, OpKind::Barrier, None, 0, None, c, sched, &mut [], &[])?;
            }
            Collective::Send { peer } => {
                let n = send.expect("checked").count();
                let i = unsafe { bytes_mut(send) };
                let seq = SeqKind::SendTo(*peer);
                run(
                    st,
                    OpKind::SendRecv,
                    None,
                    n,
                    None,
                    seq,
                    direct::send(*peer, n),
                    &mut [],
                    i,
                )?;
            }
            Collective::Recv { peer } => {
                let n = recv.expect("checked").count();
                let w = unsafe { bytes_mut(recv) };
                let seq = SeqKind::RecvFrom(*peer);
                run(
                    st,
                    OpKind::SendRecv,
                    None,
                    n,
                    None,
                    seq,
                    direct::recv(*peer, n),
                    w,
                    &[],
                )?;
            }
        }
        Ok(())
    }
}
