//! `DataListener`: the data socket a member binds before joining a native job; its address
//! goes in the join, and every round's communicator is built over it.

use pyo3::prelude::*;

/// A data listener bound before joining a native job: its `addr` goes in `NativeClient.join`'s
/// `addrs`, and `Communicator.from_welcome` builds every round's communicator over it. Options left as None resolve from
/// their `DTCOMM_*` twins (`socket_ifname` picks the interface).
#[pyclass(module = "dtcomm._dtcomm", name = "DataListener")]
pub struct PyDataListener {
    pub(crate) inner: dtcomm::DataListener,
    addr: String,
}

#[pymethods]
impl PyDataListener {
    #[new]
    #[pyo3(signature = (*, timeout=None, algo=None, socket_ifname=None, nsocks_perpeer=None))]
    fn new(
        py: Python<'_>,
        timeout: Option<f64>,
        algo: Option<&str>,
        socket_ifname: Option<String>,
        nsocks_perpeer: Option<usize>,
    ) -> PyResult<Self> {
        let opts = crate::options::options(timeout, algo, socket_ifname, nsocks_perpeer, None)?;
        let l = py
            .detach(move || dtcomm::DataListener::bind(&opts))
            .map_err(crate::errors::to_py)?;
        let addr = l.addr().to_string();
        Ok(PyDataListener { inner: l, addr })
    }

    /// `ip:port` peers connect to.
    #[getter]
    fn addr(&self) -> &str {
        &self.addr
    }

    /// What this process advertises about its host beside `addr` (`NativeClient.join`'s
    /// `host`): peers with an equal host part share memory with it.
    #[getter]
    fn host_record<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, &self.inner.host_record())
    }

    fn __repr__(&self) -> String {
        format!("DataListener({})", self.addr)
    }
}
