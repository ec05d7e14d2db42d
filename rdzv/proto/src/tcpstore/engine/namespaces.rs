//! [`Namespaces`]: which open connections touched which namespace, and since when a namespace
//! has had none (see the engine's module docs: a namespace is *live* while an open connection
//! that touched it exists; one idle past the TTL is purged, and an abandoned one is purged when
//! a new torchelastic run starts in it).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::super::namespace::namespace_of;
use super::input::ConnId;

/// The liveness of every namespace.
#[derive(Debug, Default)]
pub(super) struct Namespaces {
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
    /// Open connection `conn` used `key`: its namespace is live.
    pub(super) fn touch(&mut self, conn: ConnId, key: &[u8]) {
        let ns = namespace_of(key);
        let touched = self.touched.entry(conn).or_default();
        if touched.contains(ns) {
            return;
        }
        touched.insert(ns.to_vec());
        let state = self.states.entry(ns.to_vec()).or_default();
        if let Some(since) = state.idle_since.take() {
            self.idle.remove(&(since, ns.to_vec()));
        }
        state.live.insert(conn);
    }

    /// `conn` closed at `now`: the namespaces only it kept live go idle.
    pub(super) fn release(&mut self, conn: ConnId, now: Instant) {
        for ns in self.touched.remove(&conn).unwrap_or_default() {
            if let Some(state) = self.states.get_mut(&ns) {
                state.live.remove(&conn);
                if state.live.is_empty() {
                    state.idle_since = Some(now);
                    self.idle.insert((now, ns));
                }
            }
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
                self.states.remove(ns);
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
            self.states.remove(&ns);
            expired.insert(ns);
        }
        expired
    }
}
