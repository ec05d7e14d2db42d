//! The TCPStore door's core: the store engine and the connections' outboxes, behind the
//! server's one [`Driver`].
//!
//! Every action the engine emits is routed while the lock is held, so the bytes a connection
//! receives (its own replies, and `00` wake-ups caused by other connections) enter its outbox
//! in exactly the engine's order. That is what keeps a CANCEL_WAIT's `01` behind an earlier
//! `00`.
//!
//! Replies are [`Bytes`] chunks that share the stored values, so the lock is never held while
//! a big value is copied. Each outbox counts the bytes queued in it and not yet written
//! ([`Outbox::queued`]); [`StoreCore::handle`] stops taking a connection's requests once that
//! count passes the connection's bound, and the connection task resumes them as the client
//! reads.
//!
//! The door has one memory budget, the store quota (`--max-store-bytes`), for every byte a
//! client can make it hold: the engine's stored keys and values, namespace bookkeeping and
//! waiting keys, plus what [`DoorMemory`] counts here for all connections together: the bytes
//! of queued replies that are theirs (not shared with stored values) and the connections'
//! partial frames. The engine is told that sum before each request, so a write, a wait or a
//! LIST_KEYS answer that would pass the budget is refused by name. The door's holdings count
//! against the server's one budget too ([`ServerMemory`]): the engine is told what the other
//! doors hold, and a partial frame must fit in what the server has left.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use dt_rdzv_proto::tcpstore::{
    Action, ConnId, Engine, EngineConfig, Input, PurgeReason, Request, Stats,
};
use tokio::sync::{mpsc, watch};

use crate::server::driver::{Driver, Route};
use crate::server::memory::{Door, Held, ServerMemory, release};

/// What a connection task receives.
#[derive(Debug)]
pub(crate) enum Out {
    /// Chunks to write, in order (counted in the outbox's `queued` until written), and how
    /// many of their bytes are the reply's own (charged to [`DoorMemory`] until written).
    Bytes(Vec<Bytes>, usize),
    /// Flush, then close with this reason.
    Close(String),
}

/// The engine and where its actions go.
pub(crate) struct StoreCore {
    driver: Driver<Engine, Outboxes>,
    memory: Arc<DoorMemory>,
}

/// What the door holds for its clients, over every connection, against its budget.
#[derive(Debug)]
pub(crate) struct DoorMemory {
    /// The budget (the store quota), if any.
    pub(crate) limit: Option<u64>,
    /// Replies queued and not yet written (their own bytes).
    pub(crate) external: AtomicU64,
    /// Partial frames being read, bytes: half the budget of their own, kept out of what the
    /// engine's quotas see, so that strangers holding frames cannot get a client's writes
    /// refused (nor its connection closed).
    pub(crate) frames: AtomicU64,
    /// What the engine held after its last request ([`Engine::held_bytes`]).
    pub(crate) engine: AtomicU64,
    /// The server's budget, over every door.
    pub(crate) server: Arc<ServerMemory>,
}

impl Held for DoorMemory {
    fn held(&self) -> u64 {
        self.engine.load(Ordering::Relaxed) + self.external.load(Ordering::Relaxed)
    }

    fn frames(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }
}

impl DoorMemory {
    /// Whether a partial frame may grow by `more` bytes: partial frames together hold at most
    /// half the budget, and the server must have room; else why not.
    pub(crate) fn room_for_frame(&self, more: u64) -> Result<(), String> {
        self.server.frame_room(Door::TcpStore, more)?;
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let held = self.frames.load(Ordering::Relaxed);
        if held.saturating_add(more) > limit / 2 {
            let left = (limit / 2).saturating_sub(held);
            return Err(format!(
                "partial frames may hold half the store quota (the TCPStore door's memory \
                 budget) of {limit} bytes, and {left} of that half is left"
            ));
        }
        Ok(())
    }

    /// `n` more bytes of partial frames held.
    pub(crate) fn add_frames(&self, n: u64) {
        self.frames.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` bytes fewer of partial frames held.
    pub(crate) fn sub_frames(&self, n: u64) {
        release(&self.frames, n);
    }

    /// `n` more bytes held outside the engine.
    pub(crate) fn add(&self, n: u64) {
        self.external.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` bytes fewer held outside the engine.
    pub(crate) fn sub(&self, n: u64) {
        release(&self.external, n);
    }
}

/// Where a connection's replies go, and how many bytes wait in it.
#[derive(Clone)]
pub(crate) struct Outbox {
    /// The connection task's queue.
    pub(crate) tx: mpsc::UnboundedSender<Out>,
    /// Bytes sent into `tx` and not yet written to the socket (the task subtracts them).
    pub(crate) queued: Arc<AtomicUsize>,
}

/// Every open connection's outbox, and the door's memory (replies' own bytes are charged to
/// it as they are queued; the connection task releases them as it writes).
struct Outboxes {
    conns: HashMap<ConnId, Outbox>,
    memory: Arc<DoorMemory>,
}

impl StoreCore {
    pub(crate) fn new(config: EngineConfig, server: Arc<ServerMemory>) -> Self {
        let memory = Arc::new(DoorMemory {
            limit: config.max_store_bytes,
            external: AtomicU64::new(0),
            frames: AtomicU64::new(0),
            engine: AtomicU64::new(0),
            server: server.clone(),
        });
        server.register(Door::TcpStore, memory.clone());
        let outboxes = Outboxes {
            conns: HashMap::new(),
            memory: memory.clone(),
        };
        Self {
            driver: Driver::new(Engine::new(config), outboxes),
            memory,
        }
    }

    /// The door's memory, for the connection tasks.
    pub(crate) fn memory(&self) -> &Arc<DoorMemory> {
        &self.memory
    }

    pub(crate) fn register(&self, id: ConnId, outbox: Outbox) {
        self.driver.with(|g| {
            g.routes.conns.insert(id, outbox);
            g.handle(Instant::now(), Input::Connected { conn: id });
        });
    }

    /// Handles `requests` in order until they are done or the connection's queued replies
    /// pass `bound` bytes; the rest stay in `requests` for later.
    pub(crate) fn handle(&self, id: ConnId, requests: &mut VecDeque<Request>, bound: usize) {
        let now = Instant::now();
        self.driver.with(|g| {
            let queued = g.routes.conns.get(&id).map(|o| o.queued.clone());
            while let Some(request) = requests.pop_front() {
                let external = self.memory.external.load(Ordering::Relaxed);
                g.core.set_external_bytes(external);
                let server = &self.memory.server;
                g.core
                    .set_server_budget(server.data_limit(), server.elsewhere(Door::TcpStore));
                g.handle(now, Input::Request { conn: id, request });
                self.memory
                    .engine
                    .store(g.core.held_bytes(), Ordering::Relaxed);
                if queued
                    .as_ref()
                    .is_none_or(|q| q.load(Ordering::Relaxed) > bound)
                {
                    break;
                }
            }
        });
    }

    pub(crate) fn disconnect(&self, id: ConnId) {
        self.driver.with(|g| {
            g.core.handle(Instant::now(), Input::Closed { conn: id });
            g.routes.conns.remove(&id);
            self.memory
                .engine
                .store(g.core.held_bytes(), Ordering::Relaxed);
        });
    }

    /// (open connections, keys)
    pub(crate) fn sizes(&self) -> (usize, usize) {
        self.driver
            .read(|g| (g.routes.conns.len(), g.core.num_keys()))
    }

    /// Bytes of keys and values the store holds.
    pub(crate) fn stored_bytes(&self) -> u64 {
        self.driver.read(|g| g.core.stored_bytes())
    }

    pub(crate) fn stats(&self) -> Stats {
        self.driver.read(|g| g.core.stats().clone())
    }

    /// Runs the engine's timers (namespace expiry) until `stop` flips.
    pub(crate) async fn run_timers(&self, stop: watch::Receiver<bool>) {
        self.driver.run_timers(stop).await;
    }
}

impl Route<Action> for Outboxes {
    fn route(&mut self, action: Action) {
        match action {
            Action::Send { conn, bytes, owned } => {
                if let Some(o) = self.conns.get(&conn) {
                    let n = bytes.iter().map(Bytes::len).sum::<usize>();
                    o.queued.fetch_add(n, Ordering::Relaxed);
                    self.memory.add(owned as u64);
                    let _ = o.tx.send(Out::Bytes(bytes, owned));
                }
            }
            Action::Close { conn, reason } => {
                if let Some(o) = self.conns.remove(&conn) {
                    let _ = o.tx.send(Out::Close(reason.to_string()));
                }
            }
            Action::Purged {
                namespace,
                removed,
                reason,
            } => {
                let why = match reason {
                    PurgeReason::Idle => "idle past the namespace TTL",
                    PurgeReason::NewTorchelasticRun => {
                        "a new torchelastic run started after every agent of the old one left"
                    }
                    PurgeReason::Explicit => "purge requested",
                };
                tracing::info!(%namespace, removed, reason = why, "namespace purged");
            }
        }
    }
}
