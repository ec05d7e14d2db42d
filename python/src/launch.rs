//! `dtcomm._dtcomm.resolve_launch`: the engine's launcher-environment resolver
//! ([`dtcomm::launch`], what the C ABI's `dtcomm_comm_init` uses), so that the tests can hold it
//! to the same answers as Python's `dtcomm._config.resolve`.

use std::collections::HashMap;

use dtcomm::launch::mpi_hosts::MeetError;
use dtcomm::launch::native::{NativeExplicit, NativeSettings};
use dtcomm::launch::{Explicit, Sourced, resolve};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn put<'py, T: IntoPyObject<'py> + Clone>(
    d: &Bound<'py, PyDict>,
    k: &str,
    v: &Sourced<T>,
) -> PyResult<()> {
    d.set_item(k, (v.value.clone(), v.source.clone()))
}

/// Resolves rank, world size, local rank, endpoint, run id, store hosting and the native flag
/// from `env` (and explicit `rank`/`world_size`, `rdzv_endpoint`, `run_id`) as the C ABI does:
/// a dict of `name: (value, source)`. Raises ValueError naming the variables.
#[pyfunction]
#[pyo3(signature = (env, rank=None, world_size=None, rdzv_endpoint=None, run_id=None))]
pub(crate) fn resolve_launch<'py>(
    py: Python<'py>,
    env: HashMap<String, String>,
    rank: Option<usize>,
    world_size: Option<usize>,
    rdzv_endpoint: Option<String>,
    run_id: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let rank_world = match (rank, world_size) {
        (Some(r), Some(w)) => Some((r, w)),
        (None, None) => None,
        _ => return Err(PyValueError::new_err("pass rank and world_size together")),
    };
    let ex = Explicit {
        rank_world,
        endpoint: rdzv_endpoint,
        run_id,
    };
    let l = resolve(&ex, &|k| env.get(k).cloned()).map_err(PyValueError::new_err)?;
    let d = PyDict::new(py);
    put(&d, "rank", &l.rank)?;
    put(&d, "world_size", &l.world)?;
    put(&d, "local_rank", &l.local_rank)?;
    put(&d, "local_size", &l.local_size)?;
    put(&d, "endpoint", &l.endpoint)?;
    put(&d, "run_id", &l.run_id)?;
    put(&d, "host_store", &l.host_store)?;
    put(&d, "rank0_hosts", &l.rank0_hosts)?;
    put(&d, "native", &l.native)?;
    Ok(d)
}

/// The Slurm step this process is a task of (`srun` started it), as the launch rules read it
/// ([`dtcomm::launch::slurm::step`]): a dict (`rank`, `world`, `local_rank`, `local_size`,
/// `node`, `nodes`, `first_host`, `port`, `run_id`), or None outside `srun`. Raises
/// ValueError naming the variables when they disagree.
#[pyfunction]
pub(crate) fn slurm_step<'py>(
    py: Python<'py>,
    env: HashMap<String, String>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(st) =
        dtcomm::launch::slurm::step(&|k| env.get(k).cloned()).map_err(PyValueError::new_err)?
    else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("rank", st.rank)?;
    d.set_item("world", st.world)?;
    d.set_item("local_rank", st.local_rank)?;
    d.set_item("local_size", st.local_size)?;
    d.set_item("node", st.node)?;
    d.set_item("nodes", st.nodes)?;
    d.set_item("first_host", st.first_host)?;
    d.set_item("port", st.port)?;
    d.set_item("run_id", st.run_id)?;
    Ok(Some(d))
}

/// Resolves the native rendezvous' settings from `env` and the explicit values as every front
/// end does ([`dtcomm::launch::native::NativeSettings::resolve`]): a dict of `name: (value,
/// source)` plus `server_name` and `log_line`. Raises ValueError naming the variable.
#[pyfunction]
#[pyo3(signature = (env, *, endpoint=None, job=None, members=None, token=None, fingerprint=None,
                    cacert=None, store=None, last_call=None, join_timeout=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn native_settings<'py>(
    py: Python<'py>,
    env: HashMap<String, String>,
    endpoint: Option<String>,
    job: Option<String>,
    members: Option<(u32, u32)>,
    token: Option<String>,
    fingerprint: Option<String>,
    cacert: Option<String>,
    store: Option<String>,
    last_call: Option<f64>,
    join_timeout: Option<f64>,
) -> PyResult<Bound<'py, PyDict>> {
    let ex = NativeExplicit {
        endpoint,
        job,
        members,
        token,
        fingerprint,
        cacert,
        store,
        last_call,
        join_timeout,
    };
    let n =
        NativeSettings::resolve(&ex, &|k| env.get(k).cloned()).map_err(PyValueError::new_err)?;
    let d = PyDict::new(py);
    put(&d, "endpoint", &n.endpoint)?;
    put(&d, "token", &n.token)?;
    put(&d, "fingerprint", &n.fingerprint)?;
    put(&d, "cacert", &n.cacert)?;
    put(&d, "store", &n.store)?;
    put(&d, "job", &n.job)?;
    put(&d, "member", &n.member)?;
    put(&d, "node", &n.node)?;
    put(&d, "main", &n.main)?;
    put(&d, "members", &n.members)?;
    put(&d, "last_call", &n.last_call)?;
    put(&d, "join_timeout", &n.join_timeout)?;
    put(&d, "ephemeral", &n.ephemeral)?;
    put(&d, "max_restarts", &n.max_restarts)?;
    put(&d, "reconnect", &n.reconnect)?;
    d.set_item("server_name", &n.server_name)?;
    d.set_item("log_line", n.log_line())?;
    Ok(d)
}

/// Under `mpirun` on one host: the n-th meeting of run `run_id` in Open MPI's session
/// directory `dir` ([`dtcomm::launch::mpi_session`], what the C ABI uses). Rank 0 passes its
/// store's `host:port` as `mine` and leaves it there; the others read it, waiting at most
/// `timeout` seconds (Ctrl-C stops the wait). Raises TimeoutError or RuntimeError naming the
/// rank.
#[pyfunction]
#[pyo3(signature = (dir, rank, run_id, n, mine, timeout))]
pub(crate) fn mpi_session_meet(
    py: Python<'_>,
    dir: String,
    rank: usize,
    run_id: String,
    n: u64,
    mine: Option<String>,
    timeout: f64,
) -> PyResult<String> {
    let wait = std::time::Duration::try_from_secs_f64(timeout)
        .map_err(|e| PyValueError::new_err(format!("timeout {timeout}: {e}")))?;
    let path = dtcomm::launch::mpi_session::endpoint_file(&dir, &run_id, n);
    if let Some(ep) = mine {
        dtcomm::launch::mpi_session::publish(&path, &ep)
            .map_err(pyo3::exceptions::PyRuntimeError::new_err)?;
        return Ok(ep);
    }
    let (r, raised) =
        crate::interrupt::detach(py, || dtcomm::launch::mpi_session::read(&path, rank, wait));
    if let Some(e) = raised {
        return Err(e);
    }
    r.map_err(pyo3::exceptions::PyTimeoutError::new_err)
}

/// Under an MPI launcher: the n-th meeting of run `run_id` through the process manager that
/// `endpoint` names (`mpi-pmix://...`: Open MPI's PMIx server; `mpi-pmi://...`: Hydra's PMI-1
/// socket; [`dtcomm::launch::mpi_hosts::meet`]). Rank 0 passes its store's `host:port` as
/// `mine`; every rank gets rank 0's. Raises TimeoutError when a rank does not arrive in time,
/// RuntimeError for the other failures, naming the rank.
#[pyfunction]
#[pyo3(signature = (endpoint, rank, run_id, n, mine, timeout))]
pub(crate) fn mpi_meet(
    py: Python<'_>,
    endpoint: String,
    rank: usize,
    run_id: String,
    n: u64,
    mine: Option<String>,
    timeout: f64,
) -> PyResult<String> {
    let wait = std::time::Duration::try_from_secs_f64(timeout)
        .map_err(|e| PyValueError::new_err(format!("timeout {timeout}: {e}")))?;
    py.detach(|| {
        dtcomm::launch::mpi_hosts::meet(&endpoint, rank, &run_id, n, mine.as_deref(), wait)
    })
    .map_err(|e| match e {
        MeetError::Timeout(m) => pyo3::exceptions::PyTimeoutError::new_err(m),
        MeetError::Failed(m) => pyo3::exceptions::PyRuntimeError::new_err(m),
    })
}

/// The address rank 0's store listens on when the ranks meet through PMIx: the one its data
/// plane advertises (`socket_ifname` in NCCL's syntax, else the first interface that is up
/// and not loopback).
#[pyfunction]
#[pyo3(signature = (socket_ifname=None))]
pub(crate) fn advertised_ip(socket_ifname: Option<String>) -> PyResult<String> {
    dtcomm::launch::mpi_hosts::advertised_ip(socket_ifname.as_deref())
        .map(|ip| ip.to_string())
        .map_err(pyo3::exceptions::PyRuntimeError::new_err)
}

/// The engine's set-up deadline in seconds as it resolves it (`DTCOMM_SETUP_TIMEOUT`, else
/// `timeout` when given, else `DTCOMM_TIMEOUT`, else 300): what a meeting before the engine's
/// own waits takes too. Raises ValueError naming a bad value.
#[pyfunction]
#[pyo3(signature = (timeout=None))]
pub(crate) fn engine_setup_timeout(timeout: Option<f64>) -> PyResult<f64> {
    let opts = crate::options::options(timeout, None, None, None, None)?;
    dtcomm::Config::resolve(&opts)
        .map(|c| c.setup_timeout.value.as_secs_f64())
        .map_err(PyValueError::new_err)
}
