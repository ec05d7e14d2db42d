//! NCCL version codes (`NCCL_VERSION_CODE`, `ncclGetVersion`) and the versions this crate
//! needs.

use std::fmt;

use crate::bindings;

/// An NCCL release, e.g. 2.30.7.
///
/// Ordered by release, so `found >= Version::MINIMUM` is the check it reads like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major version (2 for every NCCL this crate supports).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch level.
    pub patch: u32,
}

impl Version {
    /// The oldest NCCL this crate loads: 2.18 has every required symbol, `ncclCommSplit` and
    /// the `ncclConfig_t` fields up to `splitShare`.
    pub const MINIMUM: Version = Version::new(2, 18, 0);

    /// The release whose `nccl.h` [`bindings`] was generated from.
    pub const HEADER: Version = Version::new(
        bindings::NCCL_MAJOR,
        bindings::NCCL_MINOR,
        bindings::NCCL_PATCH,
    );

    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Decodes an `NCCL_VERSION_CODE` as `ncclGetVersion` returns it.
    ///
    /// NCCL's `NCCL_VERSION(X, Y, Z)` macro is `X*1000 + Y*100 + Z` up to 2.8 and
    /// `X*10000 + Y*100 + Z` from 2.9 on (23007 is 2.30.7, 2708 is 2.7.8). `None` for a code
    /// no release has (negative or zero).
    pub const fn from_code(code: i32) -> Option<Self> {
        if code <= 0 {
            return None;
        }
        let code = code as u32;
        if code >= 10_000 {
            Some(Version::new(code / 10_000, code % 10_000 / 100, code % 100))
        } else {
            Some(Version::new(code / 1000, code % 1000 / 100, code % 100))
        }
    }

    /// The `NCCL_VERSION_CODE` of this version (the inverse of [`Version::from_code`]).
    pub const fn code(self) -> u32 {
        if self.major <= 2 && self.minor <= 8 {
            self.major * 1000 + self.minor * 100 + self.patch
        } else {
            self.major * 10_000 + self.minor * 100 + self.patch
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_both_code_formats() {
        assert_eq!(Version::from_code(23005), Some(Version::new(2, 30, 5)));
        assert_eq!(Version::from_code(21805), Some(Version::new(2, 18, 5)));
        assert_eq!(Version::from_code(20903), Some(Version::new(2, 9, 3)));
        assert_eq!(Version::from_code(2708), Some(Version::new(2, 7, 8)));
        assert_eq!(Version::from_code(2408), Some(Version::new(2, 4, 8)));
        assert_eq!(Version::from_code(0), None);
        assert_eq!(Version::from_code(-1), None);
    }

    #[test]
    fn code_round_trips() {
        for code in [2408, 2708, 20903, 21805, 23007, 30000, 31204] {
            assert_eq!(Version::from_code(code).unwrap().code(), code as u32);
        }
        assert_eq!(Version::HEADER.code(), bindings::NCCL_VERSION_CODE);
    }

    #[test]
    fn orders_by_release_and_displays() {
        assert!(Version::new(2, 9, 0) > Version::new(2, 8, 4));
        assert!(Version::new(2, 18, 0) > Version::new(2, 9, 9));
        assert!(Version::from_code(21703).unwrap() < Version::MINIMUM);
        assert!(Version::from_code(21801).unwrap() >= Version::MINIMUM);
        assert_eq!(Version::new(2, 30, 5).to_string(), "2.30.5");
    }
}
