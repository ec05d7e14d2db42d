//! [`Usage`]: bytes held by the store (keys and values, KV map and queues), in all and per
//! namespace, and the quotas checked against them before a write grows the store.

use std::collections::BTreeMap;

use super::super::namespace::namespace_of;

/// Store bytes in all and per namespace.
#[derive(Debug, Default)]
pub(super) struct Usage {
    total: u64,
    per_namespace: BTreeMap<Vec<u8>, u64>,
}

/// Which quota a write would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Over {
    /// The namespace's ([`super::EngineConfig::max_namespace_bytes`]).
    Namespace(u64),
    /// The whole store's ([`super::EngineConfig::max_store_bytes`]).
    Store(u64),
}

impl Usage {
    /// Whether growing `key`'s namespace by `grow` bytes stays within both quotas.
    pub(super) fn check(
        &self,
        key: &[u8],
        grow: u64,
        per_namespace: Option<u64>,
        store: Option<u64>,
    ) -> Result<(), Over> {
        if grow == 0 {
            return Ok(());
        }
        if let Some(max) = per_namespace {
            let used = self
                .per_namespace
                .get(namespace_of(key))
                .copied()
                .unwrap_or(0);
            if used.saturating_add(grow) > max {
                return Err(Over::Namespace(max));
            }
        }
        if let Some(max) = store
            && self.total.saturating_add(grow) > max
        {
            return Err(Over::Store(max));
        }
        Ok(())
    }

    /// An entry of `bytes` (key and value) was added under `key`.
    pub(super) fn add(&mut self, key: &[u8], bytes: u64) {
        self.total += bytes;
        *self
            .per_namespace
            .entry(namespace_of(key).to_vec())
            .or_default() += bytes;
    }

    /// An entry of `bytes` under `key` was removed.
    pub(super) fn sub(&mut self, key: &[u8], bytes: u64) {
        self.total = self.total.saturating_sub(bytes);
        let ns = namespace_of(key);
        if let Some(n) = self.per_namespace.get_mut(ns) {
            *n = n.saturating_sub(bytes);
            if *n == 0 {
                self.per_namespace.remove(ns);
            }
        }
    }

    /// A namespace was purged: everything it held is gone.
    pub(super) fn forget(&mut self, namespace: &[u8]) {
        if let Some(n) = self.per_namespace.remove(namespace) {
            self.total = self.total.saturating_sub(n);
        }
    }

    /// Whether `namespace` holds any key or queue.
    pub(super) fn holds(&self, namespace: &[u8]) -> bool {
        self.per_namespace.contains_key(namespace)
    }

    /// Bytes held in all.
    pub(super) fn total(&self) -> u64 {
        self.total
    }
}

/// What an entry costs: its key and its value.
pub(super) fn cost(key: &[u8], value_len: usize) -> u64 {
    (key.len() + value_len) as u64
}
