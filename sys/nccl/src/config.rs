//! `ncclConfig_t` as `NCCL_CONFIG_INITIALIZER` sets it up.
//!
//! The struct grows with NCCL releases but describes itself: `size` and `version` say which
//! fields the caller knows, and NCCL copies at most its own `sizeof(ncclConfig_t)` bytes of
//! it and gives fields newer than `version` their defaults. A config built from this crate's
//! header is therefore right for older libraries (they ignore the tail) and newer ones (they
//! default what this header lacks). `magic` tells NCCL it was initialized at all.

use std::ffi::c_int;
use std::ptr;

use crate::bindings::{NCCL_API_MAGIC, NCCL_CONFIG_UNDEF_INT, NCCL_VERSION_CODE, ncclConfig_t};

/// `NCCL_CONFIG_INITIALIZER` of this crate's header: size, magic and version set, every
/// attribute undefined (NCCL picks it, or takes it from its `NCCL_*` variables).
pub const fn config_initializer() -> ncclConfig_t {
    const UNDEF: c_int = NCCL_CONFIG_UNDEF_INT;
    ncclConfig_t {
        size: size_of::<ncclConfig_t>(),
        magic: NCCL_API_MAGIC,
        version: NCCL_VERSION_CODE,
        blocking: UNDEF,
        cgaClusterSize: UNDEF,
        minCTAs: UNDEF,
        maxCTAs: UNDEF,
        netName: ptr::null(),
        splitShare: UNDEF,
        trafficClass: UNDEF,
        commName: ptr::null(),
        collnetEnable: UNDEF,
        CTAPolicy: UNDEF,
        shrinkShare: UNDEF,
        nvlsCTAs: UNDEF,
        nChannelsPerNetPeer: UNDEF,
        nvlinkCentricSched: UNDEF,
        graphUsageMode: UNDEF,
        numRmaCtx: UNDEF,
        maxP2pPeers: UNDEF,
        graphStreamOrdering: UNDEF,
    }
}

/// Whether `config` still carries what [`config_initializer`] set: this struct's size, the
/// magic, and a version no newer than this header (NCCL would read fields that aren't there).
pub fn is_initialized(config: &ncclConfig_t) -> bool {
    config.size == size_of::<ncclConfig_t>()
        && config.magic == NCCL_API_MAGIC
        && config.version <= NCCL_VERSION_CODE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initializer_matches_the_c_macro() {
        let config = config_initializer();
        assert_eq!(config.size, 96);
        assert_eq!(config.magic, 0xcafe_beef);
        assert_eq!(config.version, 23007);
        assert_eq!(config.blocking, i32::MIN);
        assert_eq!(config.graphStreamOrdering, i32::MIN);
        assert!(config.netName.is_null() && config.commName.is_null());
        assert!(is_initialized(&config));

        let mut zeroed = config;
        zeroed.magic = 0;
        assert!(!is_initialized(&zeroed));
        let mut oversized = config;
        oversized.size += 8;
        assert!(!is_initialized(&oversized));
    }
}
