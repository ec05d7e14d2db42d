//! [`EngineConfig`]: the engine's settings (namespace TTL, value limit, byte quotas).

use std::time::Duration;

use super::super::limits::Limits;

/// Engine settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Purge a namespace this long after its last connection closed (`None`: never).
    pub namespace_ttl: Option<Duration>,
    /// Largest value a key may hold, in bytes (torch: 8 MiB, inclusive). The decoder refuses
    /// a longer SET; the engine refuses an APPEND that would grow a value past it.
    pub max_value_bytes: u64,
    /// Most bytes (keys and values, KV and queues) one namespace may hold (`None`: no limit).
    /// A write that would pass it closes its connection and stores nothing.
    pub max_namespace_bytes: Option<u64>,
    /// Most bytes the whole store may hold (`None`: no limit); as above.
    pub max_store_bytes: Option<u64>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            namespace_ttl: Some(Duration::from_secs(300)),
            max_value_bytes: Limits::default().max_value_bytes,
            max_namespace_bytes: Some(DEFAULT_MAX_NAMESPACE_BYTES),
            max_store_bytes: Some(DEFAULT_MAX_STORE_BYTES),
        }
    }
}

/// Default [`EngineConfig::max_namespace_bytes`]: 1 GiB.
pub const DEFAULT_MAX_NAMESPACE_BYTES: u64 = 1 << 30;
/// Default [`EngineConfig::max_store_bytes`]: 4 GiB.
pub const DEFAULT_MAX_STORE_BYTES: u64 = 4 << 30;
