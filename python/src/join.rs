//! `dtcomm._dtcomm.join_store` and `meet`: the engine's one join ([`dtcomm_launch::join`], what
//! the C ABI's `dtcomm_comm_init` runs) for `dtcomm.init()`'s store path, and its meeting for
//! `dtcomm://` (which hands torch a store of its own). Python resolves the launch
//! (`dtcomm._config.resolve`, through the same Rust rules) and passes it back as it is.

use std::time::Duration;

use dtcomm_launch::{Launch, Sourced};
use pyo3::conversion::FromPyObjectOwned;
use pyo3::prelude::*;

use crate::comm::PyCommunicator;
use crate::errors::to_py;
use crate::options::options;
use crate::rdzv::RdzvServer;

/// One `Value` (`value`, `source`) of a `dtcomm._config.Resolved`.
fn field<'py, T: FromPyObjectOwned<'py>>(
    r: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<Sourced<T>> {
    let v = r.getattr(name)?;
    Ok(Sourced {
        value: v.getattr("value")?.extract().map_err(Into::into)?,
        source: v.getattr("source")?.extract()?,
    })
}

/// The launch a `dtcomm._config.Resolved` describes.
fn launch_of(r: &Bound<'_, PyAny>) -> PyResult<Launch> {
    Ok(Launch {
        rank: field(r, "rank")?,
        world: field(r, "world_size")?,
        local_rank: field(r, "local_rank")?,
        local_size: field(r, "local_size")?,
        endpoint: field(r, "endpoint")?,
        run_id: field(r, "run_id")?,
        host_store: field(r, "host_store")?,
        rank0_hosts: field(r, "rank0_hosts")?,
        native: field(r, "native")?,
    })
}

/// Joins the group `resolved` describes through a store (the engine's `join_store`: a world of
/// one needs none; the meeting by the launch rules; rank 0's hosting of this init; an OCI
/// worker's rank; the generation): `(communicator, the store this process hosts or None,
/// generation or None)`. Interruptible (Ctrl-C raises and the set-up fails).
#[pyfunction]
#[pyo3(signature = (resolved, *, timeout=None, algo=None, socket_ifname=None))]
pub(crate) fn join_store(
    py: Python<'_>,
    resolved: &Bound<'_, PyAny>,
    timeout: Option<f64>,
    algo: Option<&str>,
    socket_ifname: Option<String>,
) -> PyResult<(PyCommunicator, Option<RdzvServer>, Option<u64>)> {
    let l = launch_of(resolved)?;
    let opts = options(timeout, algo, socket_ifname, None, None)?;
    let (joined, raised) =
        crate::interrupt::detach(py, move || dtcomm_launch::join_store(&l, &opts));
    if let Some(e) = raised {
        return Err(e);
    }
    let j = joined.map_err(to_py)?;
    Ok((
        PyCommunicator::wrap(j.comm),
        j.server.map(RdzvServer::hosting),
        j.generation,
    ))
}

/// The store every rank of `resolved` meets at, by the launch rules (the engine's `meet`):
/// `(endpoint, the store this process hosts or None)`, or None for a world of one. Waits at
/// most `wait` seconds; interruptible.
#[pyfunction]
#[pyo3(signature = (resolved, wait, socket_ifname=None))]
pub(crate) fn meet(
    py: Python<'_>,
    resolved: &Bound<'_, PyAny>,
    wait: f64,
    socket_ifname: Option<String>,
) -> PyResult<Option<(String, Option<RdzvServer>)>> {
    let l = launch_of(resolved)?;
    let wait = dtcomm::secs::saturating(wait).max(Duration::from_millis(1));
    let (met, raised) = crate::interrupt::detach(py, move || {
        dtcomm_launch::meet(&l, socket_ifname.as_deref(), wait)
    });
    if let Some(e) = raised {
        return Err(e);
    }
    Ok(met
        .map_err(to_py)?
        .map(|m| (m.endpoint, m.server.map(RdzvServer::hosting))))
}
