//! NCCL's result codes on the Rust side: success, in progress, or an error that carries the
//! code and NCCL's own words for it.

use crate::bindings::ncclResult_t;
use crate::version::Version;

/// A call that did not fail: done, or (non-blocking communicators) still under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// `ncclSuccess`.
    Success,
    /// `ncclInProgress` (7): a non-blocking communicator is still working; poll
    /// `ncclCommGetAsyncError` until it turns into success or an error.
    InProgress,
}

/// The result of a wrapped NCCL call.
pub type NcclResult<T> = Result<T, NcclError>;

/// An NCCL call failed, or the loaded library lacks the function.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NcclError {
    /// The function returned an error code.
    #[error("{function} failed: {} ({}): {message}{}", code_name(*code), code.0, last_error_suffix(last_error))]
    Failed {
        /// The NCCL function, e.g. `ncclCommInitRank`.
        function: &'static str,
        /// The code it returned; any value, including ones newer than this crate's header.
        code: ncclResult_t,
        /// `ncclGetErrorString(code)`.
        message: String,
        /// `ncclGetLastError(NULL)` right after the call; empty when NCCL had nothing to add.
        last_error: String,
    },
    /// The function is missing from the loaded library, or newer than its version.
    #[error("{function} is not available in the loaded NCCL {version}")]
    Unavailable {
        /// The NCCL function.
        function: &'static str,
        /// The loaded library's version.
        version: Version,
    },
}

impl NcclError {
    /// The NCCL result code, for [`NcclError::Failed`].
    pub fn code(&self) -> Option<ncclResult_t> {
        match self {
            NcclError::Failed { code, .. } => Some(*code),
            NcclError::Unavailable { .. } => None,
        }
    }
}

/// Sorts a result code: success and in-progress are [`Status`]es, every other value (known
/// to the header or not) is returned as the error code.
pub fn classify(code: ncclResult_t) -> Result<Status, ncclResult_t> {
    match code {
        ncclResult_t::ncclSuccess => Ok(Status::Success),
        ncclResult_t::ncclInProgress => Ok(Status::InProgress),
        other => Err(other),
    }
}

/// The header's name for a result code, or `"unknown result"` for a code it does not know.
pub fn code_name(code: ncclResult_t) -> &'static str {
    match code {
        ncclResult_t::ncclSuccess => "ncclSuccess",
        ncclResult_t::ncclUnhandledCudaError => "ncclUnhandledCudaError",
        ncclResult_t::ncclSystemError => "ncclSystemError",
        ncclResult_t::ncclInternalError => "ncclInternalError",
        ncclResult_t::ncclInvalidArgument => "ncclInvalidArgument",
        ncclResult_t::ncclInvalidUsage => "ncclInvalidUsage",
        ncclResult_t::ncclRemoteError => "ncclRemoteError",
        ncclResult_t::ncclInProgress => "ncclInProgress",
        ncclResult_t::ncclTimeout => "ncclTimeout",
        _ => "unknown result",
    }
}

fn last_error_suffix(last_error: &str) -> String {
    if last_error.is_empty() {
        String::new()
    } else {
        format!(" (last error: {last_error})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_success_in_progress_and_errors() {
        assert_eq!(classify(ncclResult_t(0)), Ok(Status::Success));
        assert_eq!(classify(ncclResult_t(7)), Ok(Status::InProgress));
        assert_eq!(
            classify(ncclResult_t(1)),
            Err(ncclResult_t::ncclUnhandledCudaError)
        );
        // A code from a newer library than the header is an error, not success.
        assert_eq!(classify(ncclResult_t(999)), Err(ncclResult_t(999)));
    }

    #[test]
    fn error_display_names_function_code_and_messages() {
        let err = NcclError::Failed {
            function: "ncclCommInitRank",
            code: ncclResult_t(1),
            message: "unhandled cuda error".into(),
            last_error: "CUDA driver version is insufficient".into(),
        };
        assert_eq!(err.code(), Some(ncclResult_t(1)));
        assert_eq!(
            err.to_string(),
            "ncclCommInitRank failed: ncclUnhandledCudaError (1): unhandled cuda error \
             (last error: CUDA driver version is insufficient)"
        );
        let unknown = NcclError::Failed {
            function: "ncclAllReduce",
            code: ncclResult_t(42),
            message: "unknown result code".into(),
            last_error: String::new(),
        };
        assert_eq!(
            unknown.to_string(),
            "ncclAllReduce failed: unknown result (42): unknown result code"
        );
    }
}
