//! `PrefixStore`: namespaces another store, like torch's `PrefixStore`.

use std::time::Duration;

use super::{Store, StoreError};

/// Puts every key under `prefix + "/"`; the same key layout as torch's `PrefixStore`, so both
/// sides of a mixed job see the same keys.
#[derive(Debug, Clone)]
pub struct PrefixStore<S> {
    prefix: String,
    inner: S,
}

impl<S: Store> PrefixStore<S> {
    /// Wraps `inner` so that key `k` becomes `prefix/k`.
    pub fn new(prefix: impl Into<String>, inner: S) -> Self {
        Self {
            prefix: prefix.into(),
            inner,
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn key(&self, key: &str) -> String {
        format!("{}/{}", self.prefix, key)
    }

    fn keys(&self, keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| self.key(k)).collect()
    }

    fn strip(&self, err: StoreError) -> StoreError {
        match err {
            StoreError::Timeout {
                op,
                missing,
                waited,
            } => StoreError::Timeout {
                op,
                missing: missing
                    .into_iter()
                    .map(|k| match k.strip_prefix(&format!("{}/", self.prefix)) {
                        Some(s) => s.to_owned(),
                        None => k,
                    })
                    .collect(),
                waited,
            },
            other => other,
        }
    }
}

impl<S: Store> Store for PrefixStore<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.inner.set(&self.key(key), value)
    }
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        self.inner
            .get(&self.key(key), timeout)
            .map_err(|e| self.strip(e))
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        self.inner.add(&self.key(key), delta)
    }
    fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        self.inner.compare_set(&self.key(key), expected, desired)
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        let owned = self.keys(keys);
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        self.inner.wait(&refs, timeout).map_err(|e| self.strip(e))
    }
    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        let owned = self.keys(keys);
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        self.inner.check(&refs)
    }
    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        self.inner.delete_key(&self.key(key))
    }
    fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.inner.append(&self.key(key), value)
    }
    fn num_keys(&self) -> Result<i64, StoreError> {
        self.inner.num_keys()
    }
    fn multi_get(&self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>, StoreError> {
        let owned = self.keys(keys);
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        self.inner
            .multi_get(&refs, timeout)
            .map_err(|e| self.strip(e))
    }
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<(), StoreError> {
        let owned = self.keys(keys);
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        self.inner.multi_set(&refs, values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use std::sync::Arc;

    #[test]
    fn prefixes_keys_and_errors() {
        let base = Arc::new(MemoryStore::new());
        let p = PrefixStore::new("job/0", base.clone());
        p.set("k", b"v").unwrap();
        assert_eq!(base.get("job/0/k", Duration::ZERO).unwrap(), b"v");
        match p.wait(&["nope"], Duration::from_millis(5)).unwrap_err() {
            StoreError::Timeout { missing, .. } => assert_eq!(missing, vec!["nope"]),
            e => panic!("{e}"),
        }
    }
}
