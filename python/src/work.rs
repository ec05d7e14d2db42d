//! `dtcomm._dtcomm.Work`: the Python face of the engine's one [`dtcomm::Work`]. The engine's
//! executor keeps the call's buffers (their exports) alive until the call finished; this
//! object only waits and reports.

use std::time::Duration;

use pyo3::prelude::*;

use crate::errors::to_py;

/// The handle of an asynchronous call: `wait(timeout=None)` blocks (without the GIL) until it
/// is done and raises its error; `is_completed()` never blocks and is true from the moment the
/// call finished.
#[pyclass(module = "dtcomm._dtcomm", name = "Work")]
pub struct Work {
    work: dtcomm::Work,
    buffers: usize,
    source: Option<dtcomm::Source>,
}

impl Work {
    pub(crate) fn new(work: dtcomm::Work, buffers: usize) -> Work {
        Work {
            work,
            buffers,
            source: None,
        }
    }

    /// A receive from any source's `Work`, which reports its sender.
    pub(crate) fn with_source(mut self, source: dtcomm::Source) -> Work {
        self.source = Some(source);
        self
    }
}

#[pymethods]
impl Work {
    /// Waits for the call; raises its error, or `CommTimeoutError` after `timeout` seconds
    /// (default: the deadlines of this call and of those queued before it). Returns True.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let w = &self.work;
        let limit = match timeout {
            Some(t) if t.is_finite() && t > 0.0 => Duration::from_secs_f64(t),
            _ => w.default_wait(),
        };
        // Interruptible: a signal handler's exception (Ctrl-C) ends the wait and the call.
        let r = crate::interrupt::wait_work(py, w, limit, Duration::from_secs(2))?.unwrap_or_else(
            || {
                Err(dtcomm::CommError::WaitTimeout {
                    rank: w.rank(),
                    op: w.op(),
                    waited: limit,
                })
            },
        );
        r.map(|()| true).map_err(to_py)
    }

    /// Whether the call has finished (successfully or not).
    fn is_completed(&self) -> bool {
        self.work.test()
    }

    /// The call's error as an exception object, None while running or after success.
    fn exception(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        match self.work.result() {
            Some(Err(e)) => Some(to_py(e).into_value(py).into_any()),
            _ => None,
        }
    }

    /// For a receive from any source (`recv_any`): the sender's rank once the call completed
    /// (None before, and for every other call).
    #[getter]
    fn source(&self) -> Option<usize> {
        self.source.as_ref().and_then(dtcomm::Source::get)
    }

    /// The collective's name.
    #[getter]
    fn op(&self) -> &'static str {
        self.work.op()
    }

    fn __repr__(&self) -> String {
        let state = match self.work.result() {
            None => "running",
            Some(Ok(())) => "done",
            Some(Err(_)) => "failed",
        };
        format!(
            "<dtcomm Work {} rank {} {state}, {} buffer(s)>",
            self.work.op(),
            self.work.rank(),
            self.buffers
        )
    }
}
