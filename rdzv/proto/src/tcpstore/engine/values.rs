//! Writes and reads of stored values that share them rather than copy them: APPEND grows an
//! unshared value in place, and a reply carries the stored value itself ([`Bytes`]).

use std::time::Instant;

use bytes::Bytes;

use super::{CloseReason, ConnId, Engine};

impl Engine {
    /// APPEND: refused past the value limit or a quota (the value is kept as it was).
    pub(super) fn append(&mut self, conn: ConnId, key: Vec<u8>, value: Vec<u8>, now: Instant) {
        self.touch(conn, &key, now);
        let old = self.kv.get(&key).map_or(0, Bytes::len);
        let size = (old + value.len()) as u64;
        if size > self.config.max_value_bytes {
            let key = String::from_utf8_lossy(&key).into_owned();
            let limit = self.config.max_value_bytes;
            return self.close(conn, CloseReason::ValueTooLarge { key, size, limit }, now);
        }
        let grow = value.len() as u64 + if old == 0 { key.len() as u64 } else { 0 };
        if let Err(over) = self
            .usage
            .check(&key, grow, self.ns_quota(), self.store_quota())
        {
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
}
