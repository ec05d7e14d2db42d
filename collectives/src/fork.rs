//! Fork detection: a communicator is unusable in a forked child (its progress thread and its
//! peers belong to the parent), so calls there fail with [`CommError::Shutdown`] instead of
//! hanging, and dropping it there touches nothing the parent still uses.
//!
//! [`CommError::Shutdown`]: crate::CommError::Shutdown

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many forks this process is removed from the first process that loaded dtcomm.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static HOOK: Once = Once::new();

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The current fork generation; installs the `pthread_atfork` hook on first use.
pub(crate) fn generation() -> u64 {
    HOOK.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic (async-signal-safe).
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
    GENERATION.load(Ordering::Relaxed)
}
