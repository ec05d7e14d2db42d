//! [`Namespaces`]: which open connections touched which namespace, and since when a namespace
//! has had none (see the engine's module docs: a namespace is *live* while an open connection
//! that touched it exists; one idle past the TTL is purged, and an abandoned one is purged when
//! a new torchelastic run starts in it).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::super::namespace::namespace_of;
use super::input::ConnId;

/// What a namespace's state costs beside its name (its map entries), charged to the store
/// quota as bookkeeping.
const STATE_OVERHEAD: u64 = 128;
/// What one connection's touch of a namespace costs beside the name.
const TOUCH_OVERHEAD: u64 = 64;

/// The liveness of every namespace.
#[derive(Debug, Default)]
pub(super) struct Namespaces {
    /// Bytes this bookkeeping holds (names and entries), charged to the store quota.
    bytes: u64,
    /// Namespace → its state, while an open connection touched it or it is idle.
    states: BTreeMap<Vec<u8>, Namespace>,
    /// Connection → the namespaces it touched.
    touched: BTreeMap<ConnId, BTreeSet<Vec<u8>>>,
    /// (idle since, namespace) of every namespace no open connection touched.
    idle: BTreeSet<(Instant, Vec<u8>)>,
}

#[derive(Debug, Default)]
struct Namespace {
    /// Open connections that touched it.
    live: BTreeSet<ConnId>,
    /// Since when it has had none.
    idle_since: Option<Instant>,
}

impl Namespaces {
    /// What touching `key`'s namespace from `conn` would add to [`Namespaces::bytes`] (0 if
    /// `conn` already did).
    pub(super) fn touch_cost(&self, conn: ConnId, key: &[u8]) -> u64 {
        let ns = namespace_of(key);
        if self.touched.get(&conn).is_some_and(|t| t.contains(ns)) {
            return 0;
        }
        let state = if self.states.contains_key(ns) {
            0
        } else {
            ns.len() as u64 + STATE_OVERHEAD
        };
        state + ns.len() as u64 + TOUCH_OVERHEAD
    }

    /// Bytes held by this bookkeeping.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The namespaces tracked (tests: what a read leaves behind).
    #[cfg(test)]
    pub(super) fn tracked(&self) -> Vec<Vec<u8>> {
        self.states.keys().cloned().collect()
    }

    /// Open connection `conn` used `key`: its namespace is live.
    pub(super) fn touch(&mut self, conn: ConnId, key: &[u8]) {
        let ns = namespace_of(key);
        let touched = self.touched.entry(conn).or_default();
        if touched.contains(ns) {
            return;
        }
        touched.insert(ns.to_vec());
        self.bytes += ns.len() as u64 + TOUCH_OVERHEAD;
        if !self.states.contains_key(ns) {
            self.bytes += ns.len() as u64 + STATE_OVERHEAD;
        }
        let state = self.states.entry(ns.to_vec()).or_default();
        if let Some(since) = state.idle_since.take() {
            self.idle.remove(&(since, ns.to_vec()));
        }
        state.live.insert(conn);
    }

    /// `conn` closed at `now`: the namespaces only it kept live go idle, and those that hold
    /// nothing (`holds` says which hold keys or queues) are forgotten at once: there is
    /// nothing to purge.
    pub(super) fn release(&mut self, conn: ConnId, now: Instant, holds: impl Fn(&[u8]) -> bool) {
        for ns in self.touched.remove(&conn).unwrap_or_default() {
            self.bytes = self.bytes.saturating_sub(ns.len() as u64 + TOUCH_OVERHEAD);
            if let Some(state) = self.states.get_mut(&ns) {
                state.live.remove(&conn);
                if state.live.is_empty() {
                    if holds(&ns) {
                        state.idle_since = Some(now);
                        self.idle.insert((now, ns));
                    } else {
                        self.remove_state(&ns);
                    }
                }
            }
        }
    }

    /// Drops `ns`'s state (which no open connection holds), keeping the byte count.
    fn remove_state(&mut self, ns: &[u8]) {
        if self.states.remove(ns).is_some() {
            self.bytes = self.bytes.saturating_sub(ns.len() as u64 + STATE_OVERHEAD);
        }
    }

    /// Whether no open connection touched `ns`.
    pub(super) fn abandoned(&self, ns: &[u8]) -> bool {
        self.states.get(ns).is_none_or(|s| s.live.is_empty())
    }

    /// `ns` is being purged now: it leaves the idle list (and is forgotten if no open
    /// connection touched it).
    pub(super) fn forget_idle(&mut self, ns: &[u8]) {
        if let Some(state) = self.states.get_mut(ns) {
            if let Some(since) = state.idle_since.take() {
                self.idle.remove(&(since, ns.to_vec()));
            }
            if state.live.is_empty() {
                self.remove_state(ns);
            }
        }
    }

    /// When the first idle namespace will have been idle for `ttl`.
    pub(super) fn next_expiry(&self, ttl: Duration) -> Option<Instant> {
        self.idle.first().map(|(t, _)| *t + ttl)
    }

    /// Forgets and returns the namespaces idle for `ttl` by `now`.
    pub(super) fn expire(&mut self, now: Instant, ttl: Duration) -> BTreeSet<Vec<u8>> {
        let mut expired = BTreeSet::new();
        while let Some((since, _)) = self.idle.first() {
            if *since + ttl > now {
                break;
            }
            let (_, ns) = self.idle.pop_first().expect("non-empty");
            self.remove_state(&ns);
            expired.insert(ns);
        }
        expired
    }
}
