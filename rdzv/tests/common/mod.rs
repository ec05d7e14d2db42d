//! What the native-protocol test binaries share.

/// A two-thread runtime for the clients of one test (each server runs its own).
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
