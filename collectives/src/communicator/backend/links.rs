//! The links backend: a checked [`Call`] run over the transport alone (the checks are in
//! `args.rs`, the routing in `route.rs`): the choice of schedule, the local pre- and
//! post-processing (out-of-place copies, the division of `Avg`), the sequence number, and the
//! engine. Everything here works on bytes; the dtype travels as a tag.

use crate::call::{Call, CallDesc, Collective, OpKind};
use crate::communicator::buffers::{as_bytes, bytes_mut, copy_over, input, staged};
use crate::communicator::{Inner, State};
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

pub(in crate::communicator) fn allreduce_schedule(
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

/// The allgather `auto` picks: Bruck's (log2 steps) up to the threshold on more than two
/// ranks (at two both are one exchange), the ring above it; `ring` forces the ring and
/// `doubling` Bruck's; `tree` and `direct` choose as `auto`.
fn allgather_schedule(
    cfg: &Config,
    rank: usize,
    world: usize,
    counts: &[usize],
    dtype: DType,
) -> Schedule {
    let bytes = counts.iter().sum::<usize>().saturating_mul(dtype.size());
    let bruck = match cfg.algo.value {
        Algo::Ring => false,
        Algo::Doubling => true,
        _ => bytes <= cfg.tree_threshold.value && world > 2,
    };
    if bruck {
        doubling::allgather(rank, world, counts, true)
    } else {
        ring::allgather(rank, world, counts, true)
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

/// One engine run: the frame-header description of the call, its schedule and its buffers.
struct Plan<'a> {
    op: OpKind,
    redop: Option<ReduceOp>,
    count: usize,
    root: Option<usize>,
    seq: SeqKind,
    sched: Schedule,
    work: &'a mut [u8],
    input: &'a [u8],
}

impl Plan<'_> {
    /// Takes the call's sequence number and runs the schedule; an error fails the
    /// communicator.
    fn run(
        self,
        st: &mut State,
        rank: usize,
        dtype: DType,
        timeout: std::time::Duration,
    ) -> Result<(), CommError> {
        let seq = match self.seq {
            SeqKind::Collective => &mut st.seq,
            SeqKind::SendTo(p) => &mut st.send_seq[p],
            SeqKind::RecvFrom(p) => &mut st.recv_seq[p],
        };
        let desc = CallDesc {
            op: self.op,
            dtype,
            redop: self.redop,
            count: self.count as u64,
            root: self.root,
            seq: *seq,
        };
        *seq += 1;
        let combine = self.redop.map_or(ReduceOp::Sum, ReduceOp::combine);
        let mut bufs = Bufs {
            work: self.work,
            input: self.input,
        };
        st.engine
            .run(&self.sched, &desc, combine, &mut bufs, timeout)
            .inspect_err(|e| {
                tracing::error!(rank, "dtcomm: {e}");
                st.failed = Some(e.clone());
            })
    }
}

impl Inner {
    /// Runs a checked call over the links alone (the schedules of `crate::schedule`).
    ///
    /// # Safety
    /// As for `Inner::execute`.
    pub(in crate::communicator) unsafe fn run_links(
        &self,
        st: &mut State,
        call: &Call,
    ) -> Result<(), CommError> {
        let (rank, world, cfg) = (self.rank, self.world, &self.config);
        let (send, recv) = (call.send.as_ref(), call.recv.as_ref());
        let dtype = recv.or(send).map_or(DType::U8, |b| b.dtype());
        let timeout = call.deadline.unwrap_or(cfg.timeout.value);
        let mut copy = Vec::new();
        let mut scratch: Vec<u64>;
        let c = SeqKind::Collective;
        let run = |st: &mut State, plan: Plan<'_>| plan.run(st, rank, dtype, timeout);
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
                        // SAFETY: checked buffers, valid for the call (`run`'s contract).
                        let (w, i) = unsafe { (bytes_mut(recv), bytes_mut(send)) };
                        run(
                            st,
                            Plan {
                                op: OpKind::AllReduce,
                                redop: Some(*op),
                                count: n,
                                root: None,
                                seq: c,
                                sched,
                                work: w,
                                input: i,
                            },
                        )?;
                    }
                    _ => {
                        if let Some(s) = send {
                            // SAFETY: checked buffers, valid for the call (`run`'s contract).
                            unsafe { copy_over(s, r) };
                        }
                        let sched = allreduce_schedule(cfg, rank, world, n, dtype);
                        // SAFETY: checked buffers, valid for the call (`run`'s contract).
                        let w = unsafe { bytes_mut(recv) };
                        run(
                            st,
                            Plan {
                                op: OpKind::AllReduce,
                                redop: Some(*op),
                                count: n,
                                root: None,
                                seq: c,
                                sched,
                                work: w,
                                input: &[],
                            },
                        )?;
                    }
                }
                if *op == ReduceOp::Avg {
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    divide_bytes(dtype, unsafe { bytes_mut(recv) }, world);
                }
            }
            Collective::Broadcast { root } => {
                let r = recv.expect("checked");
                if let (Some(s), true) = (send, rank == *root) {
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    unsafe { copy_over(s, r) };
                }
                let n = r.count();
                let sched = broadcast_schedule(cfg, rank, world, *root, n, dtype);
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let w = unsafe { bytes_mut(recv) };
                run(
                    st,
                    Plan {
                        op: OpKind::Broadcast,
                        redop: None,
                        count: n,
                        root: Some(*root),
                        seq: c,
                        sched,
                        work: w,
                        input: &[],
                    },
                )?;
            }
            Collective::Reduce { op, root } => {
                let input = send.or(recv).expect("checked");
                let n = input.count();
                let sched = tree::reduce_binomial(rank, world, *root, n);
                if rank == *root {
                    let r = recv.expect("checked");
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    unsafe { copy_over(input, r) };
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    let w = unsafe { bytes_mut(recv) };
                    run(
                        st,
                        Plan {
                            op: OpKind::Reduce,
                            redop: Some(*op),
                            count: n,
                            root: Some(*root),
                            seq: c,
                            sched,
                            work: w,
                            input: &[],
                        },
                    )?;
                    if *op == ReduceOp::Avg {
                        // SAFETY: checked buffers, valid for the call (`run`'s contract).
                        divide_bytes(dtype, unsafe { bytes_mut(recv) }, world);
                    }
                } else {
                    // Non-root buffers stay as they were: the tree writes partial sums.
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    scratch = unsafe { staged(Some(input)) };
                    let w = &mut as_bytes(&mut scratch)[..n * dtype.size()];
                    run(
                        st,
                        Plan {
                            op: OpKind::Reduce,
                            redop: Some(*op),
                            count: n,
                            root: Some(*root),
                            seq: c,
                            sched,
                            work: w,
                            input: &[],
                        },
                    )?;
                }
            }
            Collective::AllGather { counts } => {
                let s = send.expect("checked");
                let counts = counts.clone().unwrap_or_else(|| vec![s.count(); world]);
                let total = counts.iter().sum();
                let sched = allgather_schedule(cfg, rank, world, &counts, dtype);
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let i = unsafe { input(send, recv, &mut copy) };
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let w = unsafe { bytes_mut(recv) };
                run(
                    st,
                    Plan {
                        op: OpKind::AllGather,
                        redop: None,
                        count: total,
                        root: None,
                        seq: c,
                        sched,
                        work: w,
                        input: i,
                    },
                )?;
            }
            Collective::ReduceScatter { op } => {
                let (s, r) = (send.expect("checked"), recv.expect("checked"));
                let n = r.count();
                let es = dtype.size();
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                scratch = unsafe { staged(Some(s)) };
                let w = &mut as_bytes(&mut scratch)[..s.count() * es];
                let sched = ring::reduce_scatter(rank, world, &vec![n; world]);
                run(
                    st,
                    Plan {
                        op: OpKind::ReduceScatter,
                        redop: Some(*op),
                        count: s.count(),
                        root: None,
                        seq: c,
                        sched,
                        work: w,
                        input: &[],
                    },
                )?;
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
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
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    unsafe { (input(send, recv, &mut copy), bytes_mut(recv)) }
                } else {
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    (unsafe { bytes_mut(send) } as &[u8], &mut [][..])
                };
                run(
                    st,
                    Plan {
                        op: OpKind::Gather,
                        redop: None,
                        count: s.count(),
                        root: Some(*root),
                        seq: c,
                        sched,
                        work: w,
                        input: i,
                    },
                )?;
            }
            Collective::Scatter { root } => {
                let r = recv.expect("checked");
                let sched = direct::scatter(rank, world, *root, &vec![r.count(); world]);
                let i: &[u8] = if rank == *root {
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    unsafe { input(send, recv, &mut copy) }
                } else {
                    &[]
                };
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let w = unsafe { bytes_mut(recv) };
                run(
                    st,
                    Plan {
                        op: OpKind::Scatter,
                        redop: None,
                        count: r.count(),
                        root: Some(*root),
                        seq: c,
                        sched,
                        work: w,
                        input: i,
                    },
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
                let sc = crate::call::block_counts(send_counts.as_ref(), s.count(), world);
                let rc = crate::call::block_counts(recv_counts.as_ref(), r.count(), world);
                let sched = direct::all_to_all(rank, world, &sc, &rc);
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let i = unsafe { input(send, recv, &mut copy) };
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let w = unsafe { bytes_mut(recv) };
                run(
                    st,
                    Plan {
                        op: OpKind::AllToAll,
                        redop: None,
                        count,
                        root: None,
                        seq: c,
                        sched,
                        work: w,
                        input: i,
                    },
                )?;
            }
            Collective::Barrier => {
                let sched = doubling::barrier(rank, world);
                run(
                    st,
                    Plan {
                        op: OpKind::Barrier,
                        redop: None,
                        count: 0,
                        root: None,
                        seq: c,
                        sched,
                        work: &mut [],
                        input: &[],
                    },
                )?;
            }
            Collective::Send { peer } => {
                let n = send.expect("checked").count();
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let i = unsafe { bytes_mut(send) };
                let seq = SeqKind::SendTo(*peer);
                run(
                    st,
                    Plan {
                        op: OpKind::SendRecv,
                        redop: None,
                        count: n,
                        root: None,
                        seq,
                        sched: direct::send(*peer, n),
                        work: &mut [],
                        input: i,
                    },
                )?;
            }
            Collective::Recv { .. } | Collective::RecvAny { .. } => {
                let n = recv.expect("checked").count();
                let peer = match &call.collective {
                    Collective::Recv { peer } => *peer,
                    _ => {
                        // From any source: the first peer whose next send to this rank is here.
                        let probe = CallDesc {
                            op: OpKind::SendRecv,
                            dtype,
                            redop: None,
                            count: n as u64,
                            root: None,
                            seq: 0,
                        };
                        st.engine
                            .probe_any(&st.recv_seq, &probe, timeout)
                            .inspect_err(|e| st.failed = Some(e.clone()))?
                    }
                };
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let w = unsafe { bytes_mut(recv) };
                let seq = SeqKind::RecvFrom(peer);
                run(
                    st,
                    Plan {
                        op: OpKind::SendRecv,
                        redop: None,
                        count: n,
                        root: None,
                        seq,
                        sched: direct::recv(peer, n),
                        work: w,
                        input: &[],
                    },
                )?;
                if let Collective::RecvAny { source } = &call.collective {
                    source.set(peer);
                }
            }
        }
        Ok(())
    }
}
