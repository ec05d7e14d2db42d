//! Device (GPU) buffers in the engine.
//!
//! A [`Call`](crate::Call) whose buffers are [`Memory::Device`](crate::Memory::Device) runs on
//! NCCL when every rank can use it, or else by host staging (copy to host memory, run the host
//! collective over dtcomm's own links, copy back). The ranks agree on the path before the first
//! device call ([`path`]). On NCCL, all-gather with per-rank counts, all-to-all(v), gather and
//! scatter are one group of `ncclSend`/`ncclRecv` ([`NcclOp::Exchange`], `plan.rs`), staged
//! instead where some rank's NCCL lacks them; point to point is always staged. The engine side
//! is `communicator/route.rs` (staged or NCCL) and `communicator/backend/`. See
//! `docs/device-buffers.md`.
//!
//! Everything here is written against two narrow interfaces ([`api`]): [`DeviceApi`] for the
//! few CUDA calls used and [`NcclApi`] for NCCL. The real ones live in [`crate::cuda`] (cargo
//! feature `cuda`); the in-memory twins in [`twin`] drive the same path in tests without a
//! GPU. See `docs/cuda.md`.

pub mod api;
pub mod path;
pub(crate) mod plan;
pub(crate) mod pool;
pub(crate) mod roots;
pub mod settle;
pub mod twin;

pub use api::{
    Block, DevPtr, DeviceApi, DeviceError, DeviceEvent, DeviceMemory, DeviceRuntime, HostMemory,
    InitState, NcclApi, NcclComm, NcclError, NcclOp, StreamHandle, UniqueId,
};
pub use path::{CudaMode, DevicePath};
