//! Links opened when a schedule first needs them.
//!
//! A rank knows every peer's address from the start (the store's entries or the `Welcome`'s
//! peer table) but connects to a peer only when a call first moves bytes to or from it, so a
//! rank that only ever allreduces holds its ring neighbours and its doubling partners:
//! O(log N) links, not N − 1. The higher rank of a pair always dials (all `nsocks` data
//! streams, then the control stream); the lower one, when it needs the link first, asks the
//! higher one to dial it with a one-stream *dial-me* hello. So each pair is dialed once, by one
//! side, and there is no race to break.
//!
//! Every connection proves membership with the [`handshake`](super::handshake). One acceptor
//! thread per communicator takes connections on the data listener for its whole life and
//! hands each to a short-lived handshake thread (a stranger that sends nothing holds only its
//! own thread, for at most `accept::STRANGER_WAIT`); dials and dial-me requests run on their own
//! threads too. What they produce arrives on a channel the transport drains, and an `eventfd`
//! wakes the transport's `poll`.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use super::accept::accept_loop;
use super::dial::ensure;
use super::handshake::Auth;
use super::setup::Setup;
use crate::error::Strangers;
use crate::transport::waker::Waker;

pub(crate) use super::link_state::Arrival;
use super::link_state::{Shared, Want};

/// This rank's link maker: the acceptor thread and the dials it started.
pub(crate) struct Linker {
    shared: Arc<Shared>,
    rx: mpsc::Receiver<Arrival>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Linker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Linker(rank {})", self.shared.rank)
    }
}

impl Linker {
    /// Starts accepting on `listener` for the context of `auth`; `addrs` (indexed by rank) say
    /// where the peers listen.
    pub(crate) fn start(
        su: &Setup,
        auth: &Auth,
        listener: TcpListener,
        addrs: Vec<Option<SocketAddr>>,
    ) -> Result<Linker, crate::error::CommError> {
        let (tx, rx) = mpsc::channel();
        let waker = || Waker::new().map_err(|e| su.err(format!("eventfd: {e}")));
        let (wake, accept_wake) = (waker()?, waker()?);
        let shared = Arc::new(Shared {
            rank: su.rank,
            world: su.world,
            nsocks: su.nsocks,
            timeout: su.timeout,
            bufsize: su.bufsize,
            auth: auth.clone(),
            addrs,
            want: Mutex::new(vec![Want::Idle; su.world]),
            tx,
            wake,
            accept_wake,
            stop: AtomicBool::new(false),
            strangers: Mutex::new(Strangers::default()),
        });
        let sh = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("dtcomm-accept".into())
            .spawn(move || accept_loop(&sh, &listener))
            .map_err(|e| su.err(format!("spawning the acceptor thread: {e}")))?;
        Ok(Linker {
            shared,
            rx,
            acceptor: Some(acceptor),
        })
    }

    /// Starts bringing up the link to `peer` (idempotent).
    pub(crate) fn ensure(&self, peer: usize) {
        ensure(&self.shared, peer);
    }

    /// The next thing that arrived, if any.
    pub(crate) fn try_arrival(&self) -> Option<Arrival> {
        self.rx.try_recv().ok()
    }

    /// Polled for `POLLIN` beside the links: readable when something arrived.
    pub(crate) fn waker(&self) -> &Waker {
        &self.shared.wake
    }

    /// Unproven connections the data port dropped so far.
    pub(crate) fn strangers(&self) -> Strangers {
        self.shared
            .strangers
            .lock()
            .expect("stranger tally")
            .clone()
    }

    /// Data streams per link.
    pub(crate) fn nsocks(&self) -> usize {
        self.shared.nsocks
    }
}

impl Drop for Linker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.accept_wake.wake();
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}
