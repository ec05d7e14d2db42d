//! The stored values: every write and removal of the KV map goes through here, which keeps the
//! byte usage and checks the quotas; APPEND grows an unshared value in place, and a reply
//! carries the stored value itself ([`Bytes`]), never a copy.

use std::time::Instant;

use bytes::Bytes;

use super::Engine;
use super::input::ConnId;
use super::output::CloseReason;
use super::usage::{Over, cost};

impl Engine {
    /// A key is present if it is in the KV map or names a non-empty queue.
    pub(super) fn present(&self, key: &[u8]) -> bool {
        self.kv.contains_key(key) || self.queues.get(key).is_some_and(|q| !q.is_empty())
    }

    /// Writes `key` and wakes its waiters.
    pub(super) fn store(&mut self, key: Vec<u8>, value: Bytes) {
        if self.waits.waited(&key) {
            self.kv_insert(key.clone(), value);
            self.wake_all(&key);
        } else {
            self.kv_insert(key, value);
        }
    }

    /// Every KV write goes through here and [`Engine::kv_remove`], which keep the usage.
    pub(super) fn kv_insert(&mut self, key: Vec<u8>, value: Bytes) {
        if let Some(old) = self.kv.get(&key) {
            self.usage.sub(&key, cost(&key, old.len()));
        }
        self.usage.add(&key, cost(&key, value.len()));
        self.kv.insert(key, value);
    }

    /// Removes `key` from the KV map, keeping the usage.
    pub(super) fn kv_remove(&mut self, key: &[u8]) -> Option<Bytes> {
        let v = self.kv.remove(key)?;
        self.usage.sub(key, cost(key, v.len()));
        Some(v)
    }

    /// APPEND: refused past the value limit or a quota (the value is kept as it was).
    pub(super) fn append(&mut self, conn: ConnId, key: Vec<u8>, value: Vec<u8>, now: Instant) {
        let old = self.kv.get(&key).map_or(0, Bytes::len);
        let size = (old + value.len()) as u64;
        if size > self.config.max_value_bytes {
            let key = String::from_utf8_lossy(&key).into_owned();
            let limit = self.config.max_value_bytes;
            return self.close(conn, CloseReason::ValueTooLarge { key, size, limit }, now);
        }
        let grow = value.len() as u64 + if old == 0 { key.len() as u64 } else { 0 };
        if let Err(over) = self.check_grow(conn, &key, grow) {
            return self.over_quota(conn, "APPEND", &key, over, now);
        }
        let joined = match self.kv_remove(&key) {
            None => Bytes::from(value),
            // Unshared (no reply still holds it): grow in place, no copy of the old value.
            Some(old) => match old.try_into_mut() {
                Ok(mut m) => {
                    m.extend_from_slice(&value);
                    m.freeze()
                }
                Err(old) => {
                    let mut v = Vec::with_capacity(old.len() + value.len());
                    v.extend_from_slice(&old);
                    v.extend_from_slice(&value);
                    Bytes::from(v)
                }
            },
        };
        self.kv_insert(key.clone(), joined);
        self.mark(conn, &key);
        self.wake_all(&key);
    }

    /// A value reply: its length, then the stored value shared (empty if missing).
    pub(super) fn put_value(&self, out: &mut Vec<Bytes>, key: &[u8]) {
        let v = self.kv.get(key).cloned().unwrap_or_default();
        out.push(Bytes::copy_from_slice(&(v.len() as u64).to_le_bytes()));
        if !v.is_empty() {
            out.push(v);
        }
    }

    pub(super) fn ns_quota(&self) -> Option<u64> {
        self.config.max_namespace_bytes
    }

    /// What the store quota and the server's budget leave for keys and values, the tighter of
    /// the two, beside everything else the door (and, for the server's, every other door)
    /// holds ([`Engine::held_bytes`], [`Engine::set_external_bytes`],
    /// [`Engine::set_server_budget`]).
    pub(super) fn store_quota(&self) -> Option<u64> {
        let door = self
            .config
            .max_store_bytes
            .map(|max| max.saturating_sub(self.other_bytes()));
        match (door, self.server_quota()) {
            (Some(d), Some(s)) => Some(d.min(s)),
            (d, s) => d.or(s),
        }
    }

    /// What the server's budget leaves for this door's keys and values.
    fn server_quota(&self) -> Option<u64> {
        self.server.map(|s| {
            s.limit
                .saturating_sub(self.other_bytes().saturating_add(s.elsewhere))
        })
    }

    /// The budget that binds now, in words, and its size: the server's when it leaves less
    /// than the store quota, else the store quota.
    pub(super) fn binding_budget(&self) -> (&'static str, Option<u64>) {
        let door = self
            .config
            .max_store_bytes
            .map(|max| max.saturating_sub(self.other_bytes()));
        match (self.server_quota(), self.server) {
            (Some(s), Some(share)) if door.is_none_or(|d| s < d) => {
                ("server memory (--max-memory-bytes)", Some(share.limit))
            }
            _ => ("store", self.config.max_store_bytes),
        }
    }

    /// Whether growing `key`'s namespace by `grow` bytes, and marking it live for `conn`,
    /// stays within both quotas.
    pub(super) fn check_grow(&self, conn: ConnId, key: &[u8], grow: u64) -> Result<(), Over> {
        self.usage.check(key, grow, self.ns_quota(), None)?;
        let all = grow + self.touch_cost(conn, key);
        self.usage.check(key, all, None, self.store_quota())
    }

    /// Whether writing `value_len` bytes under `key` stays within the quotas; if not, closes
    /// `conn` and the write must not happen. On success the caller writes and then marks the
    /// namespace live for `conn` ([`Engine::mark`], whose cost was counted here).
    pub(super) fn admit(
        &mut self,
        conn: ConnId,
        op: &'static str,
        key: &[u8],
        value_len: usize,
        now: Instant,
    ) -> bool {
        let old = self.kv.get(key).map(|v| cost(key, v.len()));
        let grow = cost(key, value_len).saturating_sub(old.unwrap_or(0));
        match self.check_grow(conn, key, grow) {
            Ok(()) => true,
            Err(over) => {
                self.over_quota(conn, op, key, over, now);
                false
            }
        }
    }

    /// Closes `conn`, whose write would pass a quota.
    pub(super) fn over_quota(
        &mut self,
        conn: ConnId,
        op: &'static str,
        key: &[u8],
        over: Over,
        now: Instant,
    ) {
        let (scope, limit) = match over {
            Over::Namespace(l) => ("namespace", l),
            // The configured quota (or the server's budget, when that is what binds), not
            // what it left beside the rest the door holds.
            Over::Store(l) => {
                let (scope, limit) = self.binding_budget();
                (scope, limit.unwrap_or(l))
            }
        };
        let key = String::from_utf8_lossy(key).into_owned();
        self.close(
            conn,
            CloseReason::QuotaExceeded {
                op,
                key,
                scope,
                limit,
            },
            now,
        );
    }
}
