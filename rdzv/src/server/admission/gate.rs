//! [`Admission`] for one accept loop: eviction through a oneshot per connection, the
//! first-bytes wait on the socket, activity reports, and optional reserved slots.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};

use super::{Admission, Decision, FIRST_BYTES};
use crate::server::ratelog;

/// Which slots a connection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Pool {
    Main,
    Reserve,
}

struct GateState {
    main: Admission,
    reserve: Option<Admission>,
    evict: HashMap<(Pool, u64), oneshot::Sender<()>>,
}

impl GateState {
    fn rule(&mut self, pool: Pool) -> Option<&mut Admission> {
        match pool {
            Pool::Main => Some(&mut self.main),
            Pool::Reserve => self.reserve.as_mut(),
        }
    }
}

/// [`Admission`] for one accept loop.
pub(crate) struct Gate {
    what: &'static str,
    max: usize,
    /// Whether the door reports its connections' activity ([`Activity`]): a proven connection
    /// is then idle, and evictable, until it reports a request.
    tracks_activity: bool,
    state: Mutex<GateState>,
}

/// An admitted connection's slot: freed when dropped.
pub(crate) struct Ticket {
    id: u64,
    pool: Pool,
    gate: Arc<Gate>,
    evicted: Option<oneshot::Receiver<()>>,
}

/// Reports a connection's requests to its gate (busy while one is handled, idle between).
#[derive(Clone)]
pub(crate) struct Activity {
    id: u64,
    pool: Pool,
    gate: Arc<Gate>,
}

impl Gate {
    /// A gate of `max` slots for the door `what`; proven connections are never evicted.
    pub(crate) fn new(what: &'static str, max: usize) -> Arc<Self> {
        Self::build(what, max, 0, false)
    }

    /// A gate of `max` slots whose proven connections are evictable while idle (the door
    /// reports requests through [`Ticket::activity`]), plus `reserve` slots given to a new
    /// connection when the main ones refuse it (the door serves those only what must never
    /// be locked out: `/healthz`).
    pub(crate) fn with_reserve(what: &'static str, max: usize, reserve: usize) -> Arc<Self> {
        Self::build(what, max, reserve, true)
    }

    fn build(what: &'static str, max: usize, reserve: usize, tracks: bool) -> Arc<Self> {
        Arc::new(Self {
            what,
            max,
            tracks_activity: tracks,
            state: Mutex::new(GateState {
                main: Admission::new(max, Admission::default_per_source(max)),
                // The reserve has no per-source share: it is small and short-lived.
                reserve: (reserve > 0).then(|| Admission::new(reserve, reserve)),
                evict: HashMap::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection from `peer` arrived: its ticket, or `None` (refused, logged at a limited
    /// rate) when every slot, reserved ones included, holds a busy connection or a new one.
    pub(crate) fn admit(self: &Arc<Self>, peer: SocketAddr) -> Option<Ticket> {
        let now = Instant::now();
        let mut st = self.lock();
        let mut decided = (Pool::Main, st.main.admit(peer.ip(), now));
        if decided.1 == Decision::Refuse
            && let Some(r) = st.reserve.as_mut()
        {
            decided = (Pool::Reserve, r.admit(peer.ip(), now));
        }
        match decided {
            (_, Decision::Refuse) => {
                drop(st);
                ratelog::limited!(warn,
                    "connection refused: at the connection limit (every slot holds a client that is being served or is new)",
                    door = self.what, %peer, limit = self.max);
                None
            }
            (pool, Decision::Admit { id, evict }) => {
                if let Some(old) = evict
                    && let Some(tx) = st.evict.remove(&(pool, old))
                {
                    let _ = tx.send(());
                    drop(st);
                    ratelog::limited!(info, "closed a silent or idle connection to make room",
                        door = self.what, %peer);
                    st = self.lock();
                }
                let (tx, rx) = oneshot::channel();
                st.evict.insert((pool, id), tx);
                Some(Ticket {
                    id,
                    pool,
                    gate: self.clone(),
                    evicted: Some(rx),
                })
            }
        }
    }
}

impl Ticket {
    /// Waits until `stream` has bytes to read (the connection is then proven), at most
    /// [`FIRST_BYTES`]; false when it stayed silent or was evicted meanwhile (close it).
    pub(crate) async fn first_bytes(&mut self, stream: &TcpStream) -> bool {
        let Some(mut evicted) = self.evicted.take() else {
            return true;
        };
        // `peek`, not `readable`: readiness may be reported spuriously; a byte may not.
        let mut first = [0u8; 1];
        let arrived = tokio::select! {
            r = tokio::time::timeout(FIRST_BYTES, stream.peek(&mut first)) => {
                matches!(r, Ok(Ok(n)) if n > 0)
            }
            _ = &mut evicted => false,
        };
        let tracks = self.gate.tracks_activity;
        let mut st = self.gate.lock();
        if arrived {
            // Still evictable (while idle, or as the newest of a host holding more than half
            // the door): keep the way to be told.
            self.evicted = Some(evicted);
        } else {
            st.evict.remove(&(self.pool, self.id));
        }
        if arrived && let Some(rule) = st.rule(self.pool) {
            rule.prove(self.id, tracks, Instant::now());
        }
        arrived
    }

    /// Resolves when the gate evicts this (idle) connection to make room; never if it cannot.
    pub(crate) async fn evicted(&mut self) {
        match self.evicted.as_mut() {
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending().await,
        }
    }

    /// Whether the connection holds a reserved slot (serve it only what the reserve is for).
    pub(crate) fn reserved(&self) -> bool {
        self.pool == Pool::Reserve
    }

    /// What the door reports this connection's requests through.
    pub(crate) fn activity(&self) -> Activity {
        Activity {
            id: self.id,
            pool: self.pool,
            gate: self.gate.clone(),
        }
    }
}

impl Activity {
    /// A request started: the connection is not evictable until [`Activity::idle`].
    pub(crate) fn busy(&self) {
        if let Some(rule) = self.gate.lock().rule(self.pool) {
            rule.busy(self.id);
        }
    }

    /// The request was answered: evictable again, the longest idle first.
    pub(crate) fn idle(&self) {
        if let Some(rule) = self.gate.lock().rule(self.pool) {
            rule.idle(self.id, Instant::now());
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.gate.lock();
        st.evict.remove(&(self.pool, self.id));
        if let Some(rule) = st.rule(self.pool) {
            rule.close(self.id);
        }
    }
}

/// A stop for one connection: the server's `stop`, turned true also when the gate evicts
/// `slot`, and the future that tells it (poll it beside the connection; it never completes,
/// so that the connection ends through its own shutdown path and cleans up).
pub(crate) fn stop_or_evicted(
    mut stop: watch::Receiver<bool>,
    slot: &mut Ticket,
) -> (watch::Receiver<bool>, impl Future<Output = ()> + '_) {
    let (tx, rx) = watch::channel(*stop.borrow());
    let tell = async move {
        tokio::select! {
            _ = stop.changed() => {}
            _ = slot.evicted() => {}
        }
        let _ = tx.send(true);
        std::future::pending::<()>().await
    };
    (rx, tell)
}
