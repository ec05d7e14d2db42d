//! Which backend runs a checked call, decided in one place, as a pure function of the call and
//! the communicator's shape ([`route`]; `execute.rs` dispatches). The backends (`backend/`)
//! only run what they are given:
//!
//! * [`Route::SharedMemory`] (`shm/`): every rank on this host and a collective shared
//!   memory has (all but point to point and the uneven forms);
//! * [`Route::Hierarchical`] (`hierarchical.rs`): an allreduce over hosts that each share
//!   memory within;
//! * [`Route::Links`] (`links.rs`, the schedules): everything else on host memory;
//! * [`DeviceRoute::Nccl`] (`nccl_calls.rs`): device buffers, the agreed path NCCL and the
//!   call one NCCL has;
//! * [`DeviceRoute::Staged`] (`staged.rs`): other device buffers (point to point always).

use crate::call::{Call, Collective};
use crate::device::api::NcclOp;

/// Where a call on host memory runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Route {
    /// Over shared memory: every rank of the communicator is on this host.
    SharedMemory,
    /// Shared memory within each host, the links between `peers` (one rank per host; this
    /// rank is `peers[host]`'s host's).
    Hierarchical {
        /// This host's index among `peers`.
        host: usize,
        /// The rank that carries each host's part over the links.
        peers: Vec<usize>,
    },
    /// The schedules over the links alone.
    Links,
}

/// Where a call on device memory runs.
#[derive(Debug)]
pub(super) enum DeviceRoute {
    /// NCCL's call on the caller's stream.
    Nccl(NcclOp),
    /// Copied to host memory, run over dtcomm's host routes, copied back.
    Staged,
}

/// This rank's host group, when its ranks share memory.
#[derive(Debug, Clone, Copy)]
pub(super) struct HostShape<'a> {
    /// The ranks of the communicator on this host, this one included.
    pub ranks: usize,
    /// When every host shares memory within: this host's index among `peers` and the rank
    /// of each host that carries its part over the links.
    pub across: Option<(usize, &'a [usize])>,
}

/// What routing looks at besides the call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Topology<'a> {
    /// The communicator's size.
    pub world: usize,
    /// This rank's host group, if its ranks share memory.
    pub host: Option<HostShape<'a>>,
}

/// Whether shared memory has an algorithm for `call`: every collective but point to point and
/// the uneven forms (`allgatherv`, `alltoallv`).
pub(super) fn has_shm_algorithm(call: &Call) -> bool {
    match &call.collective {
        Collective::Send { .. } | Collective::Recv { .. } | Collective::RecvAny { .. } => false,
        Collective::AllToAll {
            send_counts,
            recv_counts,
        } => send_counts.is_none() && recv_counts.is_none(),
        Collective::AllGather { counts } => {
            let sent = call.send.as_ref().map_or(0, |s| s.count());
            counts.as_ref().is_none_or(|c| c.iter().all(|&n| n == sent))
        }
        _ => true,
    }
}

/// The route of a checked call on host memory: shared memory when every rank is on this
/// host and it has the algorithm; an allreduce across hosts that each share memory goes
/// hierarchical; everything else over the links.
pub(super) fn route(call: &Call, topo: &Topology<'_>) -> Route {
    let Some(host) = topo.host else {
        return Route::Links;
    };
    if host.ranks == topo.world {
        return if has_shm_algorithm(call) {
            Route::SharedMemory
        } else {
            Route::Links
        };
    }
    match (&call.collective, host.across) {
        (Collective::AllReduce { .. }, Some((host, peers))) => Route::Hierarchical {
            host,
            peers: peers.to_vec(),
        },
        _ => Route::Links,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::RawBuf;
    use crate::dtype::DType;
    use crate::op::ReduceOp;

    fn call(c: Collective) -> Call {
        let b = RawBuf::host(std::ptr::dangling_mut(), 4, DType::F32);
        Call::new(c).send(b).recv(b)
    }

    /// Every collective against every shape: (call, lone rank, one host, two hosts sharing
    /// memory within, a host group of some ranks only).
    #[test]
    fn the_routing_table() {
        use Collective as C;
        let peers = [0usize, 4];
        let lone = Topology {
            world: 8,
            host: None,
        };
        let one_host = Topology {
            world: 8,
            host: Some(HostShape {
                ranks: 8,
                across: None,
            }),
        };
        let hosts = Topology {
            world: 8,
            host: Some(HostShape {
                ranks: 4,
                across: Some((1, &peers)),
            }),
        };
        let uneven = Topology {
            world: 8,
            host: Some(HostShape {
                ranks: 3,
                across: None,
            }),
        };
        let (shm, links) = (Route::SharedMemory, Route::Links);
        let hier = Route::Hierarchical {
            host: 1,
            peers: peers.to_vec(),
        };
        let sum = ReduceOp::Sum;
        #[rustfmt::skip]
        let table: Vec<(Collective, [Route; 4])> = vec![
            (C::AllReduce { op: sum }, [links.clone(), shm.clone(), hier, links.clone()]),
            (C::Broadcast { root: 1 }, [links.clone(), shm.clone(), links.clone(), links.clone()]),
            (C::Reduce { op: sum, root: 0 }, [links.clone(), shm.clone(), links.clone(), links.clone()]),
            (C::AllGather { counts: None }, [links.clone(), shm.clone(), links.clone(), links.clone()]),
            (C::AllGather { counts: Some(vec![4; 8]) }, [links.clone(), shm.clone(), links.clone(), links.clone()]),
            (C::AllGather { counts: Some(vec![3; 8]) }, [links.clone(), links.clone(), links.clone(), links.clone()]),
            (C::ReduceScatter { op: sum }, [links.clone(), shm.clone(), links.clone(), links.clone()]),
            (C::AllToAll { send_counts: None, recv_counts: None }, [links.clone(), shm.clone(), links.clone(), links.clone()]),
            (C::AllToAll { send_counts: Some(vec![1; 8]), recv_counts: None }, [links.clone(), links.clone(), links.clone(), links.clone()]),
            (C::Gather { root: 2 }, [links.clone(), shm.clone(), links.clone(), links.clone()]),
            (C::Scatter { root: 2 }, [links.clone(), shm.clone(), links.clone(), links.clone()]),
            (C::Barrier, [links.clone(), shm.clone(), links.clone(), links.clone()]),
            (C::Send { peer: 1 }, [links.clone(), links.clone(), links.clone(), links.clone()]),
            (C::Recv { peer: 1 }, [links.clone(), links.clone(), links.clone(), links.clone()]),
            (C::RecvAny { source: crate::call::Source::new() }, [links.clone(), links.clone(), links.clone(), links.clone()]),
        ];
        for (c, want) in table {
            let name = c.name();
            let call = call(c);
            let got = [lone, one_host, hosts, uneven].map(|t| route(&call, &t));
            assert_eq!(got, want, "{name}");
        }
    }
}
