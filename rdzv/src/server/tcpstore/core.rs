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

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use dt_rdzv_proto::tcpstore::{
    Action, ConnId, Engine, EngineConfig, Input, PurgeReason, Request, Stats,
};
use tokio::sync::{mpsc, watch};

use crate::server::driver::{Driver, Route};

/// What a connection task receives.
#[derive(Debug)]
pub(crate) enum Out {
    /// Chunks to write, in order (counted in the outbox's `queued` until written).
    Bytes(Vec<Bytes>),
    /// Flush, then close with this reason.
    Close(String),
}

/// The engine and where its actions go.
pub(crate) struct StoreCore {
    driver: Driver<Engine, Outboxes>,
}

/// Where a connection's replies go, and how many bytes wait in it.
#[derive(Clone)]
pub(crate) struct Outbox {
    /// The connection task's queue.
    pub(crate) tx: mpsc::UnboundedSender<Out>,
    /// Bytes sent into `tx` and not yet written to the socket (the task subtracts them).
    pub(crate) queued: Arc<AtomicUsize>,
}

/// Every open connection's outbox.
#[derive(Default)]
struct Outboxes(HashMap<ConnId, Outbox>);

impl StoreCore {
    pub(crate) fn new(config: EngineConfig) -> Self {
        Self {
            driver: Driver::new(Engine::new(config), Outboxes::default()),
        }
    }

    pub(crate) fn register(&self, id: ConnId, outbox: Outbox) {
        self.driver.with(|g| {
            g.routes.0.insert(id, outbox);
            g.handle(Instant::now(), Input::Connected { conn: id });
        });
    }

    /// Handles `requests` in order until they are done or the connection's queued replies
    /// pass `bound` bytes; the rest stay in `requests` for later.
    pub(crate) fn handle(&self, id: ConnId, requests: &mut VecDeque<Request>, bound: usize) {
        let now = Instant::now();
        self.driver.with(|g| {
            let queued = g.routes.0.get(&id).map(|o| o.queued.clone());
            while let Some(request) = requests.pop_front() {
                g.handle(now, Input::Request { conn: id, request });
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
            g.routes.0.remove(&id);
        });
    }

    /// (open connections, keys)
    pub(crate) fn sizes(&self) -> (usize, usize) {
        self.driver.read(|g| (g.routes.0.len(), g.core.num_keys()))
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
            Action::Send { conn, bytes } => {
                if let Some(o) = self.0.get(&conn) {
                    let n = bytes.iter().map(Bytes::len).sum::<usize>();
                    o.queued.fetch_add(n, Ordering::Relaxed);
                    let _ = o.tx.send(Out::Bytes(bytes));
                }
            }
            Action::Close { conn, reason } => {
                if let Some(o) = self.0.remove(&conn) {
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
