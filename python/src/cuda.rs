//! `dtcomm._dtcomm.cuda_status`: the engine's [`dtcomm::cuda::cuda_status`] as a dict.

use std::path::PathBuf;

use dtcomm::cuda::{LibStatus, StatusOptions, cuda_status_with};
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn lib<'py>(py: Python<'py>, lib: &LibStatus) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("found", lib.found)?;
    d.set_item("path", &lib.path)?;
    d.set_item("version", &lib.version)?;
    d.set_item("source", &lib.source)?;
    d.set_item("error", &lib.error)?;
    d.set_item("features", &lib.features)?;
    d.set_item("tried", &lib.tried)?;
    Ok(d)
}

/// Probes the CUDA driver and NCCL (with the GIL released) and returns what was found:
/// `usable`, `reason`, `device_count`, `built_with_cuda`, `cuda_api`, and `driver` and `nccl`
/// dicts. `python_prefix` (`sys.prefix`) is searched for the NCCL wheel when `VIRTUAL_ENV` is
/// unset. Never raises for what it finds: problems are in `reason` and the `error`s.
#[pyfunction]
#[pyo3(signature = (python_prefix=None))]
pub(crate) fn cuda_status<'py>(
    py: Python<'py>,
    python_prefix: Option<PathBuf>,
) -> PyResult<Bound<'py, PyDict>> {
    let options = StatusOptions { python_prefix };
    let status = py.detach(|| cuda_status_with(&options));
    let d = PyDict::new(py);
    d.set_item("usable", status.usable)?;
    d.set_item("reason", &status.reason)?;
    d.set_item("device_count", status.device_count)?;
    d.set_item("built_with_cuda", status.built_with_cuda)?;
    d.set_item("cuda_api", &status.cuda_api)?;
    d.set_item("driver", lib(py, &status.driver)?)?;
    d.set_item("nccl", lib(py, &status.nccl)?)?;
    Ok(d)
}
