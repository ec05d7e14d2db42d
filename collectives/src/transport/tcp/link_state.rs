//! What the link threads share ([`Shared`]) and what they hand the transport ([`Arrival`]):
//! the peers' addresses, which links were asked for, the channel and the wakers.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use super::handshake::Auth;
use super::setup::Setup;
use crate::error::Strangers;
use crate::transport::waker::Waker;

/// What the link threads hand the transport.
pub(crate) enum Arrival {
    /// A peer's streams, proven and acknowledged.
    Link {
        peer: usize,
        data: Vec<TcpStream>,
        ctrl: TcpStream,
    },
    /// The peer is unreachable: its listener refuses, or the deadline passed.
    Gone { peer: usize, detail: String },
    /// The peer is a member but cannot be linked to (another world size, a bad reply).
    Refused { peer: usize, detail: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
    /// Nothing asked yet.
    Idle,
    /// This rank is dialing the (lower) peer, or has.
    Dialing,
    /// This rank asked the (higher) peer to dial it.
    Asked,
}

/// What the link threads share.
pub(super) struct Shared {
    pub(super) rank: usize,
    pub(super) world: usize,
    pub(super) nsocks: usize,
    pub(super) timeout: Duration,
    pub(super) bufsize: Option<usize>,
    pub(super) auth: Auth,
    /// Indexed by rank; `None` where the peer table left an address out (that peer dials us).
    pub(super) addrs: Vec<Option<SocketAddr>>,
    pub(super) want: Mutex<Vec<Want>>,
    pub(super) tx: mpsc::Sender<Arrival>,
    /// Wakes the transport's poll when something arrived.
    pub(super) wake: Waker,
    /// Wakes the acceptor: a handshake finished, or the linker is dropped.
    pub(super) accept_wake: Waker,
    pub(super) stop: AtomicBool,
    /// Unproven connections dropped so far, for timeouts to name.
    pub(super) strangers: Mutex<Strangers>,
}

impl Shared {
    pub(super) fn setup(&self) -> Setup {
        Setup {
            rank: self.rank,
            world: self.world,
            nsocks: self.nsocks,
            start: Instant::now(),
            timeout: self.timeout,
            bufsize: self.bufsize,
        }
    }

    pub(super) fn note_stranger(&self, from: SocketAddr, evicted: bool) {
        self.strangers
            .lock()
            .expect("stranger tally")
            .note(from.ip(), evicted);
    }

    pub(super) fn send(&self, a: Arrival) {
        let _ = self.tx.send(a);
        self.wake.wake();
    }
}
