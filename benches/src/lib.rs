//! Shared helpers of the dtcomm benchmarks.
//!
//! * [`perf`]: the nccl-tests style collective benchmarks (`all_reduce_perf`,
//!   `broadcast_perf`, `reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`,
//!   `alltoall_perf`).

pub mod perf;
