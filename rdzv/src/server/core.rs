//! The engine and the connections' outboxes behind one lock.
//!
//! Every action the engine emits is routed while the lock is held, so the bytes a connection
//! receives (its own replies, and `00` wake-ups caused by other connections) enter its outbox
//! in exactly the engine's order. That is what keeps a CANCEL_WAIT's `01` behind an earlier
//! `00`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dt_rdzv_proto::tcpstore::{Action, ConnId, Engine, EngineConfig, PurgeReason, Request, Stats};
use tokio::sync::{mpsc, watch};

/// What a connection task receives.
#[derive(Debug)]
pub(crate) enum Out {
    /// Bytes to write, in order.
    Bytes(Vec<u8>),
    /// Flush, then close with this reason.
    Close(String),
}

pub(crate) struct Core {
    inner: Mutex<Inner>,
}

struct Inner {
    engine: Engine,
    outboxes: HashMap<ConnId, mpsc::UnboundedSender<Out>>,
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

    pub(crate) fn register(&self, id: ConnId, outbox: mpsc::UnboundedSender<Out>) {
        let mut g = self.lock();
        g.engine.connect(id);
        g.outboxes.insert(id, outbox);
    }

    pub(crate) fn handle(&self, id: ConnId, requests: Vec<Request>) {
        let now = Instant::now();
        let mut g = self.lock();
        for r in requests {
            g.engine.handle(id, r, now);
        }
        g.route();
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

    pub(crate) fn stats(&self) -> Stats {
        self.lock().engine.stats().clone()
    }
}

impl Inner {
    fn route(&mut self) {
        while let Some(action) = self.engine.poll_action() {
            match action {
                Action::Send { conn, bytes } => {
                    if let Some(tx) = self.outboxes.get(&conn) {
                        let _ = tx.send(Out::Bytes(bytes));
                    }
                }
                Action::Close { conn, reason } => {
                    if let Some(tx) = self.outboxes.remove(&conn) {
                        let _ = tx.send(Out::Close(reason.to_string()));
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
