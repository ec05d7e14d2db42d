//! Python exceptions of dtcomm and the mapping from the engine's typed [`CommError`].
//!
//! Every message names this rank (and, where there is one, the peer, the call and its
//! sequence number): it is the engine's `Display` text. Bad arguments are `ValueError` or
//! `TypeError`; everything that went wrong between ranks is a [`DtcommError`] subclass.

use dtcomm::CommError;
use pyo3::exceptions::PyRuntimeError;
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

/// The Python exception for an engine error.
pub(crate) fn to_py(e: CommError) -> PyErr {
    let msg = e.to_string();
    match e.root_cause() {
        CommError::Timeout { .. } => CommTimeoutError::new_err(msg),
        CommError::PeerLost { .. } | CommError::Aborted { .. } => PeerLostError::new_err(msg),
        CommError::Mismatch { .. } | CommError::Protocol { .. } => MismatchError::new_err(msg),
        CommError::Setup { .. } => SetupError::new_err(msg),
        CommError::InvalidArgument { .. } => pyo3::exceptions::PyValueError::new_err(msg),
        CommError::Failed(_) => DtcommError::new_err(msg),
    }
}

/// Registers the exception types on the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("DtcommError", py.get_type::<DtcommError>())?;
    m.add("CommTimeoutError", py.get_type::<CommTimeoutError>())?;
    m.add("PeerLostError", py.get_type::<PeerLostError>())?;
    m.add("MismatchError", py.get_type::<MismatchError>())?;
    m.add("SetupError", py.get_type::<SetupError>())?;
    m.add("ShutdownError", py.get_type::<ShutdownError>())?;
    Ok(())
}
