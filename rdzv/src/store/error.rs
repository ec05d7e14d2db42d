//! Errors of the `Store` layer.

use std::time::Duration;

/// What went wrong in a store operation. Every variant names the operation and its keys or
/// endpoint, so a log line alone tells who was waiting for what.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A wait ran out of time; `missing` lists the keys that never appeared.
    #[error("store {op} timed out after {waited:?} waiting for keys {missing:?}")]
    Timeout {
        /// The operation (`wait`, `get`, `multi_get`, `barrier`).
        op: &'static str,
        /// Keys still missing at the deadline.
        missing: Vec<String>,
        /// How long the caller waited.
        waited: Duration,
    },
    /// Could not reach the server before the connect deadline.
    #[error("could not connect to store at {endpoint} within {waited:?}: {source}")]
    Connect {
        /// `host:port` as given.
        endpoint: String,
        /// Time spent retrying.
        waited: Duration,
        /// The last error seen.
        #[source]
        source: std::io::Error,
    },
    /// The connection broke during an operation (the server closes on bad requests).
    #[error("store connection to {endpoint} failed during {op}: {source}")]
    Io {
        /// `host:port` of the server.
        endpoint: String,
        /// The operation in flight.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The server answered something the protocol does not allow.
    #[error("store protocol error from {endpoint} during {op}: {detail}")]
    Protocol {
        /// `host:port` of the server.
        endpoint: String,
        /// The operation in flight.
        op: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The stored value is not an integer counter, or the sum overflows.
    #[error("store add on key {key:?}: {source}")]
    Counter {
        /// The key.
        key: String,
        /// Why.
        #[source]
        source: dt_rdzv_proto::tcpstore::semantics::CounterError,
    },
    /// A request outside the protocol's limits (key, value or count too large).
    #[error("store request rejected: {0}")]
    InvalidArgument(String),
}
