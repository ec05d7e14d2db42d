//! Typed errors of the collective engine. Every variant names this rank and, where there is
//! one, the peer, the call (op, dtype, count, root, sequence number) and the time spent.

use std::fmt;
use std::time::Duration;

use crate::dtype::DType;
use crate::op::ReduceOp;

/// The kind of a collective or point-to-point call; its `u8` value travels in frame headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OpKind {
    /// `all_reduce`.
    AllReduce = 1,
    /// `broadcast`.
    Broadcast = 2,
    /// `reduce`.
    Reduce = 3,
    /// `all_gather` and `all_gather_v`.
    AllGather = 4,
    /// `reduce_scatter`.
    ReduceScatter = 5,
    /// `gather`.
    Gather = 6,
    /// `scatter`.
    Scatter = 7,
    /// `all_to_all` and `all_to_all_v`.
    AllToAll = 8,
    /// `barrier`.
    Barrier = 9,
    /// `send` / `recv` (point to point).
    SendRecv = 10,
}

impl OpKind {
    const ALL: [OpKind; 10] = [
        OpKind::AllReduce,
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::AllGather,
        OpKind::ReduceScatter,
        OpKind::Gather,
        OpKind::Scatter,
        OpKind::AllToAll,
        OpKind::Barrier,
        OpKind::SendRecv,
    ];

    /// The snake-case name of the call.
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::AllReduce => "all_reduce",
            OpKind::Broadcast => "broadcast",
            OpKind::Reduce => "reduce",
            OpKind::AllGather => "all_gather",
            OpKind::ReduceScatter => "reduce_scatter",
            OpKind::Gather => "gather",
            OpKind::Scatter => "scatter",
            OpKind::AllToAll => "all_to_all",
            OpKind::Barrier => "barrier",
            OpKind::SendRecv => "send/recv",
        }
    }

    pub(crate) fn from_u8(v: u8) -> Option<OpKind> {
        OpKind::ALL.iter().copied().find(|o| *o as u8 == v)
    }
}

/// One call as the engine sees it; what a frame header carries and what errors print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallDesc {
    /// Which call.
    pub op: OpKind,
    /// Element type.
    pub dtype: DType,
    /// Reduction operator, for reducing calls.
    pub redop: Option<ReduceOp>,
    /// Total element count of the call (the whole buffer; for point to point, the message).
    pub count: u64,
    /// Root rank of rooted calls.
    pub root: Option<usize>,
    /// Sequence number: collectives count up per communicator, point-to-point per pair.
    pub seq: u64,
}

impl fmt::Display for CallDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}(seq {}, {} x {}",
            self.op.name(),
            self.seq,
            self.dtype,
            self.count
        )?;
        if let Some(r) = self.redop {
            write!(f, ", {r}")?;
        }
        if let Some(r) = self.root {
            write!(f, ", root {r}")?;
        }
        f.write_str(")")
    }
}

/// An error of a [`Communicator`](crate::Communicator) call. Once a call fails, the
/// communicator is failed: every later call returns [`CommError::Failed`] wrapping the first
/// error, at once.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommError {
    /// The call ran past its deadline (`DTCOMM_TIMEOUT`).
    #[error(
        "rank {rank}: {call} timed out after {elapsed:?}; not heard from ranks {waiting_for:?}{}",
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
        suspects: Vec<usize>,
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
    /// Two ranks called different collectives (or the same with different arguments).
    #[error("mismatched calls: rank {rank} called {ours} but rank {peer} called {theirs}")]
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
    #[error("rank {rank}: invalid arguments to {op}: {detail}")]
    InvalidArgument {
        /// This rank.
        rank: usize,
        /// The call's name.
        op: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// An earlier call failed; the communicator refuses further work.
    #[error("communicator is failed since an earlier call: {0}")]
    Failed(Box<CommError>),
}

impl CommError {
    /// The original error of a failed communicator (unwraps [`CommError::Failed`]).
    pub fn root_cause(&self) -> &CommError {
        match self {
            CommError::Failed(e) => e.root_cause(),
            e => e,
        }
    }
}
