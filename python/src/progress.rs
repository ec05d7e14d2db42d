//! This rank's summary of its calls as a store record (`dtcomm/progress/<rank>`), and the
//! asks to dump that travel through the store, for the store publisher (`dtcomm/_progress.py`)
//! and `dt-rdzv status --hang --store`.

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

/// `flight_take_dump_ask()`: `(rank, why)` of the last call of this process that timed out and
/// dumped, not yet taken; the publisher posts it to the store for the other ranks.
#[pyfunction]
pub(crate) fn flight_take_dump_ask() -> Option<(u32, String)> {
    dtcomm::flight::take_dump_ask().map(|a| (a.rank, a.why))
}

/// `flight_dumps_on_timeout()`: whether a timeout dumps the trace here (the recorder is on
/// and `TORCH_FR_DUMP_ON_TIMEOUT` says so); the publisher polls for asks only then.
#[pyfunction]
pub(crate) fn flight_dumps_on_timeout() -> bool {
    dtcomm::flight::dumps_on_timeout()
}

/// `flight_dump_asked(rank, asker, why)`: rank `asker` (`None`: unknown) timed out and asked
/// every rank to dump: dumps `rank`'s trace unless this process dumped on a timeout in the
/// last 30 s.
#[pyfunction]
pub(crate) fn flight_dump_asked(py: Python<'_>, rank: u32, asker: Option<u32>, why: &str) {
    py.detach(|| dtcomm::flight::on_peer_timeout(rank, asker, why));
}
