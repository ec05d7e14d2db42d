//! Shared memory between the ranks of one host, as links: the segment, where things live in it,
//! sleeping on its counters, the byte pipes between host peers and their liveness. The
//! shared-memory collectives built on them are a backend (`communicator/backend/shm/`).
//!
//! * `host.rs`: which host a rank is on (boot id and namespaces, or `DTCOMM_HOST_ID`), and the
//!   host record a rank publishes beside its address;
//! * `segment.rs`: making, opening and mapping a segment (memfd or a file), and cleaning up;
//! * `layout.rs`: where the header, the counters and the buffers live in it;
//! * `futex.rs`: sleeping on a counter; `cma.rs`: single-copy reads from a peer's memory;
//!   `stream.rs`: copies with non-temporal stores;
//! * `pipe.rs`: byte pipes between host peers, the link schedules use for them;
//!   `watch.rs`: a peer's liveness through a pidfd.

pub(crate) mod cma;
pub(crate) mod futex;
pub(crate) mod host;
pub(crate) mod layout;
pub(crate) mod pipe;
pub(crate) mod segment;
pub(crate) mod stream;
pub(crate) mod watch;
