//! What the engine tells its driver: [`Action`]s to carry out, in order, why it closes a
//! connection or purges a namespace, and its [`Stats`].

use bytes::Bytes;

use super::super::semantics::CounterError;
use super::input::ConnId;

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Append `bytes` to the connection's outbound FIFO.
    Send {
        /// Destination.
        conn: ConnId,
        /// Reply bytes, in chunks to write in order. A stored value is sent as a shared
        /// reference to it ([`Bytes`]), never copied under the driver's lock.
        bytes: Vec<Bytes>,
        /// How many of `bytes` the reply owns (the rest share stored values): what the
        /// driver charges to the store quota while they wait to be written
        /// ([`Engine::set_external_bytes`](super::Engine::set_external_bytes)).
        owned: usize,
    },
    /// Flush what was queued for the connection, then close it. The engine has already
    /// forgotten it; do not feed it more requests.
    Close {
        /// The connection.
        conn: ConnId,
        /// Why, for the log line.
        reason: CloseReason,
    },
    /// A namespace was forgotten (for the log).
    Purged {
        /// The namespace, lossily printed.
        namespace: String,
        /// Keys and queues removed.
        removed: usize,
        /// Why.
        reason: PurgeReason,
    },
}

/// Why the engine closes a connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloseReason {
    /// A request arrived before VALIDATE.
    #[error("{0} before VALIDATE")]
    NotValidated(&'static str),
    /// VALIDATE with the wrong magic.
    #[error("VALIDATE with bad magic 0x{0:08x}")]
    BadMagic(u32),
    /// A second VALIDATE.
    #[error("repeated VALIDATE")]
    RepeatedValidate,
    /// APPEND that would grow a value past the value limit (the value is kept as it was).
    #[error("APPEND on key {key:?} would make a {size}-byte value (limit {limit})")]
    ValueTooLarge {
        /// The key, lossily printed.
        key: String,
        /// The size the value would have had.
        size: u64,
        /// [`EngineConfig::max_value_bytes`](super::EngineConfig::max_value_bytes).
        limit: u64,
    },
    /// A write that would pass a namespace's or the store's byte quota (nothing stored).
    #[error("{op} on key {key:?} would pass the {scope} quota of {limit} bytes")]
    QuotaExceeded {
        /// The request's opcode name.
        op: &'static str,
        /// The key, lossily printed.
        key: String,
        /// `namespace`, `store`, or `server memory (--max-memory-bytes)`.
        scope: &'static str,
        /// The quota.
        limit: u64,
    },
    /// A WAIT or BARRIER that would make the store hold more bytes of waiting keys than
    /// [`MAX_WAITING_BYTES`](super::MAX_WAITING_BYTES), over every connection (each request is
    /// bounded on its own; their sum is bounded here).
    #[error(
        "{op} on {keys} more keys would hold {bytes} bytes of waiting keys (server-wide limit \
         {limit})"
    )]
    TooManyWaits {
        /// WAIT or BARRIER.
        op: &'static str,
        /// Keys in the refused request.
        keys: usize,
        /// Bytes of waiting keys the store would hold.
        bytes: u64,
        /// [`MAX_WAITING_BYTES`](super::MAX_WAITING_BYTES).
        limit: u64,
    },
    /// An answer (LIST_KEYS) larger than what the store quota leaves beside everything else
    /// the door holds: refused before it is built.
    #[error("{op} would answer with {bytes} bytes; {budget} of {limit} bytes leaves {room}")]
    AnswerOverBudget {
        /// The request's opcode name.
        op: &'static str,
        /// The answer's size.
        bytes: u64,
        /// What the quota leaves.
        room: u64,
        /// The budget that binds, in words: the store quota or the server's budget.
        budget: &'static str,
        /// [`EngineConfig::max_store_bytes`](super::EngineConfig::max_store_bytes), or the
        /// server's budget ([`Engine::set_server_budget`](super::Engine::set_server_budget)).
        limit: u64,
    },
    /// ADD or BARRIER on a value that is not a counter.
    #[error("{op} on key {key:?}: {error}")]
    Counter {
        /// ADD or BARRIER.
        op: &'static str,
        /// The key, lossily printed.
        key: String,
        /// Why.
        error: CounterError,
    },
}

/// Why a namespace was purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeReason {
    /// No open connection for longer than the TTL.
    Idle,
    /// A new torchelastic run arrived after every agent of the old one was gone.
    NewTorchelasticRun,
    /// Asked for by an operator.
    Explicit,
}

/// Counters for status pages and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests handled, by opcode.
    pub ops: [u64; 19],
    /// Connections ever accepted.
    pub connections_total: u64,
    /// Namespaces purged.
    pub purges: u64,
    /// Reads that did not mark their namespace live because the store quota had no room for
    /// the bookkeeping.
    pub touches_over_quota: u64,
}
