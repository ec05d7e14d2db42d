//! Errors of the native client.

use std::time::Duration;

use dt_rdzv_proto::native::{CodecError, JobEnd, RefusalCode};

/// What went wrong talking to `dt-rdzv serve` over the native protocol.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NativeError {
    /// Bad settings (endpoint, fingerprint, certificate files).
    #[error("native rendezvous client settings: {0}")]
    Config(String),
    /// The server could not be reached or the handshake failed.
    #[error("cannot connect to dt-rdzv at {endpoint}: {why}")]
    Connect {
        /// Where.
        endpoint: String,
        /// Why.
        why: String,
    },
    /// The server refused a request.
    #[error("dt-rdzv refused ({code:?}): {message}")]
    Refused {
        /// Machine-readable reason.
        code: RefusalCode,
        /// The server's message.
        message: String,
    },
    /// The job ended.
    #[error("job {job:?} ended: {end}")]
    JobEnded {
        /// The job.
        job: String,
        /// How.
        end: JobEnd,
    },
    /// Nothing arrived in time.
    #[error("{what}: nothing from dt-rdzv within {waited:?}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
    },
    /// The connection was lost.
    #[error("connection to dt-rdzv lost: {0}")]
    Lost(String),
    /// The server sent something undecodable or unexpected.
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl From<CodecError> for NativeError {
    fn from(e: CodecError) -> Self {
        NativeError::Protocol(e.to_string())
    }
}
