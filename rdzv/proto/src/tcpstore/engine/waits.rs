//! [`Waits`]: who waits for which keys (WAIT, BARRIER, a blocking QUEUE_POP), and which
//! connections a write releases. A connection is released (its `00` is due) once every key it
//! waits for has been written; the engine sends that byte.

use std::collections::BTreeMap;

use super::input::ConnId;

/// Most bytes of keys the whole store may hold waited for at once, over every connection's
/// WAITs and BARRIERs (a key counts its length plus 64 bytes for its two list entries): one
/// request's worth. A server-wide budget (not per connection): many connections share it.
pub const MAX_WAITING_BYTES: u64 = 64 << 20;
/// What a waiting key costs beside its bytes (its place in the waiter list and the
/// connection's list).
const KEY_OVERHEAD: u64 = 64;

/// The waiter lists of the keys and what each connection waits for.
#[derive(Debug, Default)]
pub(super) struct Waits {
    /// Key → connections waiting for it, in arrival order (one entry per wait).
    waiters: BTreeMap<Vec<u8>, Vec<ConnId>>,
    /// Connection → what it waits for.
    conns: BTreeMap<ConnId, Waiting>,
    /// Sum of every connection's [`Waiting::bytes`].
    total: u64,
}

/// What one connection waits for.
#[derive(Debug, Default)]
struct Waiting {
    /// Keys it still waits for (an entry per wait).
    pending: usize,
    /// Keys whose waiter lists may hold it.
    keys: Vec<Vec<u8>>,
    /// Bytes of the keys in `keys` (bounded by [`MAX_WAITING_BYTES`]).
    bytes: u64,
}

/// A wait refused because the store would hold too many waiting key bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TooManyWaits {
    /// Bytes of waiting keys the store would hold.
    pub(super) bytes: u64,
}

/// What waiting for `key` costs against [`MAX_WAITING_BYTES`].
pub(super) fn cost(key: &[u8]) -> u64 {
    key.len() as u64 + KEY_OVERHEAD
}

impl Waits {
    /// Whether waiting for `keys` more keeps the store within [`MAX_WAITING_BYTES`].
    pub(super) fn check(&self, keys: &[Vec<u8>]) -> Result<(), TooManyWaits> {
        let adding: u64 = keys.iter().map(|k| cost(k)).sum();
        if self.total + adding > MAX_WAITING_BYTES {
            return Err(TooManyWaits {
                bytes: self.total + adding,
            });
        }
        Ok(())
    }

    /// Bytes of waiting keys held, over every connection.
    pub(super) fn bytes(&self) -> u64 {
        self.total
    }

    /// `conn` waits for `key` (once more, if it already did).
    pub(super) fn add(&mut self, conn: ConnId, key: Vec<u8>) {
        self.waiters.entry(key.clone()).or_default().push(conn);
        let w = self.conns.entry(conn).or_default();
        w.pending += 1;
        w.bytes += cost(&key);
        self.total += cost(&key);
        w.keys.push(key);
    }

    /// Whether anyone waits for `key`.
    pub(super) fn waited(&self, key: &[u8]) -> bool {
        self.waiters.contains_key(key)
    }

    /// `key` was written: every waiter on it has one key fewer to wait for. Returns the
    /// connections released (each once), in the order they waited.
    pub(super) fn wake_all(&mut self, key: &[u8]) -> Vec<ConnId> {
        let Some(list) = self.waiters.remove(key) else {
            return Vec::new();
        };
        list.into_iter()
            .filter(|&c| self.release_one_key(c))
            .collect()
    }

    /// QUEUE_PUSH: only the first waiter on `key` has one key fewer to wait for. Returns it
    /// if that released it.
    pub(super) fn wake_one(&mut self, key: &[u8]) -> Option<ConnId> {
        let list = self.waiters.get_mut(key)?;
        let c = list.remove(0);
        if list.is_empty() {
            self.waiters.remove(key);
        }
        self.release_one_key(c).then_some(c)
    }

    /// Whether this took `conn`'s last key.
    fn release_one_key(&mut self, conn: ConnId) -> bool {
        let Some(w) = self.conns.get_mut(&conn) else {
            return false;
        };
        if w.pending == 0 {
            return false;
        }
        w.pending -= 1;
        if w.pending > 0 {
            return false;
        }
        if let Some(w) = self.conns.remove(&conn) {
            self.total = self.total.saturating_sub(w.bytes);
        }
        true
    }

    /// `conn` waits for nothing any more (CANCEL_WAIT, or it closed).
    pub(super) fn cancel(&mut self, conn: ConnId) {
        let Some(w) = self.conns.remove(&conn) else {
            return;
        };
        self.total = self.total.saturating_sub(w.bytes);
        for key in w.keys {
            if let Some(list) = self.waiters.get_mut(&key) {
                list.retain(|&c| c != conn);
                if list.is_empty() {
                    self.waiters.remove(&key);
                }
            }
        }
    }

    /// Whether no key is waited for (tests: nothing leaks).
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }
}
