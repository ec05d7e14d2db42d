//! How a round ended, in one type for the client's watchers and the engine's round fence.

use super::messages::RoundCause;

/// How a round ended: what a member's watchers hear from the server, and what a fenced
/// communicator fails with (`dtcomm`'s `RoundFence`). One type for both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundEnd {
    /// The last round that ended (for a job's end or a removal: the round the member was in,
    /// as far as the session knows; `u64::MAX` when it never had one).
    pub round: u64,
    /// The rank whose loss or departure ended it, when that was the cause.
    pub lost: Option<u32>,
    /// The server's words.
    pub why: String,
    /// This member itself was removed (declared lost, or its connection closed by the server):
    /// it is in no round any more.
    pub removed: bool,
}

impl RoundEnd {
    /// The end the server announced with `RoundEnded { round, cause }`.
    pub fn from_cause(round: u64, cause: &RoundCause) -> RoundEnd {
        let lost = match cause {
            RoundCause::MemberLost { rank, .. } | RoundCause::MemberLeft { rank, .. } => {
                Some(*rank)
            }
            _ => None,
        };
        RoundEnd {
            round,
            lost,
            why: cause.to_string(),
            removed: false,
        }
    }
}
