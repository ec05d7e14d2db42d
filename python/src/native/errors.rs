//! The Python exceptions of the native client's errors: a refusal carries the server's code
//! (`RdzvRefusedError.code`, `.server_message`), an ended job how it ended
//! (`RdzvJobEndedError.job`, `.how`, `.end`); timeouts, lost and failed connections have their
//! own types.

use dt_rdzv::native::NativeError;
use dt_rdzv_proto::native::{JobEnd, RefusalCode};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::{
    RdzvConnectError, RdzvError, RdzvJobEndedError, RdzvLostError, RdzvRefusedError,
    RdzvTimeoutError,
};

pub(super) fn code_name(c: RefusalCode) -> &'static str {
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
