//! The store engine: torch's TCPStore server semantics, sans IO.
//!
//! A driver gives each connection an id, calls [`Engine::connect`], feeds every decoded
//! request to [`Engine::handle`] in arrival order, calls [`Engine::disconnect`] on EOF, and
//! after each call drains [`Engine::poll_action`]: bytes to send to a connection (its replies
//! and the deferred `00` of WAIT and BARRIER, one FIFO per connection, in the order given),
//! connections to close (the protocol has no error frames), and purges to log. Time comes in
//! as an argument; [`Engine::poll_timeout`] says when [`Engine::handle_timeout`] is due.
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

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::namespace::{is_torchelastic_state_key, namespace_of};
use super::opcode::VALIDATE_MAGIC;
use super::request::{Request, put_bytes};
use super::semantics::{self, CounterError};
use super::{NOT_READY, READY, STOP_WAITING, WAIT_CANCELED};

/// A driver's name for one client connection.
pub type ConnId = u64;

/// Engine settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Purge a namespace this long after its last connection closed (`None`: never).
    pub namespace_ttl: Option<Duration>,
    /// Largest value a key may hold, in bytes (torch: 8 MiB, inclusive). The decoder refuses
    /// a longer SET; the engine refuses an APPEND that would grow a value past it.
    pub max_value_bytes: u64,
    /// Most bytes (keys and values, KV and queues) one namespace may hold (`None`: no limit).
    /// A write that would pass it closes its connection and stores nothing.
    pub max_namespace_bytes: Option<u64>,
    /// Most bytes the whole store may hold (`None`: no limit); as above.
    pub max_store_bytes: Option<u64>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            namespace_ttl: Some(Duration::from_secs(300)),
            max_value_bytes: super::Limits::default().max_value_bytes,
            max_namespace_bytes: Some(DEFAULT_MAX_NAMESPACE_BYTES),
            max_store_bytes: Some(DEFAULT_MAX_STORE_BYTES),
        }
    }
}

/// Default [`EngineConfig::max_namespace_bytes`]: 1 GiB.
pub const DEFAULT_MAX_NAMESPACE_BYTES: u64 = 1 << 30;
/// Default [`EngineConfig::max_store_bytes`]: 4 GiB.
pub const DEFAULT_MAX_STORE_BYTES: u64 = 4 << 30;

/// Why the engine closes a connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloseReason {
    /// A request arrived before VALIDATE.
    #[error("{0} before VALIDATE")]
    NotValidated(&'static str),
    /// VALIDATE with the wrong magic.
    #[error("VALIDATE with bad magic 0x{0:08x}")]
    BadMagic(u32),
    /// A second VALIDATE.
    #[error("repeated VALIDATE")]
    RepeatedValidate,
    /// APPEND that would grow a value past the value limit (the value is kept as it was).
    #[error("APPEND on key {key:?} would make a {size}-byte value (limit {limit})")]
    ValueTooLarge {
        /// The key, lossily printed.
        key: String,
        /// The size the value would have had.
        size: u64,
        /// [`EngineConfig::max_value_bytes`].
        limit: u64,
    },
    /// A write that would pass a namespace's or the store's byte quota (nothing stored).
    #[error("{op} on key {key:?} would pass the {scope} quota of {limit} bytes")]
    QuotaExceeded {
        /// The request's opcode name.
        op: &'static str,
        /// The key, lossily printed.
        key: String,
        /// `namespace` or `store`.
        scope: &'static str,
        /// The quota.
        limit: u64,
    },
    /// WAITs pipelined on one connection that would hold more key bytes than
    /// [`MAX_WAITING_BYTES`] (each request is bounded on its own; their sum is bounded here).
    #[error("WAIT on {keys} more keys would hold {bytes} bytes of waiting keys (limit {limit})")]
    TooManyWaits {
        /// Keys in the refused request.
        keys: usize,
        /// Bytes of waiting keys the connection would hold.
        bytes: u64,
        /// [`MAX_WAITING_BYTES`].
        limit: u64,
    },
    /// ADD or BARRIER on a value that is not a counter.
    #[error("{op} on key {key:?}: {error}")]
    Counter {
        /// ADD or BARRIER.
        op: &'static str,
        /// The key, lossily printed.
        key: String,
        /// Why.
        error: CounterError,
    },
}

/// Why a namespace was purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeReason {
    /// No open connection for longer than the TTL.
    Idle,
    /// A new torchelastic run arrived after every agent of the old one was gone.
    NewTorchelasticRun,
    /// Asked for by an operator.
    Explicit,
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Append `bytes` to the connection's outbound FIFO.
    Send {
        /// Destination.
        conn: ConnId,
        /// Reply bytes, in chunks to write in order. A stored value is sent as a shared
        /// reference to it ([`Bytes`]), never copied under the driver's lock.
        bytes: Vec<Bytes>,
    },
    /// Flush what was queued for the connection, then close it. The engine has already
    /// forgotten it; do not feed it more requests.
    Close {
        /// The connection.
        conn: ConnId,
        /// Why, for the log line.
        reason: CloseReason,
    },
    /// A namespace was forgotten (for the log).
    Purged {
        /// The namespace, lossily printed.
        namespace: String,
        /// Keys and queues removed.
        removed: usize,
        /// Why.
        reason: PurgeReason,
    },
}

/// Counters for status pages and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests handled, by opcode.
    pub ops: [u64; 19],
    /// Connections ever accepted.
    pub connections_total: u64,
    /// Namespaces purged.
    pub purges: u64,
}

/// Most bytes of keys one connection may wait for at once, over all its pipelined WAITs (a
/// key counts its length plus [`KEY_OVERHEAD`] for its two list entries): one request's
/// worth.
pub const MAX_WAITING_BYTES: u64 = 64 << 20;
/// What a waiting key costs beside its bytes (its place in the waiter list and the
/// connection's list).
const KEY_OVERHEAD: u64 = 64;

#[derive(Debug, Default)]
struct Conn {
    validated: bool,
    /// Keys this connection still waits for (WAIT, BARRIER, blocking QUEUE_POP).
    pending: usize,
    /// Keys whose waiter lists may hold this connection.
    waiting: Vec<Vec<u8>>,
    /// Bytes of the keys in `waiting` (bounded by [`MAX_WAITING_BYTES`]).
    waiting_bytes: u64,
    namespaces: HashSet<Vec<u8>>,
}

#[derive(Debug, Default)]
struct Namespace {
    live: HashSet<ConnId>,
    idle_since: Option<Instant>,
}

/// The store: KV map, queues, waiters and namespaces. See the module docs.
#[derive(Debug, Default)]
pub struct Engine {
    config: EngineConfig,
    kv: HashMap<Vec<u8>, Bytes>,
    queues: HashMap<Vec<u8>, VecDeque<Bytes>>,
    waiters: HashMap<Vec<u8>, Vec<ConnId>>,
    conns: HashMap<ConnId, Conn>,
    namespaces: HashMap<Vec<u8>, Namespace>,
    idle: BTreeSet<(Instant, Vec<u8>)>,
    usage: usage::Usage,
    actions: VecDeque<Action>,
    stats: Stats,
}

impl Engine {
    /// An empty store.
    pub fn new(config: EngineConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// A connection was accepted.
    pub fn connect(&mut self, conn: ConnId) {
        self.conns.insert(conn, Conn::default());
        self.stats.connections_total += 1;
    }

    /// A connection closed (EOF, error, or after an [`Action::Close`]). Drops its waits and
    /// lets the namespaces it touched go idle.
    pub fn disconnect(&mut self, conn: ConnId, now: Instant) {
        let Some(mut c) = self.conns.remove(&conn) else {
            return;
        };
        self.unregister_waits(conn, &mut c);
        for ns in c.namespaces {
            if let Some(state) = self.namespaces.get_mut(&ns) {
                state.live.remove(&conn);
                if state.live.is_empty() {
                    state.idle_since = Some(now);
                    self.idle.insert((now, ns));
                }
            }
        }
    }

    /// The next thing the driver must do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`Engine::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let ttl = self.config.namespace_ttl?;
        self.idle.first().map(|(t, _)| *t + ttl)
    }

    /// Purges namespaces idle for longer than the TTL.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(ttl) = self.config.namespace_ttl else {
            return;
        };
        let mut expired = HashSet::new();
        while let Some((since, _)) = self.idle.first() {
            if *since + ttl > now {
                break;
            }
            let (_, ns) = self.idle.pop_first().expect("non-empty");
            self.namespaces.remove(&ns);
            expired.insert(ns);
        }
        if !expired.is_empty() {
            self.purge(&expired, PurgeReason::Idle);
        }
    }

    /// Forgets a namespace now; returns the keys and queues removed.
    pub fn purge_namespace(&mut self, namespace: &[u8]) -> usize {
        let set = HashSet::from([namespace.to_vec()]);
        self.forget_idle(namespace);
        self.purge(&set, PurgeReason::Explicit)
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

    /// Number of open connections.
    pub fn num_connections(&self) -> usize {
        self.conns.len()
    }

    /// Handles one request from `conn`, queuing its reply (if any) and any wake-ups.
    pub fn handle(&mut self, conn: ConnId, req: Request, now: Instant) {
        let op = req.query_type();
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        self.stats.ops[op as usize] += 1;
        if !c.validated {
            match req {
                Request::Validate {
                    magic: VALIDATE_MAGIC,
                } => c.validated = true,
                Request::Validate { magic } => self.close(conn, CloseReason::BadMagic(magic), now),
                _ => self.close(conn, CloseReason::NotValidated(op.name()), now),
            }
            return;
        }
        match req {
            Request::Validate { .. } => self.close(conn, CloseReason::RepeatedValidate, now),
            Request::Ping { nonce } => self.send(conn, nonce.to_le_bytes().to_vec()),
            Request::Set { key, value } => {
                self.touch(conn, &key, now);
                if self.admit(conn, "SET", &key, value.len(), now) {
                    self.store(key, value.into());
                }
            }
            Request::Append { key, value } => self.append(conn, key, value, now),
            Request::MultiSet { pairs } => {
                for (key, value) in pairs {
                    self.touch(conn, &key, now);
                    // Pairs before a refused one stay stored (as a pipeline of SETs would).
                    if !self.admit(conn, "MULTI_SET", &key, value.len(), now) {
                        return;
                    }
                    self.store(key, value.into());
                }
            }
            Request::CompareSet {
                key,
                expected,
                desired,
            } => self.compare_set(conn, key, expected, desired, now),
            Request::Get { key } => {
                self.touch(conn, &key, now);
                let mut out = Vec::with_capacity(2);
                self.put_value(&mut out, &key);
                self.send_chunks(conn, out);
            }
            Request::MultiGet { keys } => {
                let mut out = Vec::with_capacity(2 * keys.len());
                for key in &keys {
                    self.touch(conn, key, now);
                    self.put_value(&mut out, key);
                }
                self.send_chunks(conn, out);
            }
            Request::Add { key, delta } => {
                self.touch(conn, &key, now);
                match semantics::add(self.kv.get(&key).map(Bytes::as_ref), delta) {
                    Ok(v) => {
                        self.store(key, semantics::encode_counter(v).into());
                        self.send(conn, v.to_le_bytes().to_vec());
                    }
                    Err(error) => self.counter_error(conn, "ADD", &key, error, now),
                }
            }
            Request::Check { keys } => {
                keys.iter().for_each(|k| self.touch(conn, k, now));
                let ready = keys.iter().all(|k| self.present(k));
                self.send(conn, vec![if ready { READY } else { NOT_READY }]);
            }
            Request::Wait { keys } => {
                keys.iter().for_each(|k| self.touch(conn, k, now));
                self.wait(conn, keys, now);
            }
            Request::CancelWait => {
                if let Some(mut c) = self.conns.remove(&conn) {
                    self.unregister_waits(conn, &mut c);
                    self.conns.insert(conn, c);
                }
                self.send(conn, vec![WAIT_CANCELED]);
            }
            Request::GetNumKeys => self.send(conn, (self.kv.len() as i64).to_le_bytes().to_vec()),
            Request::DeleteKey { key } => {
                self.touch(conn, &key, now);
                let n = i64::from(self.kv_remove(&key).is_some());
                self.send(conn, n.to_le_bytes().to_vec());
            }
            Request::ListKeys => {
                let mut out = (self.kv.len() as i64).to_le_bytes().to_vec();
                self.kv.keys().for_each(|k| put_bytes(&mut out, k));
                self.send(conn, out);
            }
            Request::QueuePush { key, value } => {
                self.touch(conn, &key, now);
                let grow = usage::cost(&key, value.len());
                if let Err(over) = self
                    .usage
                    .check(&key, grow, self.ns_quota(), self.store_quota())
                {
                    return self.over_quota(conn, "QUEUE_PUSH", &key, over, now);
                }
                self.usage.add(&key, grow);
                self.queues
                    .entry(key.clone())
                    .or_default()
                    .push_back(value.into());
                self.wake_one(&key);
            }
            Request::QueuePop { key } => {
                self.touch(conn, &key, now);
                let q = self.queues.get_mut(&key);
                let len = q.as_ref().map_or(0, |q| q.len());
                let mut head = (len as i64).to_le_bytes().to_vec();
                let mut out = Vec::with_capacity(2);
                if let Some(q) = q {
                    if let Some(v) = q.pop_front() {
                        head.extend_from_slice(&(v.len() as u64).to_le_bytes());
                        self.usage.sub(&key, usage::cost(&key, v.len()));
                        out.push(v);
                    }
                    if q.is_empty() {
                        self.queues.remove(&key);
                    }
                }
                out.insert(0, Bytes::from(head));
                self.send_chunks(conn, out);
            }
            Request::QueueLen { key } => {
                self.touch(conn, &key, now);
                let len = self.queues.get(&key).map_or(0, VecDeque::len) as i64;
                self.send(conn, len.to_le_bytes().to_vec());
            }
            Request::Barrier { key, world_size } => self.barrier(conn, key, world_size, now),
        }
    }

    fn compare_set(
        &mut self,
        conn: ConnId,
        key: Vec<u8>,
        expected: Vec<u8>,
        desired: Vec<u8>,
        now: Instant,
    ) {
        if expected.is_empty() && is_torchelastic_state_key(&key) && self.kv.contains_key(&key) {
            let ns = namespace_of(&key);
            let abandoned = self.namespaces.get(ns).is_none_or(|s| s.live.is_empty());
            if abandoned {
                let ns = ns.to_vec();
                self.forget_idle(&ns);
                self.purge(&HashSet::from([ns]), PurgeReason::NewTorchelasticRun);
            }
        }
        self.touch(conn, &key, now);
        // `semantics::compare_set`'s rules, with the stored value shared rather than copied.
        let desired = Bytes::from(desired);
        let (store, reply) = match self.kv.get(&key) {
            None if expected.is_empty() => (true, desired.clone()),
            None => (false, Bytes::from(expected)),
            Some(cur) if cur[..] == expected[..] => (true, desired.clone()),
            Some(cur) => (false, cur.clone()),
        };
        if store {
            if !self.admit(conn, "COMPARE_SET", &key, desired.len(), now) {
                return;
            }
            self.store(key, desired);
        }
        let head = Bytes::copy_from_slice(&(reply.len() as u64).to_le_bytes());
        self.send_chunks(conn, vec![head, reply]);
    }

    fn wait(&mut self, conn: ConnId, mut keys: Vec<Vec<u8>>, now: Instant) {
        keys.sort_unstable();
        keys.dedup();
        keys.retain(|k| !self.present(k));
        if keys.is_empty() {
            self.send(conn, vec![STOP_WAITING]);
            return;
        }
        let adding: u64 = keys.iter().map(|k| k.len() as u64 + KEY_OVERHEAD).sum();
        let held = self.conns.get(&conn).map_or(0, |c| c.waiting_bytes);
        if held + adding > MAX_WAITING_BYTES {
            let reason = CloseReason::TooManyWaits {
                keys: keys.len(),
                bytes: held + adding,
                limit: MAX_WAITING_BYTES,
            };
            return self.close(conn, reason, now);
        }
        for key in keys {
            self.waiters.entry(key.clone()).or_default().push(conn);
            let c = self.conns.get_mut(&conn).expect("checked by handle");
            c.pending += 1;
            c.waiting_bytes += key.len() as u64 + KEY_OVERHEAD;
            c.waiting.push(key);
        }
    }

    fn barrier(&mut self, conn: ConnId, key: Vec<u8>, world_size: i64, now: Instant) {
        self.touch(conn, &key, now);
        let count = match self.kv.get(&key) {
            None => Ok(1),
            Some(v) => semantics::stoll(v).and_then(|n| {
                n.checked_add(1)
                    .ok_or_else(|| CounterError::Overflow(n.to_string(), 1))
            }),
        };
        let count = match count {
            Ok(n) => n,
            Err(error) => return self.counter_error(conn, "BARRIER", &key, error, now),
        };
        self.kv_insert(key.clone(), semantics::encode_counter(count).into());
        if count >= world_size {
            self.wake_all(&key);
            self.send(conn, vec![STOP_WAITING]);
        } else {
            self.waiters.entry(key.clone()).or_default().push(conn);
            let c = self.conns.get_mut(&conn).expect("checked by handle");
            c.pending += 1;
            c.waiting_bytes += key.len() as u64 + KEY_OVERHEAD;
            c.waiting.push(key);
        }
    }

    fn counter_error(
        &mut self,
        conn: ConnId,
        op: &'static str,
        key: &[u8],
        error: CounterError,
        now: Instant,
    ) {
        let key = String::from_utf8_lossy(key).into_owned();
        self.close(conn, CloseReason::Counter { op, key, error }, now);
    }

    /// A key is present if it is in the KV map or names a non-empty queue.
    fn present(&self, key: &[u8]) -> bool {
        self.kv.contains_key(key) || self.queues.get(key).is_some_and(|q| !q.is_empty())
    }

    fn store(&mut self, key: Vec<u8>, value: Bytes) {
        let wake = self.waiters.contains_key(&key);
        if wake {
            self.kv_insert(key.clone(), value);
            self.wake_all(&key);
        } else {
            self.kv_insert(key, value);
        }
    }

    /// Every waiter on `key` has one key fewer to wait for.
    fn wake_all(&mut self, key: &[u8]) {
        if let Some(list) = self.waiters.remove(key) {
            list.into_iter().for_each(|c| self.release_one_key(c));
        }
    }

    /// QUEUE_PUSH: only the first waiter on the key is released.
    fn wake_one(&mut self, key: &[u8]) {
        let Some(list) = self.waiters.get_mut(key) else {
            return;
        };
        let c = list.remove(0);
        if list.is_empty() {
            self.waiters.remove(key);
        }
        self.release_one_key(c);
    }

    fn release_one_key(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.pending == 0 {
            return;
        }
        c.pending -= 1;
        if c.pending == 0 {
            c.waiting.clear();
            c.waiting_bytes = 0;
            self.send(conn, vec![STOP_WAITING]);
        }
    }

    fn unregister_waits(&mut self, conn: ConnId, c: &mut Conn) {
        for key in c.waiting.drain(..) {
            if let Some(list) = self.waiters.get_mut(&key) {
                list.retain(|&w| w != conn);
                if list.is_empty() {
                    self.waiters.remove(&key);
                }
            }
        }
        c.pending = 0;
        c.waiting_bytes = 0;
    }

    fn touch(&mut self, conn: ConnId, key: &[u8], _now: Instant) {
        let ns = namespace_of(key);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.namespaces.contains(ns) {
            return;
        }
        c.namespaces.insert(ns.to_vec());
        let state = self.namespaces.entry(ns.to_vec()).or_default();
        if let Some(since) = state.idle_since.take() {
            self.idle.remove(&(since, ns.to_vec()));
        }
        state.live.insert(conn);
    }

    fn forget_idle(&mut self, ns: &[u8]) {
        if let Some(state) = self.namespaces.get_mut(ns) {
            if let Some(since) = state.idle_since.take() {
                self.idle.remove(&(since, ns.to_vec()));
            }
            if state.live.is_empty() {
                self.namespaces.remove(ns);
            }
        }
    }

    fn purge(&mut self, namespaces: &HashSet<Vec<u8>>, reason: PurgeReason) -> usize {
        let mut counts: HashMap<&[u8], usize> =
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

    fn send(&mut self, conn: ConnId, bytes: Vec<u8>) {
        self.send_chunks(conn, vec![Bytes::from(bytes)]);
    }

    fn send_chunks(&mut self, conn: ConnId, bytes: Vec<Bytes>) {
        self.actions.push_back(Action::Send { conn, bytes });
    }

    fn close(&mut self, conn: ConnId, reason: CloseReason, now: Instant) {
        self.disconnect(conn, now);
        self.actions.push_back(Action::Close { conn, reason });
    }
}

#[cfg(test)]
mod tests;
mod usage;
mod values;
