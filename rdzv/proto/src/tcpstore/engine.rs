//! The store engine: torch's TCPStore server semantics, sans IO, in the shape of every core of
//! this crate ([`crate::sans_io::Core`]).
//!
//! A driver gives each connection an id and feeds [`Engine::handle`] the time and an
//! [`Input`]: the connection was accepted, each decoded request in arrival order, EOF. After
//! each call it drains [`Engine::poll_action`]: bytes to send to a connection (its replies and
//! the deferred `00` of WAIT and BARRIER, one FIFO per connection, in the order given),
//! connections to close (the protocol has no error frames), and purges to log.
//! [`Engine::poll_timeout`] says when [`Engine::handle_timeout`] is due.
//!
//! ## Runs that end cleanly
//!
//! Keys are grouped in namespaces ([`super::namespace_of`]). A namespace is *live* while an
//! open connection that touched it exists. Two rules forget a finished job:
//!
//! 1. **New torchelastic run.** Every torchelastic agent starts with a create-if-missing
//!    compare-set (expected empty) on `/torch.rendezvous.<id>`. If that key exists but no open
//!    connection has touched its namespace, every agent of the earlier run is gone (finished,
//!    closed, or killed), so the old state and round keys are purged first and the new agent
//!    creates a fresh state. This is what a torch-hosted store gives for free by dying with its
//!    job, and it ends `RendezvousClosedError` on a second run with the same `--rdzv-id`.
//! 2. **Idle expiry.** A namespace that has had no open connection for
//!    [`EngineConfig::namespace_ttl`] is purged, keys and queues.
//!
//! `dt-rdzv purge` deletes keys explicitly on top of these.
//!
//! ## Files
//!
//! * `input`, `output`, `config`: what goes in and out, and the settings;
//! * `requests`: each request's rules (the reply bytes of `reference/tcpstore-protocol.md`);
//! * `waits`: the waiter lists of WAIT, BARRIER and QUEUE_POP;
//! * `namespaces`: which connections keep which namespace live;
//! * `usage`: the bytes held and the quotas; `values`: APPEND and value replies, shared.
//!
//! The store quota is the door's whole memory budget: stored keys and values, the namespace
//! bookkeeping and the keys waited for ([`Engine::held_bytes`]), plus what the driver holds
//! ([`Engine::set_external_bytes`]: replies' own bytes not yet written, partial frames).
//!
//! Every map is ordered, so what the engine answers (LIST_KEYS, the order of purges) depends
//! on nothing but its inputs.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use bytes::Bytes;

use self::namespaces::Namespaces;
use self::usage::Usage;
use self::waits::Waits;
use super::STOP_WAITING;
use super::namespace::namespace_of;

mod config;
mod input;
mod namespaces;
mod output;
mod requests;
#[cfg(test)]
mod tests;
mod usage;
mod values;
mod waits;

pub use config::{DEFAULT_MAX_NAMESPACE_BYTES, DEFAULT_MAX_STORE_BYTES, EngineConfig};
pub use input::{ConnId, Input};
pub use output::{Action, CloseReason, PurgeReason, Stats};
pub use waits::MAX_WAITING_BYTES;

/// One open connection.
#[derive(Debug, Default)]
struct Conn {
    /// It sent a good VALIDATE.
    validated: bool,
}

/// The store: KV map, queues, waiters and namespaces. See the module docs.
#[derive(Debug, Default)]
pub struct Engine {
    config: EngineConfig,
    kv: BTreeMap<Vec<u8>, Bytes>,
    queues: BTreeMap<Vec<u8>, VecDeque<Bytes>>,
    waits: Waits,
    conns: BTreeMap<ConnId, Conn>,
    namespaces: Namespaces,
    usage: Usage,
    actions: VecDeque<Action>,
    stats: Stats,
    /// Bytes the driver holds for the door beside the engine (queued replies, partial
    /// frames), charged to the store quota with what the engine holds
    /// ([`Engine::set_external_bytes`]).
    external: u64,
    /// The server's budget over every door and what its other doors hold
    /// ([`Engine::set_server_budget`]).
    server: Option<ServerShare>,
}

/// The server's memory budget as one door's engine sees it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ServerShare {
    /// The budget, over every door.
    pub(super) limit: u64,
    /// What the server's other doors hold now.
    pub(super) elsewhere: u64,
}

impl Engine {
    /// An empty store.
    pub fn new(config: EngineConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// Feeds one input that arrived at `now`, queuing the replies and wake-ups it causes.
    pub fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Connected { conn } => {
                self.conns.insert(conn, Conn::default());
                self.stats.connections_total += 1;
            }
            Input::Request { conn, request } => self.request(now, conn, request),
            Input::Closed { conn } => self.disconnect(now, conn),
        }
    }

    /// The next thing the driver must do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`Engine::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.namespaces.next_expiry(self.config.namespace_ttl?)
    }

    /// Purges namespaces idle for longer than the TTL.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(ttl) = self.config.namespace_ttl else {
            return;
        };
        let expired = self.namespaces.expire(now, ttl);
        if !expired.is_empty() {
            self.purge(&expired, PurgeReason::Idle);
        }
    }

    /// Forgets a namespace now (an operator's purge); returns the keys and queues removed.
    pub fn purge_namespace(&mut self, namespace: &[u8]) -> usize {
        self.namespaces.forget_idle(namespace);
        self.purge(&BTreeSet::from([namespace.to_vec()]), PurgeReason::Explicit)
    }

    /// Counters for status and metrics.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Number of KV keys.
    pub fn num_keys(&self) -> usize {
        self.kv.len()
    }

    /// Bytes held (keys and values, KV map and queues).
    pub fn stored_bytes(&self) -> u64 {
        self.usage.total()
    }

    /// Every byte the engine holds for its clients: stored keys and values, the namespace
    /// bookkeeping, and the keys waited for. With [`Engine::set_external_bytes`], this is
    /// what the store quota ([`EngineConfig::max_store_bytes`], the door's memory budget)
    /// bounds.
    pub fn held_bytes(&self) -> u64 {
        self.usage.total() + self.namespaces.bytes() + self.waits.bytes()
    }

    /// The driver holds `bytes` for the door's clients beside the engine (replies queued and
    /// not yet written, partial frames): they count against the store quota too, so the next
    /// write, wait, touch or LIST_KEYS answer must fit beside them.
    pub fn set_external_bytes(&mut self, bytes: u64) {
        self.external = bytes;
    }

    /// The server's memory budget over every door (`None`: none) and what its other doors
    /// hold now: the next write, wait, touch or LIST_KEYS answer must fit in what that leaves
    /// too, and a refusal it causes names the server's budget, not the store quota.
    pub fn set_server_budget(&mut self, limit: Option<u64>, elsewhere: u64) {
        self.server = limit.map(|limit| ServerShare { limit, elsewhere });
    }

    /// Number of open connections.
    pub fn num_connections(&self) -> usize {
        self.conns.len()
    }

    /// A connection is gone: its waits are dropped and the namespaces it touched may go idle.
    fn disconnect(&mut self, now: Instant, conn: ConnId) {
        if self.conns.remove(&conn).is_none() {
            return;
        }
        self.waits.cancel(conn);
        let usage = &self.usage;
        self.namespaces.release(conn, now, |ns| usage.holds(ns));
    }

    /// Open connection `conn` read `key`: its namespace is live if it holds anything (a read
    /// of a namespace that holds nothing leaves no trace). The bookkeeping counts against the
    /// store quota; when the quota has no room for it, the read is answered all the same and
    /// leaves no trace either: liveness is protection, not data, and must not cost readers
    /// their answers when the store is full.
    fn touch(&mut self, conn: ConnId, key: &[u8]) {
        if !self.conns.contains_key(&conn) || !self.usage.holds(namespace_of(key)) {
            return;
        }
        let cost = self.namespaces.touch_cost(conn, key);
        if cost > 0
            && self
                .usage
                .check(key, cost, None, self.store_quota())
                .is_err()
        {
            self.stats.touches_over_quota += 1;
            return;
        }
        self.namespaces.touch(conn, key);
    }

    /// Open connection `conn` wrote `key` (already admitted with [`Engine::touch_cost`]), or
    /// was woken by a write of it: its namespace is live.
    fn mark(&mut self, conn: ConnId, key: &[u8]) {
        if self.conns.contains_key(&conn) {
            self.namespaces.touch(conn, key);
        }
    }

    /// What marking `key`'s namespace live for `conn` would add to the bookkeeping.
    fn touch_cost(&self, conn: ConnId, key: &[u8]) -> u64 {
        if self.conns.contains_key(&conn) {
            self.namespaces.touch_cost(conn, key)
        } else {
            0
        }
    }

    /// What the engine and the driver hold beside the stored keys and values.
    fn other_bytes(&self) -> u64 {
        self.namespaces.bytes() + self.waits.bytes() + self.external
    }

    /// Removes every key and queue of `namespaces`; returns how many went.
    fn purge(&mut self, namespaces: &BTreeSet<Vec<u8>>, reason: PurgeReason) -> usize {
        let mut counts: BTreeMap<&[u8], usize> =
            namespaces.iter().map(|n| (n.as_slice(), 0)).collect();
        let mut keep = |k: &Vec<u8>| match counts.get_mut(namespace_of(k)) {
            Some(n) => {
                *n += 1;
                false
            }
            None => true,
        };
        self.kv.retain(|k, _| keep(k));
        self.queues.retain(|k, _| keep(k));
        namespaces.iter().for_each(|ns| self.usage.forget(ns));
        self.stats.purges += counts.len() as u64;
        let mut total = 0;
        for (ns, removed) in counts {
            total += removed;
            self.actions.push_back(Action::Purged {
                namespace: String::from_utf8_lossy(ns).into_owned(),
                removed,
                reason,
            });
        }
        total
    }

    /// `key` was written: every connection that waited for nothing else gets its `00`.
    fn wake_all(&mut self, key: &[u8]) {
        for conn in self.waits.wake_all(key) {
            self.mark(conn, key);
            self.send(conn, vec![STOP_WAITING]);
        }
    }

    /// QUEUE_PUSH: only the first waiter on the key is released.
    fn wake_one(&mut self, key: &[u8]) {
        if let Some(conn) = self.waits.wake_one(key) {
            self.mark(conn, key);
            self.send(conn, vec![STOP_WAITING]);
        }
    }

    fn send(&mut self, conn: ConnId, bytes: Vec<u8>) {
        let owned = bytes.len();
        self.send_chunks(conn, vec![Bytes::from(bytes)], owned);
    }

    /// Queues `bytes` for `conn`, of which `owned` are the reply's own (the rest share
    /// stored values, which the store quota already counts).
    fn send_chunks(&mut self, conn: ConnId, bytes: Vec<Bytes>, owned: usize) {
        self.actions.push_back(Action::Send { conn, bytes, owned });
    }

    /// Forgets `conn` at once and tells the driver to close it.
    fn close(&mut self, conn: ConnId, reason: CloseReason, now: Instant) {
        self.disconnect(now, conn);
        self.actions.push_back(Action::Close { conn, reason });
    }
}

impl crate::sans_io::Core for Engine {
    type Input = Input;
    type Output = Action;

    fn handle(&mut self, now: Instant, input: Input) {
        Engine::handle(self, now, input);
    }

    fn poll_output(&mut self) -> Option<Action> {
        self.poll_action()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Engine::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Instant) {
        Engine::handle_timeout(self, now);
    }
}
