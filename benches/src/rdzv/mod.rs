//! The rendezvous benchmark: N members connect, `add` to a counter and `wait` on a release key,
//! the shape of every store-based barrier (torchrun agents, `init_process_group`); the
//! torchelastic compare-set herd; and the native rendezvous herd (one connection per rank, or
//! per node through node agents) and kill-one recovery.

mod cas;
mod etcd;
mod herd;
mod native;
mod nodes;
mod servers;

pub use cas::{CasResult, run_cas_herd};
pub use etcd::{EtcdCluster, start_group};
pub use herd::{HerdResult, run_herd};
pub use native::{
    Fault, NativeResult, QuicTotals, client_config, run_kill_one, run_native_herd, spawn_member,
};
pub use nodes::run_node_herd;
pub use servers::{
    BENCH_TOKEN, ServerProcess, cpu_seconds, rss_bytes, start_dt_rdzv, start_torch_store,
};
