//! A received frame header checked against the call this rank is making: the same call (op,
//! dtype, reduction, count, root, sequence number) and the expected payload length.

use super::{Engine, EngineError, Rx};
use crate::call::CallDesc;
use crate::error::CommError;
use crate::transport::frame::{self, HEADER_LEN};
use crate::transport::{DataPlane, LinkError};

impl Engine {
    /// `e` (a send that failed: typically the peer aborted after it saw a mismatch in what
    /// this rank sent), unless a header already waiting from a peer this call receives from
    /// shows the mismatch itself: then that, so that both ranks of a mismatch name both calls
    /// whichever saw it first.
    pub(super) fn mismatch_first(
        &mut self,
        rxs: &[Rx],
        call: &CallDesc,
        e: LinkError,
    ) -> EngineError {
        for r in rxs.iter().filter(|r| !r.checked && r.got < HEADER_LEN) {
            let Some(f) = r.frames.front() else { continue };
            let mut hdr = r.hdr;
            let need = HEADER_LEN - r.got;
            let peeked = self.links.peek(r.id.0, r.id.1, &mut hdr[r.got..]);
            if peeked.is_ok_and(|n| n >= need)
                && let Err(m @ EngineError::Comm(CommError::Mismatch { .. })) =
                    self.check_header(r.id.0, &hdr, call, f.range.1 - f.range.0)
            {
                return m;
            }
        }
        EngineError::Link(e)
    }

    pub(super) fn check_header(
        &self,
        peer: usize,
        hdr: &[u8; HEADER_LEN],
        call: &CallDesc,
        len: usize,
    ) -> Result<(), EngineError> {
        let (theirs, plen) = frame::decode(hdr).map_err(|detail| {
            EngineError::Comm(CommError::Protocol {
                rank: self.rank,
                peer,
                call: *call,
                detail,
            })
        })?;
        if theirs != *call {
            return Err(EngineError::Comm(CommError::Mismatch {
                rank: self.rank,
                peer,
                ours: *call,
                theirs,
            }));
        }
        if plen != len {
            return Err(EngineError::Comm(CommError::Protocol {
                rank: self.rank,
                peer,
                call: *call,
                detail: format!(
                    "frame of {plen} bytes where {len} were expected (different per-rank counts in a v-collective?)"
                ),
            }));
        }
        Ok(())
    }
}
