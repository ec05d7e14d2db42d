//! The rendezvous side for Python: an in-process `dt-rdzv` server (`dtrun`'s embedded one, and
//! a rank 0 that hosts the store the way torch's does) and a blocking store client.

use std::net::IpAddr;
use std::time::Duration;

use dt_rdzv::client::TcpStoreClient;
use dt_rdzv::server::{BackgroundServer, ServeConfig};
use dt_rdzv::store::Store;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{CommTimeoutError, SetupError};

/// A `dt-rdzv` server on background threads of this process; stops on `stop()` or when
/// garbage-collected.
#[pyclass(module = "dtcomm._dtcomm", name = "RdzvServer")]
pub struct RdzvServer {
    inner: Option<BackgroundServer>,
    endpoint: String,
    port: u16,
}

#[pymethods]
impl RdzvServer {
    /// Binds `host:port` (port 0 picks a free one) and starts serving.
    #[new]
    #[pyo3(signature = (host="127.0.0.1", port=0))]
    fn new(py: Python<'_>, host: &str, port: u16) -> PyResult<Self> {
        let ip: IpAddr = host
            .parse()
            .map_err(|e| PyValueError::new_err(format!("rendezvous host {host:?}: {e}")))?;
        let cfg = ServeConfig::embedded_store(ip, port);
        let server = py
            .detach(move || BackgroundServer::start(cfg))
            .map_err(|e| {
                PyOSError::new_err(format!("dt-rdzv cannot listen on {host}:{port}: {e}"))
            })?;
        let addr = server.addr();
        Ok(RdzvServer {
            endpoint: server.endpoint(),
            port: addr.port(),
            inner: Some(server),
        })
    }

    /// `host:port` for clients.
    #[getter]
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The bound port.
    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// Stops serving and closes every connection.
    fn stop(&mut self, py: Python<'_>) {
        if let Some(s) = self.inner.take() {
            py.detach(move || drop(s));
        }
    }
}

impl RdzvServer {
    /// The server a join started for this process (rank 0's store, a meeting's).
    pub(crate) fn hosting(server: BackgroundServer) -> RdzvServer {
        RdzvServer {
            endpoint: server.endpoint(),
            port: server.addr().port(),
            inner: Some(server),
        }
    }
}

/// A blocking client of a TCPStore server (`dt-rdzv serve` or torch's), every wait bounded.
#[pyclass(module = "dtcomm._dtcomm", name = "StoreClient")]
pub struct StoreClient {
    client: TcpStoreClient,
    timeout: Duration,
}

fn store_err(e: dt_rdzv::store::StoreError) -> PyErr {
    match e {
        dt_rdzv::store::StoreError::Timeout { .. } => CommTimeoutError::new_err(e.to_string()),
        e => SetupError::new_err(e.to_string()),
    }
}

#[pymethods]
impl StoreClient {
    /// Connects to `endpoint` (`host:port`), retrying for `timeout` seconds.
    #[new]
    #[pyo3(signature = (endpoint, timeout=60.0))]
    fn new(py: Python<'_>, endpoint: String, timeout: f64) -> PyResult<Self> {
        let t = dtcomm::secs::saturating(timeout).max(Duration::from_millis(1));
        let client = py
            .detach(move || TcpStoreClient::connect(&endpoint, t))
            .map_err(store_err)?;
        Ok(StoreClient { client, timeout: t })
    }

    /// Sets `key`.
    fn set(&self, py: Python<'_>, key: &str, value: &[u8]) -> PyResult<()> {
        py.detach(|| self.client.set(key, value)).map_err(store_err)
    }

    /// The value of `key`, waiting up to `timeout` seconds (default: the connect timeout).
    #[pyo3(signature = (key, timeout=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let t = timeout.map_or(self.timeout, dtcomm::secs::saturating);
        let v = py.detach(|| self.client.get(key, t)).map_err(store_err)?;
        Ok(PyBytes::new(py, &v))
    }

    /// Adds `delta` to the counter at `key`; returns the new value.
    fn add(&self, py: Python<'_>, key: &str, delta: i64) -> PyResult<i64> {
        py.detach(|| self.client.add(key, delta)).map_err(store_err)
    }

    /// Waits until every key exists, up to `timeout` seconds.
    #[pyo3(signature = (keys, timeout=None))]
    fn wait(&self, py: Python<'_>, keys: Vec<String>, timeout: Option<f64>) -> PyResult<()> {
        let t = timeout.map_or(self.timeout, dtcomm::secs::saturating);
        let k: Vec<&str> = keys.iter().map(String::as_str).collect();
        py.detach(|| self.client.wait(&k, t)).map_err(store_err)
    }

    /// Whether every key exists now.
    fn check(&self, py: Python<'_>, keys: Vec<String>) -> PyResult<bool> {
        let k: Vec<&str> = keys.iter().map(String::as_str).collect();
        py.detach(|| self.client.check(&k)).map_err(store_err)
    }

    /// Deletes `key`; True if it existed.
    fn delete_key(&self, py: Python<'_>, key: &str) -> PyResult<bool> {
        py.detach(|| self.client.delete_key(key)).map_err(store_err)
    }
}
