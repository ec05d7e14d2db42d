//! `NativeClient`: one connection to `dt-rdzv serve`'s native port over dt-rdzv's blocking
//! client. A member joins a job and waits for its rounds, reads pushed messages and the job's
//! configuration, publishes, reports broken links, and leaves or finishes; an operator asks
//! for status or stops a job. Every call that waits releases the GIL.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use dt_rdzv::native::{
    BlockingNativeClient, ClientConfig, MemberHandle, Membership, NativeError, Trust,
};
use dt_rdzv_proto::native::{JobSpec, LateJoin, Role};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::errors::to_py;
use super::event::{RdzvEvent, event};
use super::round::{PyPeer, PyWelcome};
use super::status::status_dict;
use crate::errors::RdzvLostError;

fn late_join(s: &str) -> PyResult<LateJoin> {
    match s {
        "immediate" => Ok(LateJoin::Immediate),
        "on_request" => Ok(LateJoin::OnRequest),
        _ => Err(PyValueError::new_err(format!(
            "late_join={s:?}: expected 'immediate' or 'on_request'"
        ))),
    }
}

fn ms(what: &str, secs: f64) -> PyResult<u64> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{what}={secs} must be a non-negative number of seconds"
        )));
    }
    Ok((secs * 1000.0).round() as u64)
}

fn dur(what: &str, secs: f64) -> PyResult<Duration> {
    Ok(Duration::from_millis(ms(what, secs)?.max(1)))
}

/// One connection to `dt-rdzv serve`'s native port: a member after `join()`, or an operator
/// (`status`, `stop`). Thread-safe; calls on one client are serialized.
#[pyclass(module = "dtcomm._dtcomm", name = "NativeClient")]
pub struct NativeClient {
    inner: Mutex<Option<BlockingNativeClient>>,
    endpoint: String,
    /// "job JOB member MEMBER: " once joined, for error messages.
    ctx: Mutex<String>,
}

impl NativeClient {
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut BlockingNativeClient) -> Result<T, NativeError> + Send,
    ) -> PyResult<T> {
        let ctx = self.ctx.lock().expect("ctx lock").clone();
        let r = py.detach(|| {
            let mut g = self.inner.lock().expect("client lock");
            match g.as_mut() {
                Some(c) => Ok(f(c)),
                None => Err(()),
            }
        });
        match r {
            Ok(r) => r.map_err(|e| to_py(py, &ctx, e)),
            Err(()) => Err(RdzvLostError::new_err(format!(
                "{ctx}the native client to {} is closed (left, finished or closed)",
                self.endpoint
            ))),
        }
    }

    /// The member's handle for its communicators (see `dtcomm_launch::native::watch_round`).
    pub(crate) fn member_handle(&self, py: Python<'_>) -> PyResult<MemberHandle> {
        self.call(py, |c| Ok(c.handle()))
    }

    fn take(&self, py: Python<'_>) -> Option<BlockingNativeClient> {
        py.detach(|| self.inner.lock().expect("client lock").take())
    }
}

#[pymethods]
impl NativeClient {
    /// Connects to `endpoint` (`host[:port]`, port 29401 if left out), trusting the server by
    /// its certificate `fingerprint` (`sha256:...`, printed by `dt-rdzv serve`) or a `cacert`
    /// PEM file. `timeout` (seconds) bounds the connection and every request's answer. A
    /// member whose server goes away (a restart) reconnects for up to `reconnect` seconds and
    /// resumes its round (`None`: the loss is an error at once). `job`, when the connection is
    /// for one job: with several endpoints every member of the job tries them in the same
    /// order (by the job), so they meet on one server instead of being redirected.
    #[new]
    #[pyo3(signature = (endpoint, token="", *, fingerprint=None, cacert=None,
                        server_name="localhost", timeout=30.0, reconnect=Some(60.0), job=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        endpoint: String,
        token: &str,
        fingerprint: Option<String>,
        cacert: Option<PathBuf>,
        server_name: &str,
        timeout: f64,
        reconnect: Option<f64>,
        job: Option<String>,
    ) -> PyResult<Self> {
        let trust = match (fingerprint, cacert) {
            (Some(f), None) => Trust::Fingerprint(f),
            (None, Some(c)) => Trust::CaFile(c),
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err(
                    "pass fingerprint= or cacert=, not both",
                ));
            }
            (None, None) => {
                return Err(PyValueError::new_err(format!(
                    "native rendezvous at {endpoint}: say how to trust the server: fingerprint= \
                     (DTCOMM_RDZV_FINGERPRINT, printed by `dt-rdzv serve`) or cacert= \
                     (DTCOMM_RDZV_CACERT)"
                )));
            }
        };
        let mut cfg = ClientConfig::new(endpoint.clone(), token, trust);
        cfg.server_name = server_name.to_string();
        cfg.timeout = dur("timeout", timeout)?;
        cfg.reconnect = reconnect.map(|s| dur("reconnect", s)).transpose()?;
        cfg.affinity = job;
        let client = py
            .detach(|| BlockingNativeClient::connect(&cfg))
            .map_err(|e| to_py(py, "", e))?;
        Ok(NativeClient {
            inner: Mutex::new(Some(client)),
            endpoint,
            ctx: Mutex::new(String::new()),
        })
    }

    /// The endpoint connected to.
    #[getter]
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Joins job `job` as `member` on `node`; returns `(round, spare)` once the server accepted
    /// (the round may still be forming: see `wait_welcome`). Every member of a job must send
    /// the same spec (`min_members`..`max_members`, `last_call`, `join_timeout` seconds, ...).
    #[pyo3(signature = (job, member, node, *, addrs=Vec::new(), host=Vec::new(), main=false, min_members=1,
                        max_members=1024, max_spares=1024, last_call=3.0, join_timeout=600.0,
                        max_rounds=0, max_restarts=None, late_join="immediate",
                        ephemeral=false, ttl=None, full_peer_table_max=64))]
    #[allow(clippy::too_many_arguments)]
    fn join(
        &self,
        py: Python<'_>,
        job: String,
        member: String,
        node: String,
        addrs: Vec<String>,
        host: Vec<u8>,
        main: bool,
        min_members: u32,
        max_members: u32,
        max_spares: u32,
        last_call: f64,
        join_timeout: f64,
        max_rounds: u32,
        max_restarts: Option<u32>,
        late_join: &str,
        ephemeral: bool,
        ttl: Option<f64>,
        full_peer_table_max: u32,
    ) -> PyResult<(u64, bool)> {
        let spec = JobSpec {
            min_members,
            max_members,
            max_spares,
            last_call_ms: ms("last_call", last_call)?,
            join_timeout_ms: ms("join_timeout", join_timeout)?,
            max_rounds,
            max_restarts,
            late_join: self::late_join(late_join)?,
            ephemeral,
            ttl_ms: ttl.map(|t| ms("ttl", t)).transpose()?,
            full_peer_table_max,
        };
        *self.ctx.lock().expect("ctx lock") = format!("job {job:?} member {member:?}: ");
        let who = Membership {
            job,
            member,
            node,
            addrs,
            host,
            role: if main { Role::Main } else { Role::Worker },
            spec,
        };
        let j = self.call(py, move |c| c.join(who))?;
        Ok((j.round, j.spare))
    }

    /// Waits (at most `timeout` seconds) for this member's next completed round. Other pushed
    /// messages are taken in passing; raises `RdzvJobEndedError`, `RdzvTimeoutError` naming
    /// the job and member, `RdzvLostError`.
    fn wait_welcome(&self, py: Python<'_>, timeout: f64) -> PyResult<PyWelcome> {
        let t = dur("timeout", timeout)?;
        let w = self.call(py, move |c| c.wait_welcome(t))?;
        Ok(PyWelcome::from(&w))
    }

    /// The next pushed message, waiting at most `timeout` seconds; None when nothing came.
    fn next_message(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<RdzvEvent>> {
        let t = dur("timeout", timeout)?;
        match self.call(py, move |c| match c.next_message(t) {
            Err(NativeError::Timeout { .. }) => Ok(None),
            r => r.map(Some),
        }) {
            Ok(m) => Ok(m.map(event)),
            Err(e) => Err(e),
        }
    }

    /// A pushed message already received, without waiting (what a training loop checks
    /// between steps); None when there is none.
    fn try_message(&self, py: Python<'_>) -> PyResult<Option<RdzvEvent>> {
        let m = self.call(py, |c| c.try_message().transpose())?;
        Ok(m.map(event))
    }

    /// The latest welcome received, if any.
    fn current(&self, py: Python<'_>) -> PyResult<Option<PyWelcome>> {
        self.call(py, |c| Ok(c.current().map(PyWelcome::from)))
    }

    /// The job's configuration as published so far.
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let cfg = self.call(py, |c| Ok(c.config().cloned().unwrap_or_default()))?;
        let d = PyDict::new(py);
        for (k, v) in cfg {
            d.set_item(k, PyBytes::new(py, &v))?;
        }
        Ok(d)
    }

    /// Publishes a configuration entry to the job's members (main member, or rank 0 of the
    /// round when the job has no main member; a refusal arrives as a `refused` event).
    fn publish(&self, py: Python<'_>, key: String, value: Vec<u8>) -> PyResult<()> {
        self.call(py, move |c| c.publish(&key, value))
    }

    /// Asks for a new round now (lets waiting joiners in; restarts a failed group).
    fn next_round(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, |c| c.next_round())
    }

    /// Tells the server this member's link to rank `rank` of round `round` broke (evidence:
    /// the server probes that member, and declares it lost only if it does not answer). The
    /// communicators built with this client report on their own; this is for tools and tests.
    fn report(&self, py: Python<'_>, round: u64, rank: u32, evidence: String) -> PyResult<()> {
        let h = self.member_handle(py)?;
        let ctx = self.ctx.lock().expect("ctx lock").clone();
        h.report(round, rank, evidence)
            .map_err(|e| to_py(py, &ctx, e))
    }

    /// Addresses of some ranks of the current round.
    fn lookup(&self, py: Python<'_>, ranks: Vec<u32>) -> PyResult<Vec<PyPeer>> {
        let p = self.call(py, move |c| c.lookup(ranks))?;
        Ok(p.iter().map(PyPeer::from).collect())
    }

    /// Operator: the status of one job or of every job, as dicts (needs the token).
    #[pyo3(signature = (job=None))]
    fn status<'py>(&self, py: Python<'py>, job: Option<String>) -> PyResult<Bound<'py, PyList>> {
        let jobs = self.call(py, move |c| c.status(job.as_deref()))?;
        let out = PyList::empty(py);
        for j in &jobs {
            out.append(status_dict(py, j)?)?;
        }
        Ok(out)
    }

    /// Operator: stops `job`; every member is told and later joins are refused.
    #[pyo3(signature = (job, reason="stopped from Python"))]
    fn stop(&self, py: Python<'_>, job: String, reason: &str) -> PyResult<()> {
        let reason = reason.to_string();
        self.call(py, move |c| c.stop(&job, &reason))
    }

    /// Leaves the job for good (the others get a new round) and closes the connection.
    fn leave(&self, py: Python<'_>) -> PyResult<()> {
        let ctx = self.ctx.lock().expect("ctx lock").clone();
        match self.take(py) {
            Some(c) => py.detach(|| c.leave()).map_err(|e| to_py(py, &ctx, e)),
            None => Ok(()),
        }
    }

    /// Tells the server the job is done (every member is told) and closes the connection.
    fn finish(&self, py: Python<'_>) -> PyResult<()> {
        let ctx = self.ctx.lock().expect("ctx lock").clone();
        match self.take(py) {
            Some(c) => py.detach(|| c.finish()).map_err(|e| to_py(py, &ctx, e)),
            None => Ok(()),
        }
    }

    /// Closes the connection without leaving (the server sees the member lost). Idempotent.
    fn close(&self, py: Python<'_>) {
        if let Some(c) = self.take(py) {
            py.detach(move || drop(c));
        }
    }

    /// Whether the connection was closed (left, finished or closed).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().expect("client lock").is_none()
    }
}

impl Drop for NativeClient {
    fn drop(&mut self) {
        if let Ok(mut g) = self.inner.lock() {
            drop(g.take());
        }
    }
}
