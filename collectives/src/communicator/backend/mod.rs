//! The execution backends, a file each; `route.rs` decides which one runs a call, and each
//! runs what it is given under the communicator's state lock:
//!
//! * `links.rs`: the schedules (ring, tree, doubling, direct) over the transport;
//! * `shm.rs`: shared memory, every rank on this host;
//! * `hierarchical.rs`: an allreduce with shared memory within hosts and links between;
//! * `staged.rs`: device buffers copied to host memory and run over the host routes;
//! * `nccl_calls.rs`: device buffers through NCCL, watched to their end.

pub(super) mod hierarchical;
pub(super) mod links;
pub(super) mod nccl_calls;
pub(super) mod shm;
pub(super) mod staged;
