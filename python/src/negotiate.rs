//! `dtcomm._dtcomm.Negotiator`: Horovod-style name-based negotiation and fusion
//! ([`dtcomm::negotiate`]) for the Horovod front end (`dtcomm.horovod.torch`). Buffers go in
//! and come out as `bytes`; operations are named by integer handles.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dtcomm::negotiate::{Handle, Kind, NegotiateError, Negotiator, Request};
use dtcomm::{DType, ReduceOp};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffer::{Access, Buf, Ctx};
use crate::comm::PyCommunicator;

/// The negotiator over one communicator (see `dtcomm::negotiate`).
#[pyclass(module = "dtcomm._dtcomm", name = "Negotiator")]
pub struct PyNegotiator {
    rank: usize,
    inner: Mutex<Option<Negotiator>>,
    handles: Mutex<HashMap<u64, Handle>>,
    next: AtomicU64,
}

fn kind(k: &str) -> PyResult<Kind> {
    Ok(match k {
        "allreduce" => Kind::Allreduce,
        "allgather" => Kind::Allgather,
        "broadcast" => Kind::Broadcast,
        "alltoall" => Kind::Alltoall,
        "reducescatter" => Kind::Reducescatter,
        "barrier" => Kind::Barrier,
        "join" => Kind::Join,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown operation {other:?}"
            )));
        }
    })
}

fn err(e: NegotiateError) -> PyErr {
    match e {
        NegotiateError::Duplicate(_) | NegotiateError::BadBuffer(_) => {
            PyValueError::new_err(e.to_string())
        }
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

#[pymethods]
impl PyNegotiator {
    /// Starts the cycle thread over `comm` (a cycle every `cycle_ms` milliseconds; allreduces
    /// fused up to `threshold` bytes, 0: none).
    #[new]
    fn new(comm: &PyCommunicator, cycle_ms: f64, threshold: u64) -> PyResult<Self> {
        let c = comm.shared("Negotiator")?;
        let cycle = Duration::from_secs_f64((cycle_ms.max(0.0)) / 1000.0);
        Ok(Self {
            rank: c.rank(),
            inner: Mutex::new(Some(Negotiator::start(c, cycle, threshold))),
            handles: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        })
    }

    /// Submits a named operation with this rank's data (`bytes`, or a contiguous torch tensor
    /// or numpy array, read in place and copied once); returns its handle. A duplicate pending
    /// name or a buffer of the wrong size raises ValueError.
    #[pyo3(signature = (name, kind, dtype, shape, data, *, root=None, op=None, prescale=1.0, postscale=1.0, splits=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        name: String,
        kind: &str,
        dtype: &str,
        shape: Vec<u64>,
        data: &Bound<'_, PyAny>,
        root: Option<u32>,
        op: Option<&str>,
        prescale: f64,
        postscale: f64,
        splits: Vec<u64>,
    ) -> PyResult<u64> {
        let dtype = DType::parse(dtype)
            .ok_or_else(|| PyValueError::new_err(format!("unsupported dtype {dtype:?}")))?;
        let data = match data.cast::<PyBytes>() {
            Ok(b) => b.as_bytes().to_vec(),
            Err(_) => {
                let ctx = Ctx {
                    rank: self.rank,
                    op: &name,
                    arg: "tensor",
                };
                Buf::extract(data, Access::Read, &ctx)?.as_bytes().to_vec()
            }
        };
        let op = op
            .map(|o| {
                ReduceOp::parse(o)
                    .ok_or_else(|| PyValueError::new_err(format!("unsupported reduction {o:?}")))
            })
            .transpose()?;
        let request = Request {
            name,
            kind: self::kind(kind)?,
            dtype,
            shape,
            root,
            op,
            prescale,
            postscale,
            device: -1,
            splits,
        };
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let n = guard
            .as_ref()
            .ok_or_else(|| PyRuntimeError::new_err("the negotiator was shut down"))?;
        let h = n.submit(request, data).map_err(err)?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, h);
        Ok(id)
    }

    /// Whether the operation has completed.
    fn poll(&self, handle: u64) -> PyResult<bool> {
        let hs = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        let h = hs
            .get(&handle)
            .ok_or_else(|| PyValueError::new_err(format!("unknown handle {handle}")))?;
        Ok(h.poll())
    }

    /// Waits for the operation (without the GIL) and returns its result bytes, per-rank
    /// element counts (allgather: from each rank; alltoall: received from each rank; else
    /// empty) and its times (Unix µs: submitted, negotiated, done); raises RuntimeError if it failed (a mismatch between ranks, a failed
    /// communicator).
    #[allow(clippy::type_complexity)]
    fn wait<'py>(
        &self,
        py: Python<'py>,
        handle: u64,
    ) -> PyResult<(Bound<'py, PyBytes>, Vec<u64>, [u64; 3])> {
        let h = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&handle)
            .ok_or_else(|| PyValueError::new_err(format!("unknown handle {handle}")))?;
        let out = py.detach(|| h.take()).map_err(err)?;
        Ok((PyBytes::new(py, &out.data), out.counts, out.times))
    }

    /// Starts (or stops) recording when each cycle starts (a timeline's cycle marks).
    fn mark_cycles(&self, on: bool) {
        if let Some(n) = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            n.mark_cycles(on);
        }
    }

    /// The cycle start times (Unix µs) recorded since the last call, and how many were
    /// dropped because nobody took them.
    fn take_cycle_marks(&self) -> (Vec<u64>, u64) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(Negotiator::take_cycle_marks)
            .unwrap_or_default()
    }

    /// Stops the cycle thread once every rank has called it.
    fn shutdown(&self, py: Python<'_>) {
        let n = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(n) = n {
            py.detach(move || n.shutdown());
        }
    }
}
