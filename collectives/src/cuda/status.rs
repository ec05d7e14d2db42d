//! [`cuda_status`]: what this process has of CUDA and NCCL, and why it cannot use a GPU.

use std::path::PathBuf;

/// The reason given by a build without the cargo feature `cuda`.
pub const NOT_BUILT: &str = "dtcomm was built without CUDA support (feature `cuda`)";

/// What was found of one library: NCCL, or the CUDA driver (`libcuda.so.1`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LibStatus {
    /// The library was loaded (for the driver: `libcuda.so.1` opened and has the functions
    /// dtcomm calls, even if `cuInit` then failed; see [`LibStatus::error`]).
    pub found: bool,
    /// The file it was mapped from, as the dynamic loader reports it.
    pub path: Option<String>,
    /// Its version: NCCL's `ncclGetVersion` (`"2.30.7"`), the driver's `cuDriverGetVersion`
    /// (the newest CUDA it supports, `"12.8"`).
    pub version: Option<String>,
    /// How it was found: for NCCL the step of its search (`DTCOMM_NCCL_LIBRARY`,
    /// `already loaded`, `DTCOMM_NCCL_SEARCH_PATH`, `VIRTUAL_ENV`, `python prefix`,
    /// `system`); for the driver `system` (the dynamic loader).
    pub source: Option<String>,
    /// Why it is not usable, when it is not: the load error (for NCCL every place tried), or
    /// for the driver a failed `cuInit`/`cuDeviceGetCount`.
    pub error: Option<String>,
    /// NCCL's optional functions this library has (`ncclCommSplit`, `ncclMemAlloc`, ...);
    /// empty for the driver.
    pub features: Vec<String>,
    /// The places tried before the one that worked (or, when nothing worked, every place),
    /// each as `step: place: why`. NCCL only.
    pub tried: Vec<String>,
}

/// Whether this process can use a GPU, and everything [`cuda_status`](super::cuda_status) found on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaStatus {
    /// dtcomm was built with the cargo feature `cuda`.
    pub built_with_cuda: bool,
    /// The CUDA version of the driver API dtcomm was built against (cudarc's headers,
    /// `"12.8"`): the driver must support at least this. `None` without the feature.
    pub cuda_api: Option<String>,
    /// The CUDA driver, `libcuda.so.1`.
    pub driver: LibStatus,
    /// NCCL, `libnccl.so.2`.
    pub nccl: LibStatus,
    /// `cuDeviceGetCount`: `Some(0)` when the driver works but sees no GPU, `None` when it
    /// could not be asked.
    pub device_count: Option<u32>,
    /// Driver, at least one device, and NCCL: everything a GPU collective needs.
    pub usable: bool,
    /// Why not [`usable`](CudaStatus::usable): every problem found, joined by `"; "`.
    pub reason: Option<String>,
}

/// Extra inputs for [`cuda_status_with`](super::cuda_status_with).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusOptions {
    /// A Python installation's prefix (`sys.prefix`), searched for the `nvidia-nccl` wheel
    /// when `VIRTUAL_ENV` is unset, so that a venv's Python finds its NCCL unactivated.
    pub python_prefix: Option<PathBuf>,
}

impl CudaStatus {
    /// The answer of a build without the feature `cuda`.
    pub fn not_built() -> CudaStatus {
        let lib = LibStatus {
            error: Some(NOT_BUILT.to_string()),
            ..LibStatus::default()
        };
        CudaStatus {
            built_with_cuda: false,
            cuda_api: None,
            driver: lib.clone(),
            nccl: lib,
            device_count: None,
            usable: false,
            reason: Some(NOT_BUILT.to_string()),
        }
    }

    /// Puts the probes together: usable when nothing failed and there is a device.
    pub fn from_parts(driver: LibStatus, nccl: LibStatus, device_count: Option<u32>) -> Self {
        let mut problems = Vec::new();
        if let Some(error) = &driver.error {
            problems.push(error.clone());
        } else if device_count == Some(0) {
            problems.push("no CUDA device: cuDeviceGetCount returned 0".to_string());
        }
        if let Some(error) = &nccl.error {
            problems.push(error.clone());
        }
        let usable = problems.is_empty() && driver.found && nccl.found && device_count > Some(0);
        let reason = match (usable, problems.is_empty()) {
            (true, _) => None,
            (false, false) => Some(problems.join("; ")),
            (false, true) => Some("CUDA or NCCL not found".to_string()),
        };
        CudaStatus {
            built_with_cuda: cfg!(feature = "cuda"),
            cuda_api: CUDA_API.map(str::to_string),
            driver,
            nccl,
            device_count,
            usable,
            reason,
        }
    }
}

/// The CUDA version of cudarc's headers (its `cuda-12080` feature).
const CUDA_API: Option<&str> = if cfg!(feature = "cuda") {
    Some("12.8")
} else {
    None
};

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(found: bool, error: Option<&str>) -> LibStatus {
        LibStatus {
            found,
            error: error.map(str::to_string),
            ..LibStatus::default()
        }
    }

    #[test]
    fn a_driver_a_device_and_nccl_are_usable() {
        let s = CudaStatus::from_parts(lib(true, None), lib(true, None), Some(2));
        assert!(s.usable);
        assert_eq!(s.reason, None);
    }

    #[test]
    fn every_problem_is_in_the_reason() {
        let s = CudaStatus::from_parts(
            lib(false, Some("libcuda.so.1 not found")),
            lib(false, Some("NCCL not found")),
            None,
        );
        assert!(!s.usable);
        assert_eq!(
            s.reason.as_deref(),
            Some("libcuda.so.1 not found; NCCL not found")
        );
        let s = CudaStatus::from_parts(lib(true, None), lib(true, None), Some(0));
        assert!(!s.usable);
        assert_eq!(
            s.reason.as_deref(),
            Some("no CUDA device: cuDeviceGetCount returned 0")
        );
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn without_the_feature_it_says_so() {
        let s = crate::cuda::cuda_status();
        assert!(!s.built_with_cuda && !s.usable);
        assert_eq!(s.reason.as_deref(), Some(NOT_BUILT));
        assert!(!s.driver.found && !s.nccl.found);
        assert_eq!(s.device_count, None);
    }
}
