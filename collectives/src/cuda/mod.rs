//! GPUs through CUDA and NCCL, both loaded at run time.
//!
//! [`cuda_status`] says, without ever panicking, whether this process can use a GPU: the CUDA
//! driver (`libcuda.so.1`, its version, `cuInit`, the device count), NCCL (where it was found,
//! its version, its optional functions) and, when something is missing, why. It exists in
//! every build; without the cargo feature `cuda` it answers that dtcomm was built without
//! CUDA support. See `docs/cuda.md`.
//!
//! With the feature, `runtime.rs` is the real [`DeviceRuntime`](crate::device::DeviceRuntime)
//! the engine's device path uses (see [`crate::device`]): cudarc's raw driver calls for
//! streams, events and copies, `dtcomm-nccl-sys` for NCCL. It needs a GPU and is **not run** by
//! the test suite, which drives the same path through the in-memory twins.

#[cfg(feature = "cuda")]
mod driver;
mod json;
#[cfg(feature = "cuda")]
mod nccl_probe;
#[cfg(feature = "cuda")]
mod runtime;
mod status;

pub use status::{CudaStatus, LibStatus, NOT_BUILT, StatusOptions};

/// Probes the CUDA driver and NCCL; see [`cuda_status_with`].
pub fn cuda_status() -> CudaStatus {
    cuda_status_with(&StatusOptions::default())
}

/// Probes the CUDA driver and NCCL and says whether a GPU can be used here, and if not why.
///
/// Never panics and never fails: what goes wrong is in the answer. Safe to call any number
/// of times (each call looks again). The driver is probed by opening `libcuda.so.1` first and
/// only then through cudarc (`cuDriverGetVersion`, `cuInit(0)`, `cuDeviceGetCount`); NCCL is
/// loaded by `dtcomm-nccl-sys`'s search (`docs/nccl.md`). Both libraries stay mapped.
pub fn cuda_status_with(options: &StatusOptions) -> CudaStatus {
    #[cfg(not(feature = "cuda"))]
    {
        let _ = options;
        CudaStatus::not_built()
    }
    #[cfg(feature = "cuda")]
    {
        let (driver, device_count) = driver::probe();
        let nccl = nccl_probe::probe(options);
        CudaStatus::from_parts(driver, nccl, device_count)
    }
}

/// The device runtime of this process: CUDA and NCCL loaded at run time (feature `cuda`), or
/// why there is none. A communicator loads its own on its first device call; a program that
/// also allocates device memory itself (a benchmark) loads one here and hands it to the
/// communicator with [`Communicator::set_device_runtime`](crate::Communicator::set_device_runtime).
pub fn default_runtime() -> Result<crate::device::DeviceRuntime, String> {
    #[cfg(feature = "cuda")]
    {
        runtime::load()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("dtcomm was built without CUDA support (cargo feature `cuda`)".into())
    }
}
