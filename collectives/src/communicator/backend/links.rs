//! The links backend: a lowered call (`lower.rs`) run over the links alone (the checks are in
//! `args.rs`, the routing in `route.rs`): the choice of schedule, and the engine. Everything
//! here works on bytes; the dtype travels as a tag.

use std::time::Duration;

use crate::call::{CallDesc, Collective};
use crate::communicator::buffers::as_bytes;
use crate::communicator::lower::Lowered;
use crate::config::{Algo, Config};
use crate::dtype::DType;
use crate::engine::{Bufs, Engine};
use crate::error::CommError;
use crate::op::ReduceOp;
use crate::schedule::{Schedule, direct, doubling, ring, tree};

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

/// Runs `sched` for the call `desc` within `timeout`: the engine, then the call's error as it
/// stands (`execute.rs` fails the communicator).
fn run_sched(
    e: &mut Engine,
    desc: &CallDesc,
    timeout: Duration,
    sched: &Schedule,
    work: &mut [u8],
    input: &[u8],
) -> Result<(), CommError> {
    let combine = desc.redop.map_or(ReduceOp::Sum, ReduceOp::combine);
    let mut bufs = Bufs { work, input };
    e.run(sched, desc, combine, &mut bufs, timeout)
}

/// Runs a lowered call over the links alone (the schedules of `crate::schedule`); `at`: this
/// rank and the world. A receive from any source takes its number from `recv_seq` once the
/// sender is known.
pub(in crate::communicator) fn run(
    e: &mut Engine,
    recv_seq: &mut [u64],
    l: &mut Lowered<'_>,
    cfg: &Config,
    (rank, world): (usize, usize),
) -> Result<(), CommError> {
    let Lowered {
        collective,
        desc,
        work,
        input,
        timeout,
        ..
    } = l;
    let (dtype, timeout, input) = (desc.dtype, *timeout, *input);
    let es = dtype.size();
    let mut go = |sched: &Schedule, desc: &CallDesc, work: &mut [u8], input: &[u8]| {
        run_sched(e, desc, timeout, sched, work, input)
    };
    match collective {
        Collective::AllReduce { .. } => {
            let n = work.len() / es;
            if !input.is_empty() && allreduce_algo(cfg, world, n, dtype) == Algo::Ring {
                let sched = ring::allreduce_out_of_place(rank, world, n);
                return go(&sched, desc, work, input);
            }
            if !input.is_empty() {
                work.copy_from_slice(input);
            }
            go(
                &allreduce_schedule(cfg, rank, world, n, dtype),
                desc,
                work,
                &[],
            )
        }
        Collective::Broadcast { root } => {
            let sched = broadcast_schedule(cfg, rank, world, *root, work.len() / es, dtype);
            go(&sched, desc, work, &[])
        }
        Collective::Reduce { root, .. } => {
            let sched = tree::reduce_binomial(rank, world, *root, work.len() / es);
            go(&sched, desc, work, &[])
        }
        Collective::AllGather { counts } => {
            let counts = counts
                .clone()
                .unwrap_or_else(|| vec![input.len() / es; world]);
            let sched = allgather_schedule(cfg, rank, world, &counts, dtype);
            go(&sched, desc, work, input)
        }
        Collective::ReduceScatter { .. } => {
            // The ring reduces the whole input in place: a copy of it, this rank's block of
            // which is the result.
            let n = work.len() / es;
            let mut scratch = vec![0u64; input.len().div_ceil(8)];
            let whole = &mut as_bytes(&mut scratch)[..input.len()];
            whole.copy_from_slice(input);
            let sched = ring::reduce_scatter(rank, world, &vec![n; world]);
            go(&sched, desc, whole, &[])?;
            work.copy_from_slice(&whole[rank * n * es..(rank + 1) * n * es]);
            Ok(())
        }
        Collective::Gather { root } => {
            let sched = direct::gather(rank, world, *root, &vec![input.len() / es; world]);
            go(&sched, desc, work, input)
        }
        Collective::Scatter { root } => {
            let sched = direct::scatter(rank, world, *root, &vec![work.len() / es; world]);
            go(&sched, desc, work, input)
        }
        Collective::AllToAll {
            send_counts,
            recv_counts,
        } => {
            let sc = crate::call::block_counts(send_counts.as_ref(), input.len() / es, world);
            let rc = crate::call::block_counts(recv_counts.as_ref(), work.len() / es, world);
            go(
                &direct::all_to_all(rank, world, &sc, &rc),
                desc,
                work,
                input,
            )
        }
        Collective::Barrier => go(&doubling::barrier(rank, world), desc, &mut [], &[]),
        Collective::Send { peer } => {
            go(&direct::send(*peer, input.len() / es), desc, &mut [], input)
        }
        Collective::Recv { peer } => go(&direct::recv(*peer, work.len() / es), desc, work, &[]),
        Collective::RecvAny { source } => {
            // From any source: the first peer whose next send to this rank is here.
            let probe = CallDesc { seq: 0, ..*desc };
            let peer = e.probe_any(recv_seq, &probe, timeout)?;
            desc.seq = recv_seq[peer];
            recv_seq[peer] += 1;
            let sched = direct::recv(peer, work.len() / es);
            run_sched(e, desc, timeout, &sched, work, &[])?;
            source.set(peer);
            Ok(())
        }
    }
}
