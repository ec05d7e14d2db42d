//! Typed errors of the collective engine. Every variant names this rank and, where there is
//! one, the peer, the call (op, dtype, count, root, sequence number) and the time spent.

use std::time::Duration;

use crate::call::CallDesc;

/// Unproven connections a rank's data port dropped, or closed to make room, since its
/// communicator was built: a timeout names them, since strangers holding handshake slots can
/// delay a link. Empty (and printed as nothing) when there were none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Strangers {
    /// Connections dropped (no valid proof, or no slot).
    pub dropped: usize,
    /// Silent connections closed to make room for newer ones.
    pub evicted: usize,
    /// Up to [`Strangers::SOURCES`] of the addresses they came from, first seen first.
    pub sources: Vec<std::net::IpAddr>,
}

impl Strangers {
    /// How many source addresses are kept.
    pub const SOURCES: usize = 4;

    /// Counts one more from `from`.
    pub(crate) fn note(&mut self, from: std::net::IpAddr, evicted: bool) {
        if evicted {
            self.evicted += 1;
        } else {
            self.dropped += 1;
        }
        if self.sources.len() < Self::SOURCES && !self.sources.contains(&from) {
            self.sources.push(from);
        }
    }
}

impl std::fmt::Display for Strangers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.dropped + self.evicted == 0 {
            return Ok(());
        }
        let from: Vec<String> = self.sources.iter().map(|a| a.to_string()).collect();
        write!(
            f,
            "; meanwhile this rank's data port dropped {} unproven connection(s) and closed {} \
             silent one(s) to make room, from {}{}",
            self.dropped,
            self.evicted,
            from.join(", "),
            if self.sources.len() == Self::SOURCES {
                ", ..."
            } else {
                ""
            }
        )
    }
}

/// An error of a [`Communicator`](crate::Communicator) call. Once a call fails, the
/// communicator is failed: every later call returns [`CommError::Failed`] wrapping the first
/// error, at once.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommError {
    /// The call ran past its deadline (`DTCOMM_TIMEOUT`).
    #[error(
        "rank {rank}: {call} timed out after {elapsed:?}; not heard from ranks {waiting_for:?}{}{strangers}",
        if suspects.is_empty() { String::new() } else { format!("; ranks {suspects:?} appear not to have entered the call") }
    )]
    Timeout {
        /// This rank.
        rank: usize,
        /// The call.
        call: CallDesc,
        /// Time since the call started.
        elapsed: Duration,
        /// Ranks this rank was still waiting to receive from.
        waiting_for: Vec<usize>,
        /// Following the stall reports other ranks sent at half the deadline ("I wait for
        /// X"): the ranks that are waited on but did not report waiting themselves, i.e. the
        /// likely culprits. Empty when nothing is known beyond `waiting_for`.
        suspects: Box<[usize]>,
        /// Unproven connections this rank's data port dropped meanwhile (strangers can delay
        /// a link; the timeout says so). Boxed: errors stay small.
        strangers: Box<Strangers>,
    },
    /// A peer's connection broke without a goodbye: the process died or the network failed.
    #[error("rank {rank}: rank {peer} was lost during {call} after {elapsed:?}: {detail}")]
    PeerLost {
        /// This rank.
        rank: usize,
        /// The lost rank.
        peer: usize,
        /// The call in progress.
        call: CallDesc,
        /// Time since the call started.
        elapsed: Duration,
        /// What the socket said.
        detail: String,
    },
    /// Another rank failed and told everyone.
    #[error(
        "rank {rank}: {call} aborted after {elapsed:?} because rank {origin} failed{}: {reason}",
        lost.map(|l| format!(" (lost rank {l})")).unwrap_or_default()
    )]
    Aborted {
        /// This rank.
        rank: usize,
        /// The rank that reported the failure.
        origin: usize,
        /// The rank that died, when the failure was a lost rank.
        lost: Option<usize>,
        /// The call in progress here.
        call: CallDesc,
        /// Time since the call started.
        elapsed: Duration,
        /// The origin's error message.
        reason: String,
    },
    /// The membership service (the rendezvous server) ended this communicator's round: a
    /// member was lost or left, the job was stopped, or this member was removed. Build the
    /// next round's communicator (or, if `removed`, this member is out of the job).
    #[error(
        "rank {rank}: {call} failed after {elapsed:?}: {}: {cause}",
        if *removed {
            format!("this member was removed from round {round}")
        } else {
            format!(
                "round {round} ended{}",
                lost.map(|l| format!(" (lost rank {l})")).unwrap_or_default()
            )
        }
    )]
    RoundEnded {
        /// This rank.
        rank: usize,
        /// The call in progress (or the one that was about to start).
        call: CallDesc,
        /// Time since the call started.
        elapsed: Duration,
        /// The communicator's round.
        round: u64,
        /// The rank whose loss or departure ended it, when that was the cause.
        lost: Option<usize>,
        /// The server's words.
        cause: String,
        /// This member itself is out of the job.
        removed: bool,
    },
    /// Two ranks called different collectives (or the same with different arguments).
    #[error("{MISMATCH_PREFIX}rank {rank} called {ours} but rank {peer} called {theirs}")]
    Mismatch {
        /// This rank.
        rank: usize,
        /// The rank whose frame disagreed.
        peer: usize,
        /// This rank's call.
        ours: CallDesc,
        /// The peer's call, from its frame header.
        theirs: CallDesc,
    },
    /// A peer sent bytes that are not a valid frame.
    #[error("rank {rank}: protocol error from rank {peer} during {call}: {detail}")]
    Protocol {
        /// This rank.
        rank: usize,
        /// The sender.
        peer: usize,
        /// The call in progress.
        call: CallDesc,
        /// What was wrong.
        detail: String,
    },
    /// Setting up the communicator failed (store, listen, connect, handshake).
    #[error("rank {rank}: communicator setup failed after {elapsed:?}: {detail}")]
    Setup {
        /// This rank.
        rank: usize,
        /// Time spent.
        elapsed: Duration,
        /// What failed, naming peers and addresses.
        detail: String,
    },
    /// The arguments of a call are inconsistent (buffer lengths, root out of range, ...).
    /// Nothing was sent and the communicator stays usable.
    #[error("rank {rank}: invalid arguments to {op}: {detail}")]
    InvalidArgument {
        /// This rank.
        rank: usize,
        /// The call's name.
        op: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The communicator was shut down (or this is a forked child of the process that built
    /// it); nothing was sent.
    #[error("rank {rank}: {op} after the communicator was shut down: {detail}")]
    Shutdown {
        /// This rank.
        rank: usize,
        /// The call's name.
        op: &'static str,
        /// Why the communicator is unusable here.
        detail: String,
    },
    /// Waiting on a [`Work`](crate::Work) gave up before the call finished (the call goes on;
    /// its own deadline still applies).
    #[error("rank {rank}: {op} did not complete within {waited:?} (Work.wait timeout)")]
    WaitTimeout {
        /// This rank.
        rank: usize,
        /// The call's name.
        op: &'static str,
        /// How long the caller waited.
        waited: Duration,
    },
    /// A device call failed in CUDA or NCCL, or the ranks could not agree on a path for device
    /// buffers. `detail` carries NCCL's code, its name and its last-error text where NCCL
    /// failed. When the path could not be agreed the communicator stays usable for host calls
    /// (every rank got the same answer); any other device failure fails it and tells the peers.
    #[error("rank {rank}: {call} on the device failed after {elapsed:?}: {detail}")]
    Device {
        /// This rank.
        rank: usize,
        /// The call.
        call: CallDesc,
        /// Time since the call started.
        elapsed: Duration,
        /// What failed.
        detail: String,
    },
    /// The call was interrupted on this rank: a signal handler raised while it waited (Python's
    /// Ctrl-C), or a caller waiting on it was interrupted. The communicator is failed and the
    /// peers are told.
    #[error("rank {rank}: {call} interrupted after {elapsed:?}: {reason}")]
    Interrupted {
        /// This rank.
        rank: usize,
        /// The call.
        call: CallDesc,
        /// Time since the call started.
        elapsed: Duration,
        /// What interrupted it.
        reason: String,
    },
    /// An earlier call failed; the communicator refuses further work.
    #[error("communicator is failed since an earlier call: {0}")]
    Failed(Box<CommError>),
}

/// How a [`CommError::Mismatch`] message starts; an [`CommError::Aborted`] whose reason starts
/// so (a bystander told of a mismatch between two other ranks) has the code
/// [`ErrorCode::Mismatch`].
const MISMATCH_PREFIX: &str = "mismatched calls: ";

dt_rdzv_proto::wire_enum! {
    /// The stable numeric code of an error: the C ABI's `dtcomm_result_t` and the `code`
    /// attribute of Python's exceptions. Values never change meaning; new ones are appended.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ErrorCode: i32 {
        /// Success (never carried by a [`CommError`]).
        Ok = 0 => "ok",
        /// Bad arguments: [`CommError::InvalidArgument`].
        InvalidArgument = 1 => "invalid_argument",
        /// A deadline passed: [`CommError::Timeout`].
        Timeout = 2 => "timeout",
        /// A peer vanished: [`CommError::PeerLost`].
        PeerLost = 3 => "peer_lost",
        /// Another rank failed and said so: [`CommError::Aborted`].
        Aborted = 4 => "aborted",
        /// Ranks disagree on the call: [`CommError::Mismatch`].
        Mismatch = 5 => "mismatch",
        /// A peer sent an invalid frame: [`CommError::Protocol`].
        Protocol = 6 => "protocol",
        /// Building the communicator failed: [`CommError::Setup`].
        Setup = 7 => "setup",
        /// An earlier call failed the communicator: [`CommError::Failed`].
        Failed = 8 => "failed",
        /// The communicator was shut down, or used from a forked child: [`CommError::Shutdown`].
        Shutdown = 9 => "shutdown",
        /// A bug in dtcomm (a panic caught at an API boundary). Reserved for front ends.
        Internal = 10 => "internal",
        /// The membership service ended the communicator's round: [`CommError::RoundEnded`]. (11
        /// is the C ABI's "still in progress", never an error.)
        RoundEnded = 12 => "round_ended",
        /// CUDA or NCCL failed, or no path for device buffers: [`CommError::Device`].
        Device = 13 => "device",
        /// The call was interrupted (a signal on this rank): [`CommError::Interrupted`].
        Interrupted = 14 => "interrupted",
    }
    /// Every code, in number order.
    pub const ALL;
    /// The name of the code (`"timeout"`, `"peer_lost"`, ...).
    pub const fn name;
}

impl CommError {
    /// The stable numeric code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            CommError::Timeout { .. } | CommError::WaitTimeout { .. } => ErrorCode::Timeout,
            CommError::PeerLost { .. } => ErrorCode::PeerLost,
            CommError::RoundEnded { .. } => ErrorCode::RoundEnded,
            CommError::Aborted { reason, .. } if reason.starts_with(MISMATCH_PREFIX) => {
                ErrorCode::Mismatch
            }
            CommError::Aborted { .. } => ErrorCode::Aborted,
            CommError::Mismatch { .. } => ErrorCode::Mismatch,
            CommError::Protocol { .. } => ErrorCode::Protocol,
            CommError::Setup { .. } => ErrorCode::Setup,
            CommError::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            CommError::Shutdown { .. } => ErrorCode::Shutdown,
            CommError::Failed(_) => ErrorCode::Failed,
            CommError::Device { .. } => ErrorCode::Device,
            CommError::Interrupted { .. } => ErrorCode::Interrupted,
        }
    }

    /// The original error of a failed communicator (unwraps [`CommError::Failed`]).
    pub fn root_cause(&self) -> &CommError {
        match self {
            CommError::Failed(e) => e.root_cause(),
            e => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_code_table_is_stable() {
        let mut codes = std::collections::HashSet::new();
        assert_eq!(ErrorCode::SPELLINGS.len(), ErrorCode::ALL.len());
        for (&(c, spellings), all) in ErrorCode::SPELLINGS.iter().zip(ErrorCode::ALL) {
            assert_eq!(c, all);
            assert!(codes.insert(c as i32), "{c:?}: code {} twice", c as i32);
            assert_eq!(spellings, [c.name()]);
            assert_eq!(c.to_string(), c.name());
        }
        let numbers: Vec<i32> = ErrorCode::ALL.iter().map(|c| *c as i32).collect();
        assert_eq!(numbers, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14]);
        assert_eq!(ErrorCode::RoundEnded.name(), "round_ended");
    }
}
