//! GPUs through CUDA and NCCL, both loaded at run time.
//!
//! [`cuda_status`] says, without ever panicking, whether this process can use a GPU: the CUDA
//! driver (`libcuda.so.1`, its version, `cuInit`, the device count), NCCL (where it was found,
//! its version, its optional functions) and, when something is missing, why. It exists in
//! every build; without the cargo feature `cuda` it answers that dtcomm was built without
//! CUDA support. See `docs/cuda.md`.
//!
//! With the feature, [`stream`] and [`memory`] are thin wrappers over cudarc's driver API
//! (contexts, streams, events, device memory copies). They need a GPU and are **not tested**
//! by the test suite, which runs without one.

#[cfg(feature = "cuda")]
mod driver;
mod json;
#[cfg(feature = "cuda")]
pub mod memory;
#[cfg(feature = "cuda")]
mod nccl;
mod status;
#[cfg(feature = "cuda")]
pub mod stream;

pub use status::{CudaStatus, LibStatus, NOT_BUILT, StatusOptions, cuda_status, cuda_status_with};
