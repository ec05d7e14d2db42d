//! Ordering of synchronous and asynchronous calls on one communicator, and the [`Work`]
//! handle of an asynchronous call.
//!
//! Asynchronous calls run on one worker thread per communicator, in submission order, on the
//! caller's own memory (zero copy: the [`Work`] keeps the buffers exported until it is done).
//! A synchronous call runs on the caller's thread, with the GIL released, after every
//! asynchronous call submitted before it has finished, so every rank sees the same order.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Sender};
use dtcomm::{CommError, Communicator};
use pyo3::prelude::*;

use crate::buffer::Buf;
use crate::errors::{CommTimeoutError, ShutdownError, to_py};

type Job = Box<dyn FnOnce() + Send>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Completion of one asynchronous call.
pub(crate) struct Done {
    result: Mutex<Option<Result<(), CommError>>>,
    cv: Condvar,
}

impl Done {
    fn new() -> Arc<Done> {
        Arc::new(Done {
            result: Mutex::new(None),
            cv: Condvar::new(),
        })
    }
    fn set(&self, r: Result<(), CommError>) {
        *lock(&self.result) = Some(r);
        self.cv.notify_all();
    }
}

/// The calls of one communicator: the engine, the count of asynchronous calls in flight and
/// the worker thread that runs them.
pub(crate) struct Exec {
    pub comm: Arc<Communicator>,
    pending: Arc<(Mutex<usize>, Condvar)>,
    tx: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    timeout: Duration,
}

impl Exec {
    pub(crate) fn new(comm: Communicator) -> Exec {
        let timeout = comm.config().timeout.value;
        Exec {
            comm: Arc::new(comm),
            pending: Arc::new((Mutex::new(0), Condvar::new())),
            tx: Mutex::new(None),
            thread: Mutex::new(None),
            timeout,
        }
    }

    /// Waits until every asynchronous call submitted so far has finished. Bounded: each of
    /// them has the engine's deadline.
    fn drain(&self) -> Result<(), CommError> {
        let (m, cv) = &*self.pending;
        let mut n = lock(m);
        let start = Instant::now();
        while *n > 0 {
            let limit = self.timeout * (*n as u32 + 1);
            if start.elapsed() > limit {
                return Err(CommError::Setup {
                    rank: self.comm.rank(),
                    elapsed: start.elapsed(),
                    detail: format!(
                        "{} earlier asynchronous call(s) did not finish within their deadlines",
                        *n
                    ),
                });
            }
            n = cv
                .wait_timeout(n, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }

    /// Runs `f` now on this thread, without the GIL, after the asynchronous calls before it.
    pub(crate) fn run<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Communicator) -> Result<R, CommError> + Send,
    ) -> PyResult<R> {
        let comm = &self.comm;
        py.detach(|| {
            self.drain()?;
            f(comm)
        })
        .map_err(to_py)
    }

    /// Queues `f` for the worker thread; `callback(None | exception)` runs (with the GIL, on
    /// the worker thread) once it finished.
    pub(crate) fn submit(
        &self,
        op: &'static str,
        bufs: Vec<Arc<Buf>>,
        callback: Option<Py<PyAny>>,
        f: impl FnOnce(&Communicator) -> Result<(), CommError> + Send + 'static,
    ) -> PyResult<Work> {
        let done = Done::new();
        let mut tx = lock(&self.tx);
        if tx.is_none() {
            let (s, r) = channel::unbounded::<Job>();
            let name = format!("dtcomm-py-{}", self.comm.rank());
            let t = std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    while let Ok(job) = r.recv() {
                        job();
                    }
                })
                .map_err(|e| ShutdownError::new_err(format!("spawning the worker: {e}")))?;
            *tx = Some(s);
            *lock(&self.thread) = Some(t);
        }
        let sender = tx.as_ref().expect("worker started above");
        *lock(&self.pending.0) += 1;
        let (comm, pending, d) = (self.comm.clone(), self.pending.clone(), done.clone());
        let held = bufs.clone();
        let job: Job = Box::new(move || {
            let r = f(&comm);
            drop(held);
            let err = r.as_ref().err().cloned();
            d.set(r);
            {
                let (m, cv) = &*pending;
                *lock(m) -= 1;
                cv.notify_all();
            }
            if let Some(cb) = callback {
                Python::attach(|py| {
                    let arg = match err {
                        None => py.None(),
                        Some(e) => to_py(e).into_value(py).into_any(),
                    };
                    if let Err(e) = cb.call1(py, (arg,)) {
                        e.write_unraisable(py, Some(cb.bind(py)));
                    }
                });
            }
        });
        if sender.send(job).is_err() {
            *lock(&self.pending.0) -= 1;
            return Err(ShutdownError::new_err("the dtcomm worker thread is gone"));
        }
        Ok(Work {
            done,
            bufs,
            op,
            rank: self.comm.rank(),
            default_wait: self.timeout * 2,
        })
    }

    /// Finishes queued calls and stops the worker thread (without the GIL).
    pub(crate) fn stop(&self, py: Python<'_>) {
        let tx = lock(&self.tx).take();
        let t = lock(&self.thread).take();
        drop(tx);
        if let Some(t) = t {
            py.detach(|| {
                let _ = t.join();
            });
        }
    }
}

/// The handle of an asynchronous call: `wait(timeout=None)` blocks (without the GIL) until it
/// is done and raises its error; `is_completed()` never blocks. The buffers the call works on
/// stay exported until the handle is dropped.
#[pyclass(module = "dtcomm._dtcomm", name = "Work")]
pub struct Work {
    done: Arc<Done>,
    bufs: Vec<Arc<Buf>>,
    op: &'static str,
    rank: usize,
    default_wait: Duration,
}

#[pymethods]
impl Work {
    /// Waits for the call; raises its error, or `CommTimeoutError` after `timeout` seconds
    /// (default: twice the communicator's deadline). Returns True.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let limit = match timeout {
            Some(t) if t.is_finite() && t > 0.0 => Duration::from_secs_f64(t),
            Some(t) if t <= 0.0 => self.default_wait,
            _ => self.default_wait,
        };
        let done = self.done.clone();
        let r = py.detach(move || {
            let start = Instant::now();
            let mut g = lock(&done.result);
            while g.is_none() {
                let left = limit.saturating_sub(start.elapsed());
                if left.is_zero() {
                    return None;
                }
                g = done
                    .cv
                    .wait_timeout(g, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            g.clone()
        });
        match r {
            None => Err(CommTimeoutError::new_err(format!(
                "rank {}: {} did not complete within {:?} (Work.wait timeout)",
                self.rank, self.op, limit
            ))),
            Some(Ok(())) => Ok(true),
            Some(Err(e)) => Err(to_py(e)),
        }
    }

    /// Whether the call has finished (successfully or not).
    fn is_completed(&self) -> bool {
        lock(&self.done.result).is_some()
    }

    /// The call's error as an exception object, None while running or after success.
    fn exception(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        match &*lock(&self.done.result) {
            Some(Err(e)) => Some(to_py(e.clone()).into_value(py).into_any()),
            _ => None,
        }
    }

    /// The collective's name.
    #[getter]
    fn op(&self) -> &'static str {
        self.op
    }

    fn __repr__(&self) -> String {
        let state = match &*lock(&self.done.result) {
            None => "running",
            Some(Ok(())) => "done",
            Some(Err(_)) => "failed",
        };
        format!(
            "<dtcomm Work {} rank {} {state}, {} buffer(s)>",
            self.op,
            self.rank,
            self.bufs.len()
        )
    }
}
