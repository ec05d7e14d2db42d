//! [`WallClock`]: how the store dates a monotonic `now`. etcd's answers show when a key
//! expires as a date (`expiration`, RFC 3339), so the store keeps its TTL deadlines in Unix
//! milliseconds; every input's time is an [`Instant`], as for every core of this crate, and
//! the store dates it from one instant whose Unix time the driver read once.

use std::time::{Duration, Instant};

/// The Unix time at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    /// The instant.
    pub at: Instant,
    /// Its Unix time, in milliseconds.
    pub unix_ms: u64,
}

impl WallClock {
    /// `at` is `unix_ms` milliseconds after the Unix epoch.
    pub fn new(at: Instant, unix_ms: u64) -> Self {
        Self { at, unix_ms }
    }

    /// The Unix time of `t`, in milliseconds.
    pub fn unix_ms_at(&self, t: Instant) -> u64 {
        match t.checked_duration_since(self.at) {
            Some(after) => self.unix_ms.saturating_add(after.as_millis() as u64),
            None => self
                .unix_ms
                .saturating_sub(self.at.duration_since(t).as_millis() as u64),
        }
    }

    /// The instant of Unix time `unix_ms` (`None` if no [`Instant`] can hold it).
    pub fn instant_at(&self, unix_ms: u64) -> Option<Instant> {
        if unix_ms >= self.unix_ms {
            self.at
                .checked_add(Duration::from_millis(unix_ms - self.unix_ms))
        } else {
            self.at
                .checked_sub(Duration::from_millis(self.unix_ms - unix_ms))
        }
    }
}
