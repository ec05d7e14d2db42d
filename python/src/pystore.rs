//! A [`Store`] over a Python store object with torch's `c10d.Store` methods (the store torch
//! hands a backend's creator: a `PrefixStore` over a `TCPStore`, `FileStore`, `HashStore`).
//! Every call takes the GIL; torch's store methods release it while they block.

use std::time::Duration;

use dt_rdzv::store::{Store, StoreError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

/// A Python store object used from Rust.
pub(crate) struct PyStore {
    obj: Py<PyAny>,
}

impl PyStore {
    pub(crate) fn new(obj: Py<PyAny>) -> PyStore {
        PyStore { obj }
    }
}

fn err(op: &'static str, e: PyErr) -> StoreError {
    StoreError::Protocol {
        endpoint: "python store".into(),
        op,
        detail: e.to_string(),
    }
}

fn timedelta(py: Python<'_>, d: Duration) -> PyResult<Bound<'_, PyAny>> {
    py.import("datetime")?
        .getattr("timedelta")?
        .call1((0, d.as_secs_f64()))
}

fn bytes_of(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    v.extract::<Vec<u8>>()
}

impl Store for PyStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        Python::attach(|py| {
            self.obj
                .call_method1(py, "set", (key, PyBytes::new(py, value)))
                .map(drop)
                .map_err(|e| err("set", e))
        })
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        self.wait(&[key], timeout)?;
        Python::attach(|py| {
            let v = self
                .obj
                .call_method1(py, "get", (key,))
                .map_err(|e| err("get", e))?;
            bytes_of(v.bind(py)).map_err(|e| err("get", e))
        })
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        Python::attach(|py| {
            self.obj
                .call_method1(py, "add", (key, delta))
                .and_then(|v| v.extract::<i64>(py))
                .map_err(|e| err("add", e))
        })
    }

    fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        Python::attach(|py| {
            let v = self
                .obj
                .call_method1(
                    py,
                    "compare_set",
                    (key, PyBytes::new(py, expected), PyBytes::new(py, desired)),
                )
                .map_err(|e| err("compare_set", e))?;
            bytes_of(v.bind(py)).map_err(|e| err("compare_set", e))
        })
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        Python::attach(|py| {
            let list = PyList::new(py, keys).map_err(|e| err("wait", e))?;
            let td = timedelta(py, timeout).map_err(|e| err("wait", e))?;
            match self.obj.call_method1(py, "wait", (list, td)) {
                Ok(_) => Ok(()),
                Err(e) => {
                    let text = e.to_string();
                    if text.to_ascii_lowercase().contains("timeout")
                        || text.to_ascii_lowercase().contains("timed out")
                    {
                        let missing = keys
                            .iter()
                            .filter(|k| !self.check(&[k]).unwrap_or(false))
                            .map(|k| k.to_string())
                            .collect();
                        Err(StoreError::Timeout {
                            op: "wait",
                            missing,
                            waited: timeout,
                        })
                    } else {
                        Err(err("wait", e))
                    }
                }
            }
        })
    }

    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        Python::attach(|py| {
            let list = PyList::new(py, keys).map_err(|e| err("check", e))?;
            self.obj
                .call_method1(py, "check", (list,))
                .and_then(|v| v.extract::<bool>(py))
                .map_err(|e| err("check", e))
        })
    }

    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        Python::attach(|py| {
            self.obj
                .call_method1(py, "delete_key", (key,))
                .and_then(|v| v.extract::<bool>(py))
                .map_err(|e| err("delete_key", e))
        })
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        Python::attach(|py| {
            self.obj
                .call_method1(py, "append", (key, PyBytes::new(py, value)))
                .map(drop)
                .map_err(|e| err("append", e))
        })
    }

    fn num_keys(&self) -> Result<i64, StoreError> {
        Python::attach(|py| {
            self.obj
                .call_method0(py, "num_keys")
                .and_then(|v| v.extract::<i64>(py))
                .map_err(|e| err("num_keys", e))
        })
    }
}
