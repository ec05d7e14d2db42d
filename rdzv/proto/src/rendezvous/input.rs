//! [`Input`]: what a driver tells the rendezvous machine about its connections.

use super::ConnId;
use crate::native::{ClientMsg, CodecError};

/// What the driver tells the machine.
// One input lives for one `handle` call, never in bulk: a `Join` inline costs less than a box
// per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A connection was accepted from this source IP.
    Connected {
        /// The driver's id for it.
        conn: ConnId,
        /// The client's source IP address, as seen by the server.
        observed_ip: String,
    },
    /// Another stream was opened on the connection `carrier`, whose first stream is a node
    /// agent's hello ([`ClientMsg::Node`]): a local rank of that node joins on it. Its
    /// member's liveness is the agent's (see `machine/nodes`).
    Stream {
        /// The driver's id for the stream.
        conn: ConnId,
        /// The id of the connection's first stream (the agent's hello).
        carrier: ConnId,
        /// The client's source IP address, as seen by the server.
        observed_ip: String,
    },
    /// A decoded message arrived.
    Message {
        /// From whom.
        conn: ConnId,
        /// What.
        msg: ClientMsg,
    },
    /// Bytes that do not decode arrived; the connection will be refused and closed.
    Malformed {
        /// From whom.
        conn: ConnId,
        /// What was wrong.
        error: CodecError,
    },
    /// The connection is gone (closed by the peer, timed out, reset).
    Closed {
        /// Which.
        conn: ConnId,
        /// What the transport said.
        why: String,
    },
}
