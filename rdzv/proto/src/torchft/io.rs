//! [`Input`] and [`Output`]: what a driver tells the [`Lighthouse`](super::Lighthouse) and
//! what it carries out.

use super::departure::Departure;
use super::error::Refusal;
use super::member::Member;
use super::rule::Quorum;

/// A driver's name for one call (a gRPC request), unique while the call is open.
pub type CallId = u64;

/// What the driver tells the Lighthouse, with the time it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// `LighthouseService/Quorum`: `member` asks to join the next quorum of `job` (and this
    /// counts as its heartbeat). Answered by [`Output::Quorum`] once a quorum containing it is
    /// issued, or at once when refused.
    Quorum {
        /// The call.
        call: CallId,
        /// The job key (`""`: the default job).
        job: String,
        /// The requester.
        member: Member,
    },
    /// `LighthouseService/Heartbeat`; answered at once by [`Output::Heartbeat`].
    Heartbeat {
        /// The call.
        call: CallId,
        /// The job key.
        job: String,
        /// Who beats.
        replica_id: String,
    },
    /// A waiting quorum call ended (its deadline passed, its client went away): forget it.
    /// Its join stays until the next quorum, as in torchft (its heartbeats decide).
    Cancel {
        /// The call.
        call: CallId,
    },
}

/// What the Lighthouse asks of the driver, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// The answer to a [`Input::Quorum`] call.
    Quorum {
        /// The call.
        call: CallId,
        /// A quorum that contains the requester, or why not.
        result: Result<Quorum, Refusal>,
    },
    /// The answer to a [`Input::Heartbeat`] call.
    Heartbeat {
        /// The call.
        call: CallId,
        /// Recorded, or why not.
        result: Result<(), Refusal>,
    },
    /// A quorum was issued (for the log); its members' answers follow.
    Issued {
        /// The job.
        job: String,
        /// The quorum.
        quorum: Quorum,
        /// The rule's reason.
        reason: String,
        /// Members of the previous quorum not in this one, and why.
        left: Vec<Departure>,
        /// Whether it is a new quorum, not the previous one issued again for the next step
        /// (torchft issues one per step; only new ones are worth an info line).
        changed: bool,
    },
}
