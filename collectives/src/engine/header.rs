//! A received frame header checked against the call this rank is making: the same call (op,
//! dtype, reduction, count, root, sequence number) and the expected payload length.

use super::{Engine, EngineError};
use crate::call::CallDesc;
use crate::error::CommError;
use crate::transport::frame::{self, HEADER_LEN};

impl Engine {
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
