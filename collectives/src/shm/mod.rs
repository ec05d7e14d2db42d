//! Shared memory between the ranks of one host.
//!
//! * `host.rs`: which host a rank is on (boot id and namespaces, or `DTCOMM_HOST_ID`), and the
//!   host record a rank publishes beside its address;
//! * `segment.rs`: making, opening and mapping a segment (memfd or a file), and cleaning up;
//! * `layout.rs`: where the header, the counters and the buffers live in it;
//! * `futex.rs`: sleeping on a counter; `cma.rs`: single-copy reads from a peer's memory;
//!   `stream.rs`: copies with non-temporal stores;
//! * `group.rs`: the host's ranks and the epoch protocol every collective uses;
//! * `pipe.rs`: byte pipes between host peers, the link schedules use for them;
//!   `watch.rs`: a peer's liveness through a pidfd;
//! * `allreduce.rs`: allreduce reading every peer's segment, and across hosts;
//! * `ops.rs`: broadcast, allgather, reduce-scatter, all-to-all, gather, scatter, barrier;
//! * `setup.rs`: finding host peers over the links already up and joining them.

mod allreduce;
mod cma;
pub(crate) mod ctx;
mod futex;
pub(crate) mod group;
pub(crate) mod host;
mod layout;
pub(crate) mod ops;
pub(crate) mod pipe;
mod segment;
pub(crate) mod setup;
mod stream;
mod watch;

pub(crate) use group::ShmGroup;
