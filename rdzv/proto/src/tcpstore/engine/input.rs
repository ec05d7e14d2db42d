//! [`Input`]: what a driver tells the engine about its connections.

use super::super::request::Request;

/// A driver's name for one client connection.
pub type ConnId = u64;

/// What the driver tells the engine, with the time it happened
/// ([`Engine::handle`](super::Engine::handle)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A connection was accepted.
    Connected {
        /// The driver's id for it.
        conn: ConnId,
    },
    /// A decoded request arrived, in the connection's order.
    Request {
        /// From whom.
        conn: ConnId,
        /// What.
        request: Request,
    },
    /// A connection closed (EOF, error, or after an
    /// [`Action::Close`](super::Action::Close)): its waits are dropped and the namespaces it
    /// touched may go idle.
    Closed {
        /// Which.
        conn: ConnId,
    },
}
