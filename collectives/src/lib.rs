//! # dtcomm
//!
//! The collective engine of dtcomm: allreduce, broadcast, reduce, allgather(v),
//! reduce-scatter, gather, scatter, all-to-all(v), barrier and send/recv over TCP (or an
//! in-memory transport), between ranks that find each other through a
//! [`Store`](dt_rdzv::store::Store).
//!
//! Buffers may be host memory or GPU memory ([`Memory::Device`]): device calls run on NCCL when
//! every rank can, else by host staging ([`device`]). Its front ends live in other crates of the workspace: the Python binding
//! (`python/`) and the C ABI (`ffi/`), both over the byte-level [`Call`].
//!
//! Contents, in the order data flows:
//!
//! * [`config`]: every setting and its environment twin (`DTCOMM_*`), with provenance;
//! * [`call`]: the byte-level [`Call`] every front end submits ([`Collective`], [`RawBuf`]);
//! * [`Communicator`] (`communicator/`): construction, [`Communicator::run`] and
//!   [`Communicator::submit`] through the one progress executor (`progress.rs`, [`Work`]),
//!   `route.rs` (the one routing decision) and `backend/` (a file per backend: links,
//!   hierarchical, staged, NCCL; `shm/` the shared-memory collectives, their host group and
//!   set-up), `typed.rs` (the safe typed API on top);
//! * `schedule/`: pure schedules (`ring.rs`, `doubling.rs`, `tree.rs`, `direct.rs`);
//! * `engine.rs`: runs a schedule over its links; `watchdog.rs`: deadlines and warnings;
//! * `transport/`: the `DataPlane` and `ControlPlane` traits, `links.rs` (each peer's link,
//!   behind the round's fence: what the engine holds), `control.rs` (the control messages'
//!   codec), `mem.rs` (the in-memory twin), `tcp/`, `shm/` (shared memory between a host's
//!   ranks: segments, futexes, pipes), `frame.rs` (data frame headers), `iface.rs`
//!   (`DTCOMM_SOCKET_IFNAME`);
//! * `bootstrap/`: the TCP mesh (its links and authenticated handshake are `transport/tcp/`); peers'
//!   addresses through a store (`store.rs`) or a native round's `Welcome` (`welcome.rs`);
//! * [`device`]: device buffers (path agreement, staging, NCCL calls) over two narrow
//!   interfaces with in-memory twins; [`cuda`]: whether CUDA and NCCL (loaded at run time,
//!   feature `cuda`) are usable here ([`cuda::cuda_status`]), and with the feature the real
//!   implementations of those interfaces;
//! * [`dtype`], [`op`], `reduce/` (vectorised kernels), [`error`]
//!   (with stable [`ErrorCode`]s), `fork.rs` (calls from a forked child are refused).
//!
//! Errors, not hangs: every wait has a deadline (`DTCOMM_TIMEOUT`), a warning at half of it
//! names the ranks not heard from, a lost rank or a mismatched call fails every surviving rank
//! with a [`CommError`] naming the ranks, the call and its sequence number, and a failed
//! communicator says so on every later call.

#![warn(clippy::undocumented_unsafe_blocks)]

mod bootstrap;
pub mod call;
mod communicator;
pub mod config;
pub mod cuda;
pub mod device;
pub mod dtype;
mod engine;
pub mod error;
pub mod fence;
pub mod flight;
mod fork;
#[doc(hidden)]
pub mod fuzzing;
pub mod interrupt;
pub mod negotiate;
pub mod op;
mod progress;
mod reduce;
mod schedule;
pub mod secs;
pub mod spin;
mod transport;
mod watchdog;

pub use bootstrap::welcome::{DataListener, RoundPeers, round_secret, store_link_secret};
pub use call::{Call, CallDesc, Collective, Memory, OpKind, RawBuf, Source};
pub use communicator::Communicator;
pub use config::{Algo, Config, LinkKind, LinkSecret, Options};
pub use dtype::{DType, Element};
pub use error::{CommError, ErrorCode, Strangers};
pub use fence::{RoundEnd, RoundFence};
pub use op::ReduceOp;
pub use progress::{OnDone, Work};
pub use reduce::reduce_local;
pub use transport::iface::advertised_ip;
