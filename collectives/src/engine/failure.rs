//! A failed call's error: what an [`EngineError`] becomes for the caller. Aborts are passed on
//! naming the same lost rank, a peer that closed is reported to the membership service
//! (first-hand evidence), a round ended by the server is relayed, and the peers are told.

use super::{Engine, EngineError};
use crate::call::CallDesc;
use crate::error::CommError;
use crate::transport::ControlPlane;
use crate::transport::LinkError;
use crate::watchdog::Deadline;

impl Engine {
    /// The error a failed call returns: aborts are passed on, a lost peer is reported, and
    /// the peers are told.
    pub(crate) fn fail(
        &mut self,
        e: EngineError,
        call: &CallDesc,
        deadline: &Deadline,
    ) -> CommError {
        let elapsed = deadline.elapsed();
        let rank = self.rank;
        let err = match e {
            EngineError::Comm(c) => c,
            EngineError::Link(LinkError::Aborted {
                origin,
                lost,
                reason,
            }) => {
                // Pass the abort on, naming the same lost rank: this rank may be about to exit,
                // and a peer that sees it vanish must still learn the root cause.
                self.links.abort(lost, &reason);
                return CommError::Aborted {
                    rank,
                    origin,
                    lost,
                    call: *call,
                    elapsed,
                    reason,
                };
            }
            EngineError::Link(LinkError::Closed { peer, .. })
                if let Err(LinkError::Aborted {
                    origin,
                    lost: Some(lost),
                    reason,
                }) = self.links.check()
                    && lost != peer =>
            {
                // `peer` is gone, but another rank already reported an earlier loss: name the
                // root cause, not the rank that left because of it.
                self.links.abort(Some(lost), &reason);
                return CommError::Aborted {
                    rank,
                    origin,
                    lost: Some(lost),
                    call: *call,
                    elapsed,
                    reason,
                };
            }
            EngineError::Link(LinkError::RoundEnded(end)) => {
                let err = CommError::RoundEnded {
                    rank,
                    call: *call,
                    elapsed,
                    round: end.round,
                    lost: end.lost.map(|r| r as usize),
                    cause: end.why,
                    removed: end.removed,
                };
                // Peers hear it from the server too; this covers one whose server connection
                // is down at the moment.
                self.links
                    .abort(end.lost.map(|r| r as usize), &err.to_string());
                return err;
            }
            EngineError::Link(LinkError::Refused { peer, detail }) => CommError::Setup {
                rank,
                elapsed,
                detail: format!("linking rank {peer} for {call}: {detail}"),
            },
            EngineError::Link(LinkError::Closed {
                peer,
                graceful,
                detail,
            }) => CommError::PeerLost {
                rank,
                peer,
                call: *call,
                elapsed,
                detail: if graceful {
                    format!(
                        "{detail} (Connection closed by peer: it said goodbye before this call \
                         was done)"
                    )
                } else {
                    // First-hand evidence for the membership service (aborts relayed by peers
                    // are theirs to report; a goodbye is no loss).
                    self.fence.report_lost(peer, &detail);
                    detail
                },
            },
        };
        let lost = match &err {
            CommError::PeerLost { peer, .. } => Some(*peer),
            _ => None,
        };
        self.links.abort(lost, &err.to_string());
        err
    }
}
