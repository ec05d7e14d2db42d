//! `ncclUniqueId` as plain bytes, for sending it from rank 0 to the others.

use crate::bindings::{NCCL_UNIQUE_ID_BYTES, ncclUniqueId};

/// The size of an `ncclUniqueId` (128).
pub const UNIQUE_ID_BYTES: usize = NCCL_UNIQUE_ID_BYTES as usize;

/// The id's bytes, to send to the other ranks.
pub fn unique_id_to_bytes(id: &ncclUniqueId) -> [u8; UNIQUE_ID_BYTES] {
    id.internal.map(|c| c as u8)
}

/// The id from bytes [`unique_id_to_bytes`] produced (on any rank).
pub fn unique_id_from_bytes(bytes: &[u8; UNIQUE_ID_BYTES]) -> ncclUniqueId {
    ncclUniqueId {
        internal: bytes.map(|b| b as std::ffi::c_char),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip() {
        let mut bytes = [0u8; UNIQUE_ID_BYTES];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i * 7 + 200) as u8;
        }
        let id = unique_id_from_bytes(&bytes);
        assert_eq!(unique_id_to_bytes(&id), bytes);
        assert_eq!(size_of::<ncclUniqueId>(), UNIQUE_ID_BYTES);
    }
}
