//! Shared pieces of the dtcomm benchmarks.
//!
//! * [`emu`]: the userspace wire of the emulated cluster (`emu_wire`).
//! * [`perf`]: the nccl-tests style collective benchmarks (`all_reduce_perf`,
//!   `broadcast_perf`, `reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`,
//!   `alltoall_perf`).
//! * [`rdzv`]: the rendezvous barrier herd and the servers it runs against (`rdzv_perf`).
//! * [`stats`]: medians for reports.

#![warn(clippy::undocumented_unsafe_blocks)]

pub mod emu;
pub mod perf;
pub mod rdzv;
pub mod stats;
