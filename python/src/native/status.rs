//! A job's status as the operator sees it (`NativeClient.status`): one dict per job, its
//! members a list of dicts.

use dt_rdzv_proto::native::{JobStatus, Role};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

pub(super) fn status_dict<'py>(py: Python<'py>, j: &JobStatus) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("job", &j.job)?;
    d.set_item("state", &j.state)?;
    d.set_item("round", j.round)?;
    d.set_item("world", j.world)?;
    d.set_item("min_members", j.spec.min_members)?;
    d.set_item("max_members", j.spec.max_members)?;
    d.set_item("restarts", j.restarts)?;
    d.set_item("age", j.age_ms as f64 / 1000.0)?;
    d.set_item("missing", j.missing.clone())?;
    d.set_item("config_keys", j.config_keys.clone())?;
    let members = PyList::empty(py);
    for m in &j.members {
        let md = PyDict::new(py);
        md.set_item("member", &m.member)?;
        md.set_item("node", &m.node)?;
        md.set_item("state", &m.state)?;
        md.set_item("rank", m.rank)?;
        md.set_item("main", m.role == Role::Main)?;
        md.set_item("last_seen", m.last_seen_ms as f64 / 1000.0)?;
        md.set_item("addrs", m.addrs.clone())?;
        md.set_item("observed_ip", &m.observed_ip)?;
        members.append(md)?;
    }
    d.set_item("members", members)?;
    Ok(d)
}
