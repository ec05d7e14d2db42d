//! In-memory twins of the CUDA and NCCL calls the device path makes ([`MemGpu`], [`MemNccl`]),
//! so the engine's device path (path agreement, staging, NCCL calls, aborts, the mismatch
//! check) runs in tests with no GPU. [`runtime`] bundles them for
//! [`Communicator::set_device_runtime`](crate::Communicator::set_device_runtime).

mod gpu;
mod mem_nccl;

use std::sync::Arc;

pub use gpu::MemGpu;
pub use mem_nccl::MemNccl;

use super::api::DeviceRuntime;

/// A runtime over the twins: `nccl` `None` stands for a process where NCCL did not load.
pub fn runtime(gpu: &MemGpu, nccl: Option<&MemNccl>) -> DeviceRuntime {
    DeviceRuntime {
        api: Arc::new(gpu.clone()),
        nccl: match nccl {
            Some(n) => Ok(Arc::new(n.clone())),
            None => Err("libnccl.so.2 not found (twin without NCCL)".into()),
        },
    }
}
