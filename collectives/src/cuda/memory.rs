//! Device memory and copies between host and device: thin wrappers over cudarc.
//!
//! **Untested** (no GPU in the test suite). Copies are queued on a stream; the ones returning
//! host data wait for it.

use std::sync::Arc;

pub use cudarc::driver::{CudaSlice, DeviceRepr};

use super::stream::{CudaStream, GpuError, driver};

/// Copies `host` into new device memory (queued on `stream`).
pub fn to_device<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    host: &[T],
) -> Result<CudaSlice<T>, GpuError> {
    stream.clone_htod(host).map_err(driver("cuMemcpyHtoDAsync"))
}

/// Copies `host` into `device`, which must have the same length (queued on `stream`).
pub fn copy_to_device<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    host: &[T],
    device: &mut CudaSlice<T>,
) -> Result<(), GpuError> {
    same_len(host.len(), device.len())?;
    stream
        .memcpy_htod(host, device)
        .map_err(driver("cuMemcpyHtoDAsync"))
}

/// Copies `device` back to the host, waiting for `stream`.
pub fn to_host<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    device: &CudaSlice<T>,
) -> Result<Vec<T>, GpuError> {
    stream
        .clone_dtoh(device)
        .map_err(driver("cuMemcpyDtoHAsync"))
}

/// Copies `src` into `dst`, both on the device and of the same length (queued on `stream`).
pub fn copy_on_device<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    src: &CudaSlice<T>,
    dst: &mut CudaSlice<T>,
) -> Result<(), GpuError> {
    same_len(src.len(), dst.len())?;
    stream
        .memcpy_dtod(src, dst)
        .map_err(driver("cuMemcpyDtoDAsync"))
}

fn same_len(src: usize, dst: usize) -> Result<(), GpuError> {
    if src == dst {
        Ok(())
    } else {
        Err(GpuError::Length { src, dst })
    }
}
