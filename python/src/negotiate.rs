//! `dtcomm._dtcomm.Negotiator`: Horovod-style name-based negotiation and fusion
//! ([`dtcomm::negotiate`]) for the Horovod front end (`dtcomm.horovod.torch`). Buffers go in
//! as `bytes` or tensors (copied once, or lent in place) and results come out as `bytes` (or
//! stay in the lent tensor); operations are named by integer handles.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dtcomm::negotiate::{Handle, InPlace, Kind, NegotiateError, Negotiator, Payload, Request};
use dtcomm::{DType, ReduceOp};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffer::{Access, Buf};
use crate::comm::PyCommunicator;
use crate::errors::Ctx;

/// The negotiator over one communicator (see `dtcomm::negotiate`).
#[pyclass(module = "dtcomm._dtcomm", name = "Negotiator")]
pub struct PyNegotiator {
    rank: usize,
    // (declared before `handles`, so dropped first: its thread is joined before the in-place
    // buffers it may still be using are released)
    inner: Mutex<Option<Negotiator>>,
    /// Each pending operation, with the export of the caller's memory it works in place (kept
    /// until the operation is waited for, or the negotiator is gone).
    handles: Mutex<HashMap<u64, (Handle, Option<Buf>)>>,
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
    /// or numpy array, read in place and copied once); returns its handle. `in_place`: the
    /// operation works in `data`'s own memory, with no copy (an allreduce or broadcast leaves
    /// its result there and `wait` returns empty bytes); the caller must not touch `data`
    /// until `wait` returns. A duplicate pending name or a buffer of the wrong size raises
    /// ValueError.
    #[pyo3(signature = (name, kind, dtype, shape, data, *, root=None, op=None, prescale=1.0, postscale=1.0, splits=Vec::new(), in_place=false))]
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
        in_place: bool,
    ) -> PyResult<u64> {
        let dtype = DType::parse(dtype)
            .ok_or_else(|| PyValueError::new_err(format!("unsupported dtype {dtype:?}")))?;
        let ctx = Ctx {
            rank: self.rank,
            op: &name,
            arg: "tensor",
        };
        let (data, lent) = if in_place {
            let buf = Buf::extract(data, Access::Write, &ctx)?.host_only(&ctx)?;
            // The export's own pointer (writable: extracted with `Access::Write`), not one
            // derived from a shared `&[u8]`, which the negotiator could not write through.
            let raw = buf.raw();
            let len = buf.count * buf.dtype.size();
            // SAFETY: `raw` points at `len` bytes of host memory (`host_only`) that the export
            // in `buf` keeps alive and writable: a writable buffer-protocol export or a DLPack
            // tensor. `buf` is stored with the handle below and dropped only once the
            // operation completed (`wait`), or after the negotiator's thread was joined (the
            // field order of `PyNegotiator`; a refused submission never used the memory). The
            // caller promises not to touch the memory meanwhile (Horovod's rule for in-place
            // operations), so the negotiator's use is exclusive, as `InPlace::new` requires.
            let lend = unsafe { InPlace::new(raw.ptr(), len) };
            (Payload::InPlace(lend), Some(buf))
        } else {
            let owned = match data.cast::<PyBytes>() {
                Ok(b) => b.as_bytes().to_vec(),
                Err(_) => Buf::extract(data, Access::Read, &ctx)?
                    .host_only(&ctx)?
                    .as_bytes()
                    .to_vec(),
            };
            (Payload::Owned(owned), None)
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
            .insert(id, (h, lent));
        Ok(id)
    }

    /// Whether the operation has completed.
    fn poll(&self, handle: u64) -> PyResult<bool> {
        let hs = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        let h = hs
            .get(&handle)
            .ok_or_else(|| PyValueError::new_err(format!("unknown handle {handle}")))?;
        Ok(h.0.poll())
    }

    /// Waits for the operation (without the GIL) and returns its result bytes (empty for an
    /// in-place allreduce or broadcast: the result is in the submitted tensor), per-rank
    /// element counts (allgather: from each rank; alltoall: received from each rank; else
    /// empty) and its times (Unix µs: submitted, negotiated, done); raises RuntimeError if it
    /// failed (a mismatch between ranks, a failed communicator).
    #[allow(clippy::type_complexity)]
    fn wait<'py>(
        &self,
        py: Python<'py>,
        handle: u64,
    ) -> PyResult<(Bound<'py, PyBytes>, Vec<u64>, [u64; 3])> {
        let (h, lent) = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&handle)
            .ok_or_else(|| PyValueError::new_err(format!("unknown handle {handle}")))?;
        // In slices, running pending signal handlers between them: Ctrl-C ends the wait at
        // once. The operation stays pending (its memory stays lent) and may be waited again.
        while !py.detach(|| h.wait_done(crate::interrupt::EVERY)) {
            if let Err(e) = py.check_signals() {
                self.handles
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(handle, (h, lent));
                return Err(e);
            }
        }
        let out = py.detach(|| h.take());
        // Completed (or failed): the negotiator is done with the lent memory.
        drop(lent);
        let out = out.map_err(err)?;
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

    /// Who ended this negotiation: another rank, or this one (`shutdown()` ran); None while it
    /// runs.
    fn ended_by(&self) -> Option<String> {
        match self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(n) => n.ended_by(),
            None => Some("this rank".into()),
        }
    }

    /// Stops the cycle thread, and every rank's in the same cycle.
    fn shutdown(&self, py: Python<'_>) {
        let n = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(n) = n {
            py.detach(move || n.shutdown());
        }
    }
}
