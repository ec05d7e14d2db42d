//! [`Refusal`]: why the Lighthouse turns a call down, as the gRPC status code it maps to.

/// A call the Lighthouse refuses, with a message for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request is malformed or past a size limit (gRPC `INVALID_ARGUMENT`).
    #[error("{0}")]
    InvalidArgument(String),
    /// The server is at one of its bounds (gRPC `RESOURCE_EXHAUSTED`).
    #[error("{0}")]
    ResourceExhausted(String),
}
