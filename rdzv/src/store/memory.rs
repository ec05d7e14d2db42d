//! `MemoryStore`: the in-memory twin of the store, for tests and single-process jobs.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dt_rdzv_proto::tcpstore::semantics;

use super::{Store, StoreError};

/// A thread-safe store in this process. Same value rules as `dt-rdzv serve` (it shares
/// [`semantics`] with the server engine); waits park on a condition variable.
#[derive(Debug, Default)]
pub struct MemoryStore {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<u8>>> {
        // A panic while holding the lock cannot leave the map half-updated (every mutation
        // is a single insert or remove), so a poisoned lock is still usable.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn put(&self, key: &str, value: Vec<u8>) {
        self.lock().insert(key.to_owned(), value);
        self.changed.notify_all();
    }
}

impl Store for MemoryStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.put(key, value.to_vec());
        Ok(())
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        self.wait(&[key], timeout)?;
        Ok(self.lock().get(key).cloned().unwrap_or_default())
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        let mut map = self.lock();
        let value = semantics::add(map.get(key).map(Vec::as_slice), delta).map_err(|source| {
            StoreError::Counter {
                key: key.to_owned(),
                source,
            }
        })?;
        map.insert(key.to_owned(), semantics::encode_counter(value));
        drop(map);
        self.changed.notify_all();
        Ok(value)
    }

    fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        let mut map = self.lock();
        let outcome = semantics::compare_set(map.get(key).map(Vec::as_slice), expected, desired);
        if let Some(v) = outcome.store {
            map.insert(key.to_owned(), v);
            drop(map);
            self.changed.notify_all();
        }
        Ok(outcome.reply)
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut map = self.lock();
        loop {
            let missing: Vec<String> = keys
                .iter()
                .filter(|k| !map.contains_key(**k))
                .map(|k| (*k).to_owned())
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StoreError::Timeout {
                    op: "wait",
                    missing,
                    waited: now - start,
                });
            }
            map = self
                .changed
                .wait_timeout(map, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        let map = self.lock();
        Ok(keys.iter().all(|k| map.contains_key(*k)))
    }

    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.lock().remove(key).is_some())
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.lock()
            .entry(key.to_owned())
            .or_default()
            .extend_from_slice(value);
        self.changed.notify_all();
        Ok(())
    }

    fn num_keys(&self) -> Result<i64, StoreError> {
        Ok(self.lock().len() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn set_get_add_cas() {
        let s = MemoryStore::new();
        s.set("a", b"1").unwrap();
        assert_eq!(s.get("a", Duration::from_secs(1)).unwrap(), b"1");
        assert_eq!(s.add("a", 4).unwrap(), 5);
        assert_eq!(s.get("a", Duration::ZERO).unwrap(), b"5");
        assert_eq!(s.compare_set("c", b"", b"x").unwrap(), b"x");
        assert_eq!(s.compare_set("c", b"y", b"z").unwrap(), b"x");
        assert!(s.delete_key("c").unwrap());
        assert!(!s.delete_key("c").unwrap());
        s.append("p", b"ab").unwrap();
        s.append("p", b"cd").unwrap();
        assert_eq!(s.get("p", Duration::ZERO).unwrap(), b"abcd");
        assert_eq!(s.num_keys().unwrap(), 2);
    }

    #[test]
    fn wait_names_missing_keys() {
        let s = MemoryStore::new();
        s.set("here", b"").unwrap();
        let err = s
            .wait(&["here", "gone"], Duration::from_millis(20))
            .unwrap_err();
        match err {
            StoreError::Timeout { missing, .. } => assert_eq!(missing, vec!["gone".to_string()]),
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn wait_is_released_by_another_thread() {
        let s = Arc::new(MemoryStore::new());
        let t = {
            let s = s.clone();
            std::thread::spawn(move || s.get("k", Duration::from_secs(10)))
        };
        std::thread::sleep(Duration::from_millis(10));
        s.set("k", b"v").unwrap();
        assert_eq!(t.join().unwrap().unwrap(), b"v");
    }
}
