//! Shared pieces of the dtcomm benchmarks.
//!
//! * [`rdzv`]: the rendezvous barrier herd and the servers it runs against (`rdzv_perf`).

pub mod rdzv;
pub mod stats;
