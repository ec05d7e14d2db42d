//! The storage several `dt-rdzv serve` processes share (`--backend`): who owns which job, and
//! each job's last round, so that a server that takes a job over knows what it takes.
//!
//! The narrow surface the ownership logic needs (leases, a create-if-absent claim, plain keys),
//! with two implementations:
//!
//! * [`MemoryStorage`]: the in-memory twin, shared by servers of one process (tests, the
//!   simulation of an owner vanishing); it can be made unreachable to play an etcd outage;
//! * `EtcdStorage` (feature `etcd`): etcd v3 through `etcd-client`.
//!
//! Without `--backend` a server has no storage at all and owns every job it hears of, exactly as
//! before (no cost on the join path).

mod memory;

#[cfg(feature = "etcd")]
mod etcd;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

pub use memory::MemoryStorage;

/// A lease: keys attached to it vanish when it is not kept alive for its time to live.
pub type LeaseId = i64;

/// Why a storage call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StorageError {
    /// The storage could not be reached or did not answer in time (etcd down, partitioned).
    #[error("storage unreachable ({endpoints}): {why}")]
    Unreachable {
        /// Which storage.
        endpoints: String,
        /// What failed.
        why: String,
    },
    /// The storage answered with an error.
    #[error("storage error ({endpoints}): {why}")]
    Failed {
        /// Which storage.
        endpoints: String,
        /// What it said.
        why: String,
    },
    /// A `--backend` that does not parse or is not built in.
    #[error("--backend {0}")]
    Config(String),
}

/// The answer to [`Storage::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key now holds (or already held) the caller's value.
    Mine,
    /// Someone else's value is there.
    Held(Vec<u8>),
}

/// The shared storage (see the module docs). Every call has the implementation's deadline.
pub trait Storage: Send + Sync + 'static {
    /// Where it lives, for logs and errors (`etcd://h1:2379,h2:2379`, `memory`).
    fn describe(&self) -> String;

    /// A new lease living `ttl` unless kept alive.
    fn grant(&self, ttl: Duration) -> BoxFuture<'_, Result<LeaseId, StorageError>>;

    /// Keeps `lease` alive; `None` when it is gone (it expired: every key on it is deleted).
    fn keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<Option<Duration>, StorageError>>;

    /// Ends `lease` and deletes its keys.
    fn revoke(&self, lease: LeaseId) -> BoxFuture<'_, Result<(), StorageError>>;

    /// Puts `value` at `key` on `lease` if `key` is absent (atomically); answers
    /// [`Claim::Mine`] when it did, or when `key` already holds `value` on that lease's behalf,
    /// else what `key` holds.
    fn claim<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
        lease: LeaseId,
    ) -> BoxFuture<'a, Result<Claim, StorageError>>;

    /// Deletes `key` if it holds `value`; whether it did.
    fn delete_if<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<bool, StorageError>>;

    /// Sets `key` (no lease: it outlives its writer).
    fn put<'a>(&'a self, key: &'a str, value: &'a [u8]) -> BoxFuture<'a, Result<(), StorageError>>;

    /// The value at `key`.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StorageError>>;

    /// Deletes `key`.
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>>;
}

/// How the storage is reached beyond its addresses (the server's settings say it).
pub use crate::server::config::Access;

/// Opens the storage a `--backend` names: `etcd://host:port[,host:port...]` (feature `etcd`),
/// reached as `access` says. `timeout` bounds every call, connecting included.
pub async fn open(
    backend: &str,
    timeout: Duration,
    access: &Access,
) -> Result<Arc<dyn Storage>, StorageError> {
    match backend.split_once("://") {
        Some(("etcd", list)) => etcd_open(list, timeout, access).await,
        _ => Err(StorageError::Config(format!(
            "{backend:?}: expected etcd://host:port[,host:port...]"
        ))),
    }
}

#[cfg(feature = "etcd")]
async fn etcd_open(
    list: &str,
    timeout: Duration,
    access: &Access,
) -> Result<Arc<dyn Storage>, StorageError> {
    Ok(Arc::new(
        etcd::EtcdStorage::connect(list, timeout, access).await?,
    ))
}

#[cfg(not(feature = "etcd"))]
async fn etcd_open(
    list: &str,
    _timeout: Duration,
    _access: &Access,
) -> Result<Arc<dyn Storage>, StorageError> {
    Err(StorageError::Config(format!(
        "etcd://{list}: this dt-rdzv was built without the `etcd` feature \
         (cargo build -p dt-rdzv --features etcd)"
    )))
}
