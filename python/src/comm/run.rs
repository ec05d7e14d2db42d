//! Running a built [`Call`] over exported buffers: at once without the GIL (a signal handler's
//! exception interrupts the wait), or, with `async_op=True` or a callback, submitted to the
//! engine's executor, the buffers kept alive until the call finished, and returned as a
//! [`Work`].

use std::sync::Arc;

use dtcomm::{Call, CommError, OnDone};
use pyo3::prelude::*;

use super::communicator::PyCommunicator;
use crate::buffer::Buf;
use crate::errors::to_py;
use crate::work::Work;

impl PyCommunicator {
    /// Runs `call` now (without the GIL), or submits it when `async_op` or a `callback` is
    /// given. `bufs` are the exports `call` points into: they live until the call finished.
    pub(super) fn go(
        &self,
        py: Python<'_>,
        call: Call,
        bufs: Vec<Arc<Buf>>,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let comm = self.comm(call.collective.name())?;
        if async_op || callback.is_some() {
            let on_done = callback.map(|cb| -> OnDone {
                Box::new(move |r: &Result<(), CommError>| {
                    Python::attach(|py| {
                        let arg = match r {
                            Ok(()) => py.None(),
                            Err(e) => to_py(e.clone()).into_value(py).into_any(),
                        };
                        if let Err(e) = cb.call1(py, (arg,)) {
                            e.write_unraisable(py, Some(cb.bind(py)));
                        }
                    })
                })
            });
            let n = bufs.len();
            let device = [call.send.as_ref(), call.recv.as_ref()]
                .into_iter()
                .flatten()
                .any(|b| b.memory() != dtcomm::Memory::Host);
            let keep: Box<dyn std::any::Any + Send> = Box::new(bufs);
            // SAFETY: every buffer of `call` came from `Buf::raw` on one of the exports in `bufs`
            // (the methods build a call only from the `Buf`s they pass here), each extracted with
            // the access the call needs (writable for outputs), host or device memory as `raw`
            // says. `keep` hands `bufs` to the engine, which drops it only after the call finished,
            // so the memory stays alive, and for numpy unresizable, as long as `submit_with`
            // requires. That nothing else writes it (or, for outputs, reads it) meanwhile is the
            // Python API's contract, as torch.distributed's: a buffer given to a collective is left
            // alone until the call, or its `Work`, finished.
            let submit = move || unsafe { comm.submit_with(call, Some(keep), on_done) };
            // A device call starts on this thread (it may wait for host calls queued before
            // it, whose callbacks take the GIL): without the GIL.
            let work = if device { py.detach(submit) } else { submit() };
            return Ok(Some(Work::new(work, n)));
        }
        // SAFETY: as for `submit_with` above, with `bufs` held on this thread until `run` returned
        // (it is dropped just below); the caller is blocked in this call, so only other Python
        // threads could touch the buffers, which the same contract rules out.
        let (r, raised) = crate::interrupt::detach(py, || unsafe { comm.run(&call) });
        drop(bufs);
        if let Some(e) = raised {
            // A signal handler raised while the call waited: the call failed (Interrupted), the
            // peers were told; the caller gets the handler's exception.
            return Err(e);
        }
        r.map_err(to_py)?;
        Ok(None)
    }
}
