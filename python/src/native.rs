//! The native rendezvous client for Python: `NativeClient` over dt-rdzv's blocking client
//! (QUIC and TLS on a private one-thread runtime, heartbeats in the background), the GIL
//! released in every call that waits. `Welcome`, `Peer` and `RdzvEvent` are read-only values;
//! failures are typed exceptions (`RdzvRefusedError` with the server's code,
//! `RdzvJobEndedError` with how the job ended, `RdzvTimeoutError`, `RdzvLostError`,
//! `RdzvConnectError`).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use dt_rdzv::native::{
    BlockingNativeClient, ClientConfig, MemberHandle, Membership, NativeError, Trust,
};
use dt_rdzv_proto::native::{
    JobEnd, JobSpec, JobStatus, LateJoin, Peer, RefusalCode, Role, ServerMsg, Welcome,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::errors::{
    RdzvConnectError, RdzvError, RdzvJobEndedError, RdzvLostError, RdzvRefusedError,
    RdzvTimeoutError,
};

fn code_name(c: RefusalCode) -> &'static str {
    match c {
        RefusalCode::BadToken => "bad_token",
        RefusalCode::VersionMismatch => "version_mismatch",
        RefusalCode::Malformed => "malformed",
        RefusalCode::AlreadyJoined => "already_joined",
        RefusalCode::MemberTaken => "member_taken",
        RefusalCode::MainTaken => "main_taken",
        RefusalCode::SpecMismatch => "spec_mismatch",
        RefusalCode::InvalidSpec => "invalid_spec",
        RefusalCode::JobFull => "job_full",
        RefusalCode::JobEnded => "job_ended",
        RefusalCode::TooManyJobs => "too_many_jobs",
        RefusalCode::NotJoined => "not_joined",
        RefusalCode::NotMain => "not_main",
        RefusalCode::UnknownJob => "unknown_job",
        RefusalCode::BadRequest => "bad_request",
    }
}

pub(crate) fn with_attrs(py: Python<'_>, err: PyErr, attrs: &[(&str, Py<PyAny>)]) -> PyErr {
    let v = err.value(py);
    for (k, a) in attrs {
        let _ = v.setattr(*k, a);
    }
    err
}

/// The Python exception for a native-client error; `ctx` names the job and member.
pub(crate) fn to_py(py: Python<'_>, ctx: &str, e: NativeError) -> PyErr {
    let msg = format!("{ctx}{e}");
    match e {
        NativeError::Refused { code, message } => with_attrs(
            py,
            RdzvRefusedError::new_err(msg),
            &[
                (
                    "code",
                    code_name(code)
                        .into_pyobject(py)
                        .unwrap()
                        .into_any()
                        .unbind(),
                ),
                (
                    "server_message",
                    message.into_pyobject(py).unwrap().into_any().unbind(),
                ),
            ],
        ),
        NativeError::JobEnded { job, end } => job_ended(py, msg, &job, &end),
        NativeError::Timeout { .. } => RdzvTimeoutError::new_err(msg),
        NativeError::Lost(_) => RdzvLostError::new_err(msg),
        NativeError::Connect { .. } => RdzvConnectError::new_err(msg),
        NativeError::Config(_) => PyValueError::new_err(msg),
        NativeError::Protocol(_) => RdzvError::new_err(msg),
    }
}

fn job_ended(py: Python<'_>, msg: String, job: &str, end: &JobEnd) -> PyErr {
    with_attrs(
        py,
        RdzvJobEndedError::new_err(msg),
        &[
            ("job", job.into_pyobject(py).unwrap().into_any().unbind()),
            (
                "how",
                end.label().into_pyobject(py).unwrap().into_any().unbind(),
            ),
            (
                "end",
                end.to_string()
                    .into_pyobject(py)
                    .unwrap()
                    .into_any()
                    .unbind(),
            ),
        ],
    )
}

/// One member of a round as its peers see it.
#[pyclass(module = "dtcomm._dtcomm", name = "Peer", frozen, get_all)]
#[derive(Clone)]
pub struct PyPeer {
    /// Rank in the round.
    rank: u32,
    /// Member id.
    member: String,
    /// Node (host) name.
    node: String,
    /// Addresses it advertised.
    addrs: Vec<String>,
    /// The host identity it advertised (empty if none).
    host: Vec<u8>,
    /// The source IP the server saw (empty if unknown).
    observed_ip: String,
}

impl From<&Peer> for PyPeer {
    fn from(p: &Peer) -> Self {
        PyPeer {
            rank: p.rank,
            member: p.member.clone(),
            node: p.node.clone(),
            addrs: p.addrs.clone(),
            host: p.host.clone(),
            observed_ip: p.observed_ip.clone(),
        }
    }
}

#[pymethods]
impl PyPeer {
    fn __repr__(&self) -> String {
        format!(
            "Peer(rank={}, member={:?}, node={:?}, addrs={:?}, observed_ip={:?})",
            self.rank, self.member, self.node, self.addrs, self.observed_ip
        )
    }
}

/// A member's place in a completed round.
#[pyclass(module = "dtcomm._dtcomm", name = "Welcome", frozen, get_all)]
#[derive(Clone)]
pub struct PyWelcome {
    /// The job.
    job: String,
    /// Round number (1 for the first).
    round: u64,
    /// Why the round started, in words.
    cause: String,
    /// Global rank.
    rank: u32,
    /// Members in the round.
    world: u32,
    /// Rank among the round's members on this node.
    local_rank: u32,
    /// Members of the round on this node.
    local_world: u32,
    /// Index of this node among the round's nodes.
    node_rank: u32,
    /// Nodes in the round.
    nodes: u32,
    /// Peers this member needs (every member when `all_peers`).
    peers: Vec<PyPeer>,
    /// Whether `peers` is the whole round.
    all_peers: bool,
    /// Rounds started by losses so far.
    restarts: u32,
    /// Heartbeat timeout of the server, seconds.
    heartbeat_timeout: f64,
    config: Vec<(String, Vec<u8>)>,
}

impl From<&Welcome> for PyWelcome {
    fn from(w: &Welcome) -> Self {
        PyWelcome {
            job: w.job.clone(),
            round: w.round,
            cause: w.cause.to_string(),
            rank: w.rank,
            world: w.world,
            local_rank: w.local_rank,
            local_world: w.local_world,
            node_rank: w.node_rank,
            nodes: w.nodes,
            peers: w.peers.iter().map(PyPeer::from).collect(),
            all_peers: w.all_peers,
            restarts: w.restarts,
            heartbeat_timeout: w.heartbeat_timeout_ms as f64 / 1000.0,
            config: w.config.clone(),
        }
    }
}

#[pymethods]
impl PyWelcome {
    /// The job's published configuration when the round completed.
    fn config_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.config {
            d.set_item(k, PyBytes::new(py, v))?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Welcome(job={:?}, round={}, rank={}, world={}, local_rank={}, local_world={}, \
             node_rank={}, nodes={}, cause={:?})",
            self.job,
            self.round,
            self.rank,
            self.world,
            self.local_rank,
            self.local_world,
            self.node_rank,
            self.nodes,
            self.cause
        )
    }
}

/// A message the server pushed: `kind` is `welcome`, `round_ended`, `removed`, `pending`, `config`,
/// `job_ended`, `refused` or `other`; the other fields are set as the kind has them.
#[pyclass(module = "dtcomm._dtcomm", name = "RdzvEvent", frozen, get_all)]
pub struct RdzvEvent {
    /// What happened.
    kind: &'static str,
    /// The job.
    job: Option<String>,
    /// The round it concerns.
    round: Option<u64>,
    /// Why (round_ended), how it ended (job_ended), or the refusal's message.
    why: Option<String>,
    /// `finished`, `stopped`, `join_timeout`, ... (job_ended); the refusal code (refused).
    how: Option<String>,
    /// Members waiting to join (pending).
    waiting: Option<u32>,
    /// Configuration entry (config).
    key: Option<String>,
    /// Its value (config).
    value: Option<Vec<u8>>,
    /// The new round (welcome).
    welcome: Option<PyWelcome>,
}

#[pymethods]
impl RdzvEvent {
    fn __repr__(&self) -> String {
        format!(
            "RdzvEvent(kind={:?}, job={:?}, round={:?}, why={:?}, how={:?}, waiting={:?}, key={:?})",
            self.kind, self.job, self.round, self.why, self.how, self.waiting, self.key
        )
    }
}

fn event(m: ServerMsg) -> RdzvEvent {
    let mut e = RdzvEvent {
        kind: "other",
        job: None,
        round: None,
        why: None,
        how: None,
        waiting: None,
        key: None,
        value: None,
        welcome: None,
    };
    match m {
        ServerMsg::Welcome(w) => {
            e.kind = "welcome";
            e.job = Some(w.job.clone());
            e.round = Some(w.round);
            e.why = Some(w.cause.to_string());
            e.welcome = Some(PyWelcome::from(&w));
        }
        ServerMsg::RoundEnded { job, round, cause } => {
            e.kind = "round_ended";
            e.job = Some(job);
            e.round = Some(round);
            e.why = Some(cause.to_string());
        }
        ServerMsg::Pending {
            job,
            round,
            waiting,
        } => {
            e.kind = "pending";
            e.job = Some(job);
            e.round = Some(round);
            e.waiting = Some(waiting);
        }
        ServerMsg::Config { job, key, value } => {
            e.kind = "config";
            e.job = Some(job);
            e.key = Some(key);
            e.value = Some(value);
        }
        ServerMsg::JobEnded { job, end } => {
            e.kind = "job_ended";
            e.job = Some(job);
            e.why = Some(end.to_string());
            e.how = Some(end.label().to_string());
        }
        ServerMsg::Removed { job, round, why } => {
            e.kind = "removed";
            e.job = Some(job);
            e.round = Some(round);
            e.why = Some(why);
        }
        ServerMsg::Refused { code, message } => {
            e.kind = "refused";
            e.why = Some(message);
            e.how = Some(code_name(code).to_string());
        }
        _ => {}
    }
    e
}

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

    /// The member's handle for its communicators (see `dtcomm::launch::native::watch_round`).
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

fn status_dict<'py>(py: Python<'py>, j: &JobStatus) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("job", &j.job)?;
    d.set_item("state", &j.state)?;
    d.set_item("round", j.round)?;
    d.set_item("world", j.world)?;
    d.set_item("min_members", j.spec.min_members)?;
    d.set_item("max_members", j.spec.max_members)?;
    d.set_item("restarts", j.restarts)?;
    d.set_item("age", j.age_ms as f64 / 1000.0)?;
    d.set_item("missing", j.missing.clone())?;
    d.set_item("config_keys", j.config_keys.clone())?;
    let members = PyList::empty(py);
    for m in &j.members {
        let md = PyDict::new(py);
        md.set_item("member", &m.member)?;
        md.set_item("node", &m.node)?;
        md.set_item("state", &m.state)?;
        md.set_item("rank", m.rank)?;
        md.set_item("main", m.role == Role::Main)?;
        md.set_item("last_seen", m.last_seen_ms as f64 / 1000.0)?;
        md.set_item("addrs", m.addrs.clone())?;
        md.set_item("observed_ip", &m.observed_ip)?;
        members.append(md)?;
    }
    d.set_item("members", members)?;
    Ok(d)
}

/// The token of one job on a server whose token is `server_token`: it lets that job's members
/// join it, read its status and stop it, and opens nothing else (`dt-rdzv token --job JOB`).
#[pyfunction]
pub(crate) fn job_token(server_token: &str, job: &str) -> PyResult<String> {
    if server_token.is_empty() {
        return Err(PyValueError::new_err("the server token is empty"));
    }
    Ok(dt_rdzv_proto::rendezvous::job_token(server_token, job))
}

/// The store path's link secret (hex) a launcher hands the workers of `round` of `job` as
/// `DTCOMM_LINK_SECRET`, from the token its agent joined with; `None` for an empty token (a
/// server without authentication: anyone could derive it, so the store's own secret is kept).
#[pyfunction]
pub(crate) fn store_link_secret(token: &str, job: &str, round: u64) -> Option<String> {
    if token.is_empty() {
        return None;
    }
    let s = dtcomm::store_link_secret(token, job, round);
    Some(s.iter().map(|b| format!("{b:02x}")).collect())
}

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
