//! `dtcomm._dtcomm.resolve_launch`: the engine's launcher-environment resolver
//! ([`dtcomm_launch`], what the C ABI's `dtcomm_comm_init` uses), so that the tests can hold it
//! to the same answers as Python's `dtcomm._config.resolve`.

use std::collections::HashMap;

use dtcomm_launch::native::{NativeExplicit, NativeSettings};
use dtcomm_launch::{Explicit, Sourced, resolve};
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
/// ([`dtcomm_launch::slurm::step`]): a dict (`rank`, `world`, `local_rank`, `local_size`,
/// `node`, `nodes`, `first_host`, `port`, `run_id`), or None outside `srun`. Raises
/// ValueError naming the variables when they disagree.
#[pyfunction]
pub(crate) fn slurm_step<'py>(
    py: Python<'py>,
    env: HashMap<String, String>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(st) =
        dtcomm_launch::slurm::step(&|k| env.get(k).cloned()).map_err(PyValueError::new_err)?
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
/// end does ([`dtcomm_launch::native::NativeSettings::resolve`]): a dict of `name: (value,
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

/// Whether `endpoint` speaks dt-rdzv's native protocol by the launch rules
/// ([`dtcomm_launch::is_native`], from `env`): `(bool, source)`. Raises ValueError naming a
/// bad `DTCOMM_RDZV_BACKEND` or endpoint.
#[pyfunction]
pub(crate) fn is_native(env: HashMap<String, String>, endpoint: &str) -> PyResult<(bool, String)> {
    let v = dtcomm_launch::is_native(&|k| env.get(k).cloned(), endpoint)
        .map_err(PyValueError::new_err)?;
    Ok((v.value, v.source))
}

/// `N` or `MIN:MAX` members as `(min, max)` ([`dtcomm_launch::native::parse_members`]);
/// ValueError naming `var`.
#[pyfunction]
pub(crate) fn parse_members(text: &str, var: &str) -> PyResult<(u32, u32)> {
    dtcomm_launch::native::parse_members(text, var).map_err(PyValueError::new_err)
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
