//! What a driver tells the [`Member`](super::Member) machine, and what it asks of the driver.

use std::time::Duration;

use crate::native::{ClientMsg, Join, RoundEnd, ServerMsg};

/// How a connection was lost, as the driver saw it (the QUIC error, classified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// The server went away (a restart: close code
    /// [`CLOSE_GOING_AWAY`](crate::native::CLOSE_GOING_AWAY)) or the path was reset: not
    /// meant for this member, so it rejoins.
    ServerGone,
    /// The server went silent (an idle timeout): not meant either; the next server of the
    /// endpoint list is tried first.
    Silent,
    /// The server closed the connection on purpose (or the handshake side did): final unless
    /// this member was rejoining (then one more failed attempt, unless the server refused the
    /// rejoin for good first).
    Closed,
    /// The stream ended or failed (how `dt-rdzv serve` closes a connection on purpose: it
    /// finishes the stream first): final, but for a rejoin, as for [`Loss::Closed`].
    Stream,
}

/// An input to the member machine, with the time it arrived.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The application sends `msg` (its join, leave, finish, requests).
    Outgoing(ClientMsg),
    /// A [`Output::Send`] was written (it counts as this member's sign of life).
    Sent,
    /// A message from the server, decoded.
    Message(ServerMsg),
    /// The connection was lost.
    ConnectionLost {
        /// Why, in words (the transport's error).
        why: String,
        /// What kind of loss.
        loss: Loss,
    },
    /// A connection asked for by [`Output::Dial`] opened, to server `server` of the endpoint
    /// list.
    Connected {
        /// The index of the server that answered.
        server: usize,
    },
    /// The join sent again on the new connection ([`Output::Rejoin`]) was written.
    RejoinSent,
    /// The connection asked for could not be opened (or closed at once).
    DialFailed {
        /// Why, in words.
        why: String,
    },
}

/// What the member machine asks of its driver, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Write `msg` on the connection; on success, tell the machine [`Input::Sent`].
    Send(ClientMsg),
    /// Write `msg` after every message of the chunk being read was handled (an answer to the
    /// server's probe); whether it was written does not matter.
    Reply(ClientMsg),
    /// Hand the server's message to the application.
    Deliver(ServerMsg),
    /// Every round up to `RoundEnd::round` ended: tell the watchers.
    EndThrough(RoundEnd),
    /// Rank `rank` of `round` asked every member to dump its flight recorder (its call timed
    /// out: `why`): tell the dump watchers.
    Dump {
        /// The round.
        round: u64,
        /// The asking rank.
        rank: u32,
        /// What timed out there.
        why: String,
    },
    /// Every round ended (the job ended, this member was removed): tell the watchers.
    EndAll(RoundEnd),
    /// The server sent this member to its job's owner, `to` (for logs; a
    /// [`Output::Disconnect`] follows).
    Redirected {
        /// The owner's endpoint.
        to: String,
        /// The server's reason.
        why: String,
    },
    /// Stop serving the connection: it is lost, and a new one will be asked for
    /// ([`Output::Dial`]) when the machine's timeout says.
    Disconnect,
    /// Open a connection: to `redirect` first if named (at most `redirect_deadline`; if it
    /// does not answer, the endpoint list), else the endpoint list from server `start`
    /// (wrapping around) within `deadline`. Answer [`Input::Connected`] or
    /// [`Input::DialFailed`].
    Dial {
        /// Which reconnection attempt this is (from 1), for logs.
        attempt: u32,
        /// Why the connection was lost, for logs.
        why: String,
        /// The server a `Redirect` named.
        redirect: Option<String>,
        /// The deadline for the named server.
        redirect_deadline: Duration,
        /// Which server of the endpoint list to try first.
        start: usize,
        /// The deadline for the endpoint list.
        deadline: Duration,
    },
    /// Write this join (with this member's place) on the new connection; answer
    /// [`Input::RejoinSent`], or [`Input::DialFailed`] when it cannot be written.
    Rejoin(Join),
    /// This member rejoined after reconnecting (for logs).
    Rejoined,
    /// The session is over, for the reason given (an error for the application).
    Ended(String),
}
