//! The `Store` trait: the key-value rendezvous surface every dtcomm layer talks to.
//!
//! It is the narrow interface of torch's `c10d::Store`: set, blocking get, counters,
//! compare-and-set and waits with deadlines. Implementations:
//!
//! * [`MemoryStore`]: the in-memory twin, for tests and single-process use;
//! * [`crate::client::TcpStoreClient`]: the blocking client of the c10d TCPStore wire protocol,
//!   which talks to `dt-rdzv serve` (or to torch's own TCPStore server);
//! * [`PrefixStore`]: namespaces any store, like torch's `PrefixStore`.
//!
//! Keys are strings, as the Python API has them. A client puts them on the wire with torch's
//! `/` prefix, so a key written here is the key a torch client reads.

mod error;
mod memory;
mod prefix;

use std::time::Duration;

pub use error::StoreError;
pub use memory::MemoryStore;
pub use prefix::PrefixStore;

/// A rendezvous key-value store. Every blocking call has a deadline.
pub trait Store: Send + Sync {
    /// Stores `value` under `key`, waking anyone waiting for the key.
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError>;

    /// Returns the value of `key`, waiting up to `timeout` for it to appear.
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError>;

    /// Adds `delta` to the decimal counter at `key` (missing counts as 0) and returns the sum.
    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError>;

    /// Compare-and-set with torch's rules; returns the value the server answered with
    /// (equal to `desired` exactly when the swap happened, see
    /// [`dt_rdzv_proto::tcpstore::semantics::compare_set`]).
    fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError>;

    /// Waits until every key exists, up to `timeout`; the error names the keys still missing.
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError>;

    /// Whether every key exists now.
    fn check(&self, keys: &[&str]) -> Result<bool, StoreError>;

    /// Deletes `key`; true if it existed.
    fn delete_key(&self, key: &str) -> Result<bool, StoreError>;

    /// Appends `value` to the value at `key` (creating it).
    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError>;

    /// Number of keys in the store (the whole store, not only this prefix).
    fn num_keys(&self) -> Result<i64, StoreError>;

    /// Waits for every key, then returns their values in order.
    fn multi_get(&self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>, StoreError> {
        self.wait(keys, timeout)?;
        keys.iter().map(|k| self.get(k, timeout)).collect()
    }

    /// Sets every pair, in order.
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<(), StoreError> {
        if keys.len() != values.len() {
            return Err(StoreError::InvalidArgument(format!(
                "multi_set: {} keys but {} values",
                keys.len(),
                values.len()
            )));
        }
        keys.iter()
            .zip(values)
            .try_for_each(|(k, v)| self.set(k, v))
    }
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        (**self).set(key, value)
    }
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        (**self).get(key, timeout)
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        (**self).add(key, delta)
    }
    fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        (**self).compare_set(key, expected, desired)
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        (**self).wait(keys, timeout)
    }
    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        (**self).check(keys)
    }
    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        (**self).delete_key(key)
    }
    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        (**self).append(key, value)
    }
    fn num_keys(&self) -> Result<i64, StoreError> {
        (**self).num_keys()
    }
    fn multi_get(&self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>, StoreError> {
        (**self).multi_get(keys, timeout)
    }
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<(), StoreError> {
        (**self).multi_set(keys, values)
    }
}
