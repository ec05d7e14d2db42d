//! This rank's summary of its calls as a store record (`dtcomm/progress/<rank>`), for the
//! store publisher (`dtcomm/_progress.py`) and `dt-rdzv status --hang --store`.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `progress_record(rank)`: this process's flight recorder summary for `rank`, with the Unix
/// time in milliseconds, encoded as `dt-rdzv` reads it back.
#[pyfunction]
pub(crate) fn progress_record(py: Python<'_>, rank: u32) -> Bound<'_, PyBytes> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let summary = dtcomm::flight::summary(rank, 0);
    PyBytes::new(
        py,
        &dt_rdzv_proto::native::progress::to_record(now, &summary),
    )
}
