//! [`StoreConfig`]: the store's settings, and the [`Limits`] on what clients can make it hold.

use std::time::Duration;

/// The store's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreConfig {
    /// Bounds on keys, values, watches and answers.
    pub limits: Limits,
    /// Purge a run no open connection touched for this long (`None`: never; see
    /// [`super::namespace`]).
    pub idle_ttl: Option<Duration>,
}

/// Bounds on what clients can make the store hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest key, bytes.
    pub max_key_bytes: usize,
    /// Most path components in a key: views and their JSON nest once per level, on a
    /// worker's stack (torch's deepest layout has 7).
    pub max_key_depth: usize,
    /// Largest value, bytes (etcd's request limit is 1.5 MiB).
    pub max_value_bytes: usize,
    /// Keys and values the whole store may hold, bytes (0: no limit).
    pub max_bytes: u64,
    /// Watches pending at once.
    pub max_watches: usize,
    /// Most bytes of keys and values one recursive read may answer with: the answer is built
    /// (and copied into JSON) while the store waits, so a read of a 450 MB tree would cost
    /// several times that and stall every other client. A larger read is refused, naming its
    /// size; torch's layouts read single keys or small directories.
    pub max_answer_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_key_bytes: 8 << 10,
            max_key_depth: 128,
            max_value_bytes: 3 << 19,
            max_bytes: 1 << 30,
            max_watches: 65536,
            max_answer_bytes: 64 << 20,
        }
    }
}

/// The longest TTL kept, seconds (100 years): a longer one is clamped to it, so that every
/// expiry is a date etcd's RFC 3339 `expiration` can show.
pub const MAX_TTL_SECS: u64 = 100 * 365 * 24 * 3600;
