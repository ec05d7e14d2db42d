//! `dtcomm._dtcomm.NativeMember`: one member of a native job, the engine's
//! (`dtcomm_launch::native::Member`), for Python's `dtcomm._native.Member` (which `dtcomm.init`,
//! elastic training, `dtrun` and the torchrun handler use): one join path for every front end.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use dtcomm_launch::native::{JoinError, Member, NativeExplicit, NativeSettings, Stop};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::comm::PyCommunicator;
use crate::errors::{RdzvJobEndedError, RdzvLostError, RdzvRoundChangedError, RdzvTimeoutError};
use crate::native::{PyDataListener, PyWelcome, to_py, with_attrs};

fn err(py: Python<'_>, e: JoinError) -> PyErr {
    let msg = e.to_string();
    match e {
        JoinError::Rdzv { who, source } => to_py(py, &format!("{who}: "), source),
        JoinError::RoundChanged(m) => RdzvRoundChangedError::new_err(m),
        JoinError::Timeout(m) => RdzvTimeoutError::new_err(m),
        JoinError::Interrupted(m) => pyo3::exceptions::PyKeyboardInterrupt::new_err(m),
        JoinError::Stopped {
            stop: Stop::JobEnded { job, why, how },
            ..
        } => {
            let attr = |v: String| v.into_pyobject(py).map(|o| o.into_any().unbind());
            match (attr(job), attr(how), attr(why)) {
                (Ok(j), Ok(h), Ok(w)) => with_attrs(
                    py,
                    RdzvJobEndedError::new_err(msg),
                    &[("job", j), ("how", h), ("end", w)],
                ),
                _ => RdzvJobEndedError::new_err(msg),
            }
        }
        JoinError::Stopped {
            stop: Stop::Removed { .. },
            ..
        } => RdzvLostError::new_err(msg),
        JoinError::Comm(c) => crate::errors::to_py(c),
    }
}

fn dur(what: &str, secs: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(secs)
        .map_err(|e| PyValueError::new_err(format!("{what}={secs}: {e}")))
}

/// See the module docs. Settings resolve as `dtcomm._native.settings` does.
#[pyclass(module = "dtcomm._dtcomm", name = "NativeMember")]
pub struct PyNativeMember {
    inner: Mutex<Option<Member>>,
}

impl PyNativeMember {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Member) -> Result<T, JoinError> + Send,
    ) -> PyResult<T> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let m = guard
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("this member left its job"))?;
        // Interruptible: a signal handler's exception (KeyboardInterrupt) ends the wait and
        // is what the caller gets.
        let (r, raised) = crate::interrupt::detach(py, || f(m));
        if let Some(e) = raised {
            return Err(e);
        }
        r.map_err(|e| err(py, e))
    }

    fn read<T>(&self, f: impl FnOnce(&Member) -> T) -> PyResult<T> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .map(f)
            .ok_or_else(|| PyRuntimeError::new_err("this member left its job"))
    }
}

#[pymethods]
impl PyNativeMember {
    /// Connects and joins (the round may still be forming), advertising `listener`'s address.
    #[new]
    #[pyo3(signature = (env, listener=None, *, endpoint=None, job=None, members=None,
                        token=None, fingerprint=None, cacert=None, store=None, last_call=None,
                        join_timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        env: HashMap<String, String>,
        listener: Option<&Bound<'_, PyDataListener>>,
        endpoint: Option<String>,
        job: Option<String>,
        members: Option<(u32, u32)>,
        token: Option<String>,
        fingerprint: Option<String>,
        cacert: Option<String>,
        store: Option<String>,
        last_call: Option<f64>,
        join_timeout: Option<f64>,
    ) -> PyResult<Self> {
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
        let settings = NativeSettings::resolve(&ex, &|k| env.get(k).cloned())
            .map_err(PyValueError::new_err)?;
        let listener = listener
            .map(|l| l.borrow().inner.try_clone())
            .transpose()
            .map_err(crate::errors::to_py)?;
        // Interruptible while it connects and joins, as every other wait.
        let (m, raised) = crate::interrupt::detach(py, || Member::join(settings, listener));
        if let Some(e) = raised {
            return Err(e);
        }
        let m = m.map_err(|e| err(py, e))?;
        Ok(PyNativeMember {
            inner: Mutex::new(Some(m)),
        })
    }

    /// The next round (waits at most `timeout` seconds; default the join timeout plus twice
    /// the heartbeat timeout); with `ask_after` seconds, asks for a new round when the server
    /// has not ended the current one by then.
    #[pyo3(signature = (timeout=None, ask_after=None))]
    fn next_welcome(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        ask_after: Option<f64>,
    ) -> PyResult<PyWelcome> {
        let t = timeout.map(|t| dur("timeout", t)).transpose()?;
        let a = ask_after.map(|t| dur("ask_after", t)).transpose()?;
        self.with(py, move |m| {
            m.next_welcome(t, a).map(|w| PyWelcome::from(&w))
        })
    }

    /// Takes the messages already received; True when the current round is over.
    fn poll(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |m| m.poll())
    }

    /// The current round's communicator (RdzvRoundChangedError when the round already ended).
    fn communicator(&self, py: Python<'_>) -> PyResult<PyCommunicator> {
        self.with(py, |m| m.communicator().map(PyCommunicator::wrap))
    }

    /// The next round's communicator, taking later rounds when one ends during set-up
    /// (`Member::connect_round`, the join rule the C ABI shares); `ask_after` as
    /// `next_welcome`'s.
    #[pyo3(signature = (ask_after=None))]
    fn connect_round(&self, py: Python<'_>, ask_after: Option<f64>) -> PyResult<PyCommunicator> {
        let a = ask_after.map(|t| dur("ask_after", t)).transpose()?;
        self.with(py, move |m| m.connect_round(a).map(PyCommunicator::wrap))
    }

    /// Publishes `value` for the current round under configuration entry `key` (rank 0).
    fn publish_round_value(&self, py: Python<'_>, key: String, value: String) -> PyResult<()> {
        self.with(py, move |m| m.publish_round_value(&key, &value))
    }

    /// Relays the summaries this member's workers wrote in their store (`records`: each
    /// worker's `dtcomm/progress/<rank>` value) to the server; returns how many it relayed.
    fn relay_records(&self, py: Python<'_>, world: u32, records: Vec<Vec<u8>>) -> PyResult<usize> {
        self.with(py, move |m| m.relay_records(world, &records))
    }

    /// What rank 0 published for the current round under `key` (waits at most `timeout`).
    fn round_value(
        &self,
        py: Python<'_>,
        key: String,
        timeout: f64,
        what: String,
    ) -> PyResult<String> {
        let t = dur("timeout", timeout)?;
        self.with(py, move |m| m.round_value(&key, t, &what))
    }

    /// Tells the server this member's link to `rank` of `round` broke (`evidence`).
    fn report(&self, py: Python<'_>, round: u64, rank: u32, evidence: String) -> PyResult<()> {
        self.with(py, move |m| m.report(round, rank, evidence))
    }

    /// Leaves the job for good (the others get a new round); a no-op the second time.
    fn leave(&self, py: Python<'_>) {
        let m = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(m) = m {
            py.detach(|| m.leave());
        }
    }

    /// Ends the job for every member (`Finish`).
    fn finish(&self, py: Python<'_>) -> PyResult<()> {
        let m = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        match m {
            Some(m) => py.detach(|| m.finish()).map_err(|e| err(py, e)),
            None => Ok(()),
        }
    }

    /// The current round's welcome.
    #[getter]
    fn welcome(&self) -> PyResult<Option<PyWelcome>> {
        self.read(|m| m.rounds(|r| r.welcome().map(PyWelcome::from)))
    }

    /// Why the current round is over, if it is.
    #[getter]
    fn ended(&self) -> PyResult<Option<String>> {
        self.read(|m| m.rounds(|r| r.ended().map(str::to_owned)))
    }

    /// Members waiting to join, as the server last said.
    #[getter]
    fn waiting(&self) -> PyResult<u32> {
        self.read(|m| m.rounds(|r| r.waiting()))
    }

    /// The job's end (or this member's removal), in words, once the server said so.
    #[getter]
    fn job_end(&self) -> PyResult<Option<String>> {
        self.read(|m| {
            m.rounds(|r| {
                r.stop().map(|s| match s {
                    Stop::JobEnded { job, why, .. } => format!("job {job:?} ended: {why}"),
                    Stop::Removed { round, why, .. } => {
                        format!("removed from round {round}: {why}")
                    }
                })
            })
        })
    }

    /// The job and member (and round and rank, once in one).
    #[getter]
    fn who(&self) -> PyResult<String> {
        self.read(Member::who)
    }
}
