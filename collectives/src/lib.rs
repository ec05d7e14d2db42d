//! # dtcomm
//!
//! The collective engine of dtcomm: allreduce, broadcast, reduce, allgather(v),
//! reduce-scatter, gather, scatter, all-to-all(v), barrier and send/recv over TCP (or an
//! in-memory transport), between ranks that find each other through a
//! [`Store`](dt_rdzv::store::Store).
//!
//! It does not do shared memory or GPUs yet, and it has no Python binding (see the workspace).
//!
//! Contents, in the order data flows:
//!
//! * [`config`]: every setting and its environment twin (`DTCOMM_*`), with provenance;
//! * [`Communicator`] (`communicator.rs`, `collectives.rs`): the public API; [`Work`] for
//!   asynchronous calls (`work.rs`, the progress thread);
//! * `schedule/`: pure schedules (`ring.rs`, `doubling.rs`, `tree.rs`, `direct.rs`);
//! * `engine.rs`: runs a schedule over a transport; `watchdog.rs`: deadlines and warnings;
//! * `transport/`: the `Transport` trait, `mem.rs` (the in-memory twin), `tcp.rs`,
//!   `frame.rs` (data frame headers), `iface.rs` (`DTCOMM_SOCKET_IFNAME`);
//! * `bootstrap.rs`: address exchange through the store and the TCP mesh;
//! * [`dtype`], [`op`], `reduce.rs` and `half_conv.rs` (vectorised kernels), [`error`].
//!
//! Errors, not hangs: every wait has a deadline (`DTCOMM_TIMEOUT`), a warning at half of it
//! names the ranks not heard from, a lost rank or a mismatched call fails every surviving rank
//! with a [`CommError`] naming the ranks, the call and its sequence number, and a failed
//! communicator says so on every later call.

mod bootstrap;
mod collectives;
mod communicator;
pub mod config;
pub mod dtype;
mod engine;
pub mod error;
mod half_conv;
pub mod op;
mod reduce;
mod schedule;
mod transport;
mod watchdog;
mod work;

pub use communicator::Communicator;
pub use config::{Algo, Config, Options};
pub use dtype::{DType, Element};
pub use error::{CallDesc, CommError, OpKind};
pub use op::ReduceOp;
pub use reduce::reduce_local;
pub use work::Work;
