//! The hierarchical backend: an allreduce over ranks of several hosts that each share memory
//! within: shared memory within each host, the links between one rank per host.

use super::links::allreduce_schedule;
use super::shm::ShmGroup;
use super::shm::ctx::run_split;
use super::shm::ops;
use crate::call::Collective;
use crate::communicator::lower::Lowered;
use crate::config::Config;
use crate::engine::Engine;
use crate::error::CommError;

/// Runs a lowered allreduce over hosts that all share memory within: shared memory within
/// each host, the links between (`ops::allreduce_across`); this rank is `host`-th of the one
/// rank per host, `peers`, that the links join.
pub(in crate::communicator) fn run(
    e: &mut Engine,
    g: &mut ShmGroup,
    l: &mut Lowered<'_>,
    cfg: &Config,
    host: usize,
    peers: &[usize],
) -> Result<(), CommError> {
    let Collective::AllReduce { op } = l.collective else {
        unreachable!("route.rs sends only allreduce across hosts")
    };
    let (dtype, small, input) = (l.dtype(), cfg.tree_threshold.value, l.input());
    let cross = |len: usize| allreduce_schedule(cfg, host, peers.len(), len, dtype).remap(peers);
    let (desc, work) = (l.desc, &mut *l.work);
    run_split(e, g, &desc, l.timeout, |e, g, d| {
        ops::allreduce_across(
            e,
            g,
            &desc,
            d,
            dtype,
            op.combine(),
            work,
            input,
            small,
            &cross,
        )
    })
}
