//! `dtcomm._dtcomm.flight_*`: the engine's flight recorder ([`dtcomm::flight`]): its entries
//! and a rank's summary as dicts, and dumps in torch's Flight Recorder format.

use dtcomm::flight::{self, Entry, Progress};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

fn entry<'py>(py: Python<'py>, e: &Entry) -> PyResult<Bound<'py, PyDict>> {
    let i = &e.info;
    let d = PyDict::new(py);
    d.set_item("record_id", e.record_id)?;
    d.set_item("group", i.group)?;
    d.set_item("group_size", i.group_size)?;
    d.set_item("rank", i.rank)?;
    d.set_item("group_rank", i.group_rank)?;
    d.set_item("seq", e.seq)?;
    d.set_item("op", i.op)?;
    d.set_item("p2p", i.p2p)?;
    d.set_item("peer", i.peer)?;
    d.set_item("dtype", i.dtype.to_string())?;
    d.set_item("in_count", i.in_count)?;
    d.set_item("out_count", i.out_count)?;
    d.set_item("state", e.state.name())?;
    d.set_item("time_queued_ns", e.time_queued_ns)?;
    d.set_item("time_started_ns", e.time_started_ns)?;
    d.set_item("time_ended_ns", e.time_ended_ns)?;
    d.set_item("duration_ns", e.duration_ns)?;
    d.set_item("waiting_for", &e.waiting_for)?;
    d.set_item("waiting_total", e.waiting_total)?;
    d.set_item("timeout_ms", i.timeout_ms)?;
    Ok(d)
}

/// The recorder's entries, oldest first, as dicts (every rank of this process).
#[pyfunction]
pub(crate) fn flight_entries<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
    let entries = py.detach(flight::entries);
    let out = PyList::empty(py);
    for e in &entries {
        out.append(entry(py, e)?)?;
    }
    Ok(out)
}

fn summary_dict<'py>(py: Python<'py>, p: &Progress) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("rank", p.rank)?;
    d.set_item("round", p.round)?;
    d.set_item("calls", p.calls)?;
    d.set_item("idle_ms", p.idle_ms)?;
    let pending = PyList::empty(py);
    for c in &p.pending {
        let x = PyDict::new(py);
        x.set_item("group", c.group)?;
        x.set_item("group_size", c.group_size)?;
        x.set_item("seq", c.seq)?;
        x.set_item("op", &c.op)?;
        x.set_item("state", c.state.name())?;
        x.set_item("age_ms", c.age_ms)?;
        x.set_item("peer", c.peer)?;
        x.set_item("waiting_for", &c.waiting_for)?;
        pending.append(x)?;
    }
    d.set_item("pending", pending)?;
    let groups = PyList::empty(py);
    for g in &p.groups {
        let x = PyDict::new(py);
        x.set_item("group", g.group)?;
        x.set_item("group_size", g.group_size)?;
        x.set_item("completed_seq", g.completed_seq)?;
        x.set_item("completed_op", &g.completed_op)?;
        x.set_item("completed_age_ms", g.completed_age_ms)?;
        groups.append(x)?;
    }
    d.set_item("groups", groups)?;
    Ok(d)
}

/// Global rank `rank`'s summary (what its heartbeats carry) as a dict.
#[pyfunction]
#[pyo3(signature = (rank, round=0))]
pub(crate) fn flight_summary<'py>(
    py: Python<'py>,
    rank: u32,
    round: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let p = py.detach(|| flight::summary(rank, round));
    summary_dict(py, &p)
}

/// The trace of global rank `rank` (every rank of this process when None) in torch's Flight
/// Recorder format (pickle bytes).
#[pyfunction]
#[pyo3(signature = (rank=None))]
pub(crate) fn flight_dump_bytes<'py>(
    py: Python<'py>,
    rank: Option<u32>,
) -> PyResult<Bound<'py, PyBytes>> {
    let (bytes, _) = py.detach(|| flight::dump_bytes(rank));
    Ok(PyBytes::new(py, &bytes))
}

/// Writes that trace to `path`; returns how many calls it holds.
#[pyfunction]
#[pyo3(signature = (path, rank=None))]
pub(crate) fn flight_dump(
    py: Python<'_>,
    path: std::path::PathBuf,
    rank: Option<u32>,
) -> PyResult<usize> {
    Ok(py.detach(|| flight::dump(&path, rank))?)
}

/// The ring's capacity (0: the recorder is off).
#[pyfunction]
pub(crate) fn flight_capacity() -> usize {
    flight::capacity()
}
