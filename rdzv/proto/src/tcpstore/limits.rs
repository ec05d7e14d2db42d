//! Size limits, checked on length prefixes before a body is read.

/// Request size limits. The defaults are torch's libuv server's, plus a frame cap that bounds
/// the memory one connection can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest key, in bytes (torch: 8192).
    pub max_key_bytes: u64,
    /// Longest value, in bytes (torch: 8 MiB, inclusive).
    pub max_value_bytes: u64,
    /// Most keys in one CHECK, WAIT, MULTI_GET or MULTI_SET (torch: 131072).
    pub max_keys_per_request: u64,
    /// Largest whole request, in bytes (ours: bounds a MULTI_SET of many large values).
    pub max_frame_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_key_bytes: 8 * 1024,
            max_value_bytes: 8 * 1024 * 1024,
            max_keys_per_request: 128 * 1024,
            max_frame_bytes: 64 * 1024 * 1024,
        }
    }
}
