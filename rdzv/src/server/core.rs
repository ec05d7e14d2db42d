//! The engine and the connections' outboxes behind one lock.
//!
//! Every action the engine emits is routed while the lock is held, so the bytes a connection
//! receives (its own replies, and `00` wake-ups caused by other connections) enter its outbox
//! in exactly the engine's order. That is what keeps a CANCEL_WAIT's `01` behind an earlier
//! `00`.
//!
//! Replies are [`Bytes`] chunks that share the stored values, so the lock is never held while
//! a big value is copied. Each outbox counts the bytes queued in it and not yet written
//! ([`Outbox::queued`]); [`Core::handle`] stops taking a connection's requests once that count
//! passes the connection's bound, and the connection task resumes them as the client reads.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dt_rdzv_proto::tcpstore::{Action, ConnId, Engine, EngineConfig, PurgeReason, Request, Stats};
use tokio::sync::{mpsc, watch};

/// What a connection task receives.
#[derive(Debug)]
pub(crate) enum Out {
    /// Chunks to write, in order (counted in the outbox's `queued` until written).
    Bytes(Vec<Bytes>),
    /// Flush, then close with this reason.
    Close(String),
}

pub(crate) struct Core {
    inner: Mutex<Inner>,
}

struct Inner {
    engine: Engine,
    outboxes: HashMap<ConnId, Outbox>,
}

/// Where a connection's replies go, and how many bytes wait in it.
#[derive(Clone)]
pub(crate) struct Outbox {
    /// The connection task's queue.
    pub(crate) tx: mpsc::UnboundedSender<Out>,
    /// Bytes sent into `tx` and not yet written to the socket (the task subtracts them).
    pub(crate) queued: Arc<AtomicUsize>,
}

impl Core {
    pub(crate) fn new(config: EngineConfig) -> Self {
        Self {
            inner: Mutex::new(Inner {
                engine: Engine::new(config),
                outboxes: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The engine is only mutated through its own methods, which keep it consistent at
        // every return; a panic elsewhere must not take the whole server down.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn register(&self, id: ConnId, outbox: Outbox) {
        let mut g = self.lock();
        g.engine.connect(id);
        g.outboxes.insert(id, outbox);
    }

    /// Handles `requests` in order until they are done or the connection's queued replies
    /// pass `bound` bytes; the rest stay in `requests` for later.
    pub(crate) fn handle(&self, id: ConnId, requests: &mut VecDeque<Request>, bound: usize) {
        let now = Instant::now();
        let mut g = self.lock();
        let queued = g.outboxes.get(&id).map(|o| o.queued.clone());
        while let Some(r) = requests.pop_front() {
            g.engine.handle(id, r, now);
            g.route();
            if queued
                .as_ref()
                .is_none_or(|q| q.load(Ordering::Relaxed) > bound)
            {
                break;
            }
        }
    }

    pub(crate) fn disconnect(&self, id: ConnId) {
        let mut g = self.lock();
        g.engine.disconnect(id, Instant::now());
        g.outboxes.remove(&id);
        g.route();
    }

    /// (open connections, keys)
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let g = self.lock();
        (g.outboxes.len(), g.engine.num_keys())
    }

    /// Bytes of keys and values the store holds.
    pub(crate) fn stored_bytes(&self) -> u64 {
        self.lock().engine.stored_bytes()
    }

    pub(crate) fn stats(&self) -> Stats {
        self.lock().engine.stats().clone()
    }
}

impl Inner {
    fn route(&mut self) {
        while let Some(action) = self.engine.poll_action() {
            match action {
                Action::Send { conn, bytes } => {
                    if let Some(o) = self.outboxes.get(&conn) {
                        let n = bytes.iter().map(Bytes::len).sum::<usize>();
                        o.queued.fetch_add(n, Ordering::Relaxed);
                        let _ = o.tx.send(Out::Bytes(bytes));
                    }
                }
                Action::Close { conn, reason } => {
                    if let Some(o) = self.outboxes.remove(&conn) {
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
}

/// Runs the engine's timers (namespace expiry) until `stop` flips.
pub(crate) async fn run_timers(core: Arc<Core>, mut stop: watch::Receiver<bool>) {
    loop {
        let next = core.lock().engine.poll_timeout();
        let now = Instant::now();
        let sleep = next.map_or(Duration::from_secs(1), |t| {
            t.saturating_duration_since(now).min(Duration::from_secs(1))
        });
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(sleep) => {}
        }
        let mut g = core.lock();
        g.engine.handle_timeout(Instant::now());
        g.route();
    }
}
