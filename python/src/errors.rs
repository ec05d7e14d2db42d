//! Python exceptions of dtcomm and the mapping from the engine's typed [`CommError`].
//!
//! Every message names this rank (and, where there is one, the peer, the call and its
//! sequence number): it is the engine's `Display` text. Bad arguments are `ValueError` or
//! `TypeError`; everything that went wrong between ranks is a [`DtcommError`] subclass.

use dtcomm::{CallDesc, CommError, ErrorCode};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

pyo3::create_exception!(
    _dtcomm,
    DtcommError,
    PyRuntimeError,
    "A collective or the communicator failed; the message names the rank, peer, call and sequence number."
);
pyo3::create_exception!(
    _dtcomm,
    CommTimeoutError,
    DtcommError,
    "A call ran past its deadline (DTCOMM_TIMEOUT); names the ranks not heard from."
);
pyo3::create_exception!(
    _dtcomm,
    PeerLostError,
    DtcommError,
    "A peer died or its connection broke during a call, or another rank reported such a failure."
);
pyo3::create_exception!(
    _dtcomm,
    RoundEndedError,
    PeerLostError,
    "The rendezvous server ended this communicator's round (a member was lost or left, the job was stopped); `lost_rank`, `round`, `cause` and `removed` (this member is out of the job) say how."
);
pyo3::create_exception!(
    _dtcomm,
    MismatchError,
    DtcommError,
    "Ranks called different collectives, or the same one with a different dtype, count or root."
);
pyo3::create_exception!(
    _dtcomm,
    SetupError,
    DtcommError,
    "Building the communicator failed (rendezvous, listen, connect, handshake)."
);
pyo3::create_exception!(
    _dtcomm,
    ShutdownError,
    DtcommError,
    "The communicator was shut down; call dtcomm.init() again."
);

pyo3::create_exception!(
    _dtcomm,
    DeviceError,
    DtcommError,
    "A call on CUDA tensors failed in CUDA or NCCL (the message carries NCCL's code, its name and its last-error text), or the ranks found no path for device buffers."
);

pyo3::create_exception!(
    _dtcomm,
    RdzvError,
    DtcommError,
    "The native rendezvous (dt-rdzv serve's QUIC port) failed; the message names job and member."
);
pyo3::create_exception!(
    _dtcomm,
    RdzvConnectError,
    RdzvError,
    "The native rendezvous server could not be reached, or its certificate is not the trusted one."
);
pyo3::create_exception!(
    _dtcomm,
    RdzvRefusedError,
    RdzvError,
    "The server refused a request: `code` (e.g. 'bad_token') and `server_message` say why."
);
pyo3::create_exception!(
    _dtcomm,
    RdzvJobEndedError,
    RdzvError,
    "The job ended: `job`, `how` ('finished', 'stopped', 'join_timeout', ...) and `end` (in words)."
);
pyo3::create_exception!(
    _dtcomm,
    RdzvTimeoutError,
    RdzvError,
    "Nothing came from the rendezvous server in time (e.g. the round did not complete)."
);
pyo3::create_exception!(
    _dtcomm,
    RdzvLostError,
    RdzvError,
    "The connection to the rendezvous server was lost or closed."
);

pyo3::create_exception!(
    _dtcomm,
    RdzvRoundChangedError,
    RdzvError,
    "The round this member was setting up ended before it was ready: take the next one."
);

/// The Python exception for an engine error, with attributes for programs that branch on it:
/// `result_code` (the stable numeric code, the C ABI's `dtcomm_result_t`), `result_name`,
/// `rank`, and where the error has them `peer`, `op`, `seq` and `waiting_for` (else None).
pub(crate) fn to_py(e: CommError) -> PyErr {
    let msg = e.to_string();
    let cause = e.root_cause();
    // By code, so that a bystander told of a mismatch between two other ranks raises
    // MismatchError too (its message names both ranks and both calls).
    let err = match cause.code() {
        ErrorCode::Timeout => CommTimeoutError::new_err(msg),
        ErrorCode::PeerLost | ErrorCode::Aborted => PeerLostError::new_err(msg),
        ErrorCode::RoundEnded => RoundEndedError::new_err(msg),
        ErrorCode::Mismatch | ErrorCode::Protocol => MismatchError::new_err(msg),
        ErrorCode::Setup => SetupError::new_err(msg),
        ErrorCode::Shutdown => ShutdownError::new_err(msg),
        ErrorCode::InvalidArgument => pyo3::exceptions::PyValueError::new_err(msg),
        ErrorCode::Device => DeviceError::new_err(msg),
        _ => DtcommError::new_err(msg),
    };
    Python::attach(|py| {
        let v = err.value(py);
        let code = e.code();
        let (rank, peer, call, waiting): (usize, Option<usize>, Option<CallDesc>, Vec<usize>) =
            match cause {
                CommError::Timeout {
                    rank,
                    call,
                    waiting_for,
                    ..
                } => (*rank, None, Some(*call), waiting_for.clone()),
                CommError::PeerLost {
                    rank, peer, call, ..
                } => (*rank, Some(*peer), Some(*call), vec![]),
                CommError::Aborted {
                    rank, lost, call, ..
                } => (*rank, *lost, Some(*call), vec![]),
                CommError::RoundEnded {
                    rank,
                    lost,
                    call,
                    round,
                    cause,
                    removed,
                    ..
                } => {
                    let _ = v.setattr("lost_rank", *lost);
                    let _ = v.setattr("round", *round);
                    let _ = v.setattr("cause", cause.as_str());
                    let _ = v.setattr("removed", *removed);
                    (*rank, *lost, Some(*call), vec![])
                }
                CommError::Mismatch {
                    rank, peer, ours, ..
                } => (*rank, Some(*peer), Some(*ours), vec![]),
                CommError::Protocol {
                    rank, peer, call, ..
                } => (*rank, Some(*peer), Some(*call), vec![]),
                CommError::Device { rank, call, .. }
                | CommError::Interrupted { rank, call, .. } => (*rank, None, Some(*call), vec![]),
                CommError::Setup { rank, .. }
                | CommError::InvalidArgument { rank, .. }
                | CommError::Shutdown { rank, .. }
                | CommError::WaitTimeout { rank, .. } => (*rank, None, None, vec![]),
                CommError::Failed(_) => unreachable!("root_cause unwraps Failed"),
            };
        // Attributes are best effort: an exception type that refuses them keeps its message.
        let _ = v.setattr("result_code", code as i32);
        let _ = v.setattr("result_name", code.name());
        let _ = v.setattr("rank", rank);
        let _ = v.setattr("peer", peer);
        let _ = v.setattr("op", call.map(|c| c.op.name()));
        let _ = v.setattr("seq", call.map(|c| c.seq));
        let _ = v.setattr("waiting_for", waiting);
    });
    err
}

/// Registers the exception types on the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("DtcommError", py.get_type::<DtcommError>())?;
    m.add("CommTimeoutError", py.get_type::<CommTimeoutError>())?;
    m.add("PeerLostError", py.get_type::<PeerLostError>())?;
    m.add("RoundEndedError", py.get_type::<RoundEndedError>())?;
    m.add("MismatchError", py.get_type::<MismatchError>())?;
    m.add("SetupError", py.get_type::<SetupError>())?;
    m.add("ShutdownError", py.get_type::<ShutdownError>())?;
    m.add("DeviceError", py.get_type::<DeviceError>())?;
    m.add("RdzvError", py.get_type::<RdzvError>())?;
    m.add("RdzvConnectError", py.get_type::<RdzvConnectError>())?;
    m.add("RdzvRefusedError", py.get_type::<RdzvRefusedError>())?;
    m.add("RdzvJobEndedError", py.get_type::<RdzvJobEndedError>())?;
    m.add("RdzvTimeoutError", py.get_type::<RdzvTimeoutError>())?;
    m.add("RdzvLostError", py.get_type::<RdzvLostError>())?;
    m.add(
        "RdzvRoundChangedError",
        py.get_type::<RdzvRoundChangedError>(),
    )?;
    Ok(())
}

/// What the caller's error messages say about the call.
pub(crate) struct Ctx<'a> {
    pub rank: usize,
    pub op: &'a str,
    pub arg: &'a str,
}

impl Ctx<'_> {
    pub(crate) fn value_err(&self, what: impl std::fmt::Display) -> PyErr {
        PyValueError::new_err(format!(
            "rank {}: {}: {} {what}",
            self.rank, self.op, self.arg
        ))
    }
    pub(crate) fn type_err(&self, what: impl std::fmt::Display) -> PyErr {
        PyTypeError::new_err(format!(
            "rank {}: {}: {} {what}",
            self.rank, self.op, self.arg
        ))
    }
}
