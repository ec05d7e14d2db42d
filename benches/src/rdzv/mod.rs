//! The rendezvous benchmark: N members connect, `add` to a counter and `wait` on a release key,
//! the shape of every store-based barrier (torchrun agents, `init_process_group`).

mod herd;
mod servers;

pub use herd::{HerdResult, run_herd};
pub use servers::{ServerProcess, rss_bytes, start_dt_rdzv, start_torch_store};
