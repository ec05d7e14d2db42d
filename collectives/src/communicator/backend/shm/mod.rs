//! The shared-memory backend: a lowered call (`lower.rs`) run over shared memory, where
//! `route.rs` sends it: every rank of the communicator on this host and a collective with a shared-memory
//! algorithm (all but point to point). The segment, its layout, futexes, pipes and peers'
//! liveness are links (`transport/shm/`); what this backend adds:
//!
//! * `group.rs`: the host's ranks and the epoch protocol every collective uses;
//! * `ctx.rs`: what every shared-memory collective gets (the group, the links, the deadline);
//! * `allreduce.rs`: allreduce reading every peer's segment, and across hosts;
//! * `ops.rs`: broadcast, allgather, reduce-scatter, all-to-all, gather, scatter, barrier;
//! * `setup.rs`: finding host peers over the links already up and joining them.

use crate::call::Collective;
use crate::communicator::lower::Lowered;
use crate::config::Config;
use crate::engine::Engine;
use crate::error::CommError;
mod allreduce;
pub(in crate::communicator) mod ctx;
pub(in crate::communicator) mod group;
pub(in crate::communicator) mod ops;
pub(in crate::communicator) mod setup;

pub(crate) use group::ShmGroup;

use self::ctx::run_local;

/// Runs a lowered call over shared memory (every rank of the communicator is on this host,
/// and `route.rs` checked it has an algorithm here).
pub(in crate::communicator) fn run(
    e: &mut Engine,
    g: &mut ShmGroup,
    l: &mut Lowered<'_>,
    cfg: &Config,
) -> Result<(), CommError> {
    let Lowered {
        collective,
        desc,
        work,
        input,
        timeout,
        ..
    } = l;
    let (dtype, input, small) = (desc.dtype, *input, cfg.tree_threshold.value);
    let some_input = (!input.is_empty()).then_some(input);
    let work = &mut **work;
    run_local(e, g, desc, *timeout, |cx| match collective {
        Collective::AllReduce { op } => {
            ops::allreduce(cx, dtype, op.combine(), work, some_input, small)
        }
        // An allreduce whose result only the root keeps: a non-root's `work` is a copy of
        // its input, so its buffers stay as they were.
        Collective::Reduce { op, .. } => ops::allreduce(cx, dtype, op.combine(), work, None, small),
        Collective::Broadcast { root } => ops::broadcast(cx, *root, work),
        Collective::AllGather { .. } => ops::allgather(cx, input, work),
        Collective::ReduceScatter { op } => {
            ops::reduce_scatter(cx, dtype, op.combine(), input, work)
        }
        Collective::AllToAll { .. } => ops::all_to_all(cx, dtype.size(), input, work),
        Collective::Gather { root } => ops::gather(cx, *root, input, work),
        Collective::Scatter { root } => ops::scatter(cx, dtype.size(), *root, input, work),
        Collective::Barrier => ops::barrier(cx),
        Collective::Send { .. } | Collective::Recv { .. } | Collective::RecvAny { .. } => {
            unreachable!("route.rs sends point to point over the links")
        }
    })
}
