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
//! own thread, for at most [`STRANGER_WAIT`]); dials and dial-me requests run on their own
//! threads too. What they produce arrives on a channel the transport drains, and an `eventfd`
//! wakes the transport's `poll`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockRef, Socket, Type};

use super::handshake::{self, Auth, Hello};
use super::setup::{Setup, mismatch_detail};
use crate::error::Strangers;
use crate::transport::waker::Waker;

/// Longest a stranger may hold a handshake slot (a member answers in microseconds).
const STRANGER_WAIT: Duration = Duration::from_secs(5);
/// Handshakes in flight at once beyond one per possible stream; past them a new connection
/// takes the slot of the oldest handshake that has waited [`HANDSHAKE_GRACE`] (a member
/// answers in microseconds: one still silent then is a stranger), or is dropped.
const SPARE_HANDSHAKES: usize = 64;
/// How long a handshake in flight is safe from eviction.
const HANDSHAKE_GRACE: Duration = Duration::from_millis(250);
/// Dropped connections logged one by one; after that, every 100th.
const DROPS_LOGGED: usize = 5;
/// How long a peer's listener may refuse connections before the peer counts as gone (its
/// listener is up before its address is published, so a refusal means it closed).
const REFUSED_GRACE: Duration = Duration::from_millis(250);
/// The `stream` of a dial-me hello: "I need this link; dial me".
pub(crate) const DIAL_ME: usize = u32::MAX as usize;

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
enum Want {
    /// Nothing asked yet.
    Idle,
    /// This rank is dialing the (lower) peer, or has.
    Dialing,
    /// This rank asked the (higher) peer to dial it.
    Asked,
}

/// What the link threads share.
struct Shared {
    rank: usize,
    world: usize,
    nsocks: usize,
    timeout: Duration,
    bufsize: Option<usize>,
    auth: Auth,
    /// Indexed by rank; `None` where the peer table left an address out (that peer dials us).
    addrs: Vec<Option<SocketAddr>>,
    want: Mutex<Vec<Want>>,
    tx: mpsc::Sender<Arrival>,
    /// Wakes the transport's poll when something arrived.
    wake: Waker,
    /// Wakes the acceptor: a handshake finished, or the linker is dropped.
    accept_wake: Waker,
    stop: AtomicBool,
    /// Unproven connections dropped so far, for timeouts to name.
    strangers: Mutex<Strangers>,
}

impl Shared {
    fn setup(&self) -> Setup {
        Setup {
            rank: self.rank,
            world: self.world,
            nsocks: self.nsocks,
            start: Instant::now(),
            timeout: self.timeout,
            bufsize: self.bufsize,
        }
    }

    fn note_stranger(&self, from: SocketAddr, evicted: bool) {
        self.strangers
            .lock()
            .expect("stranger tally")
            .note(from.ip(), evicted);
    }

    fn send(&self, a: Arrival) {
        let _ = self.tx.send(a);
        self.wake.wake();
    }

    /// Starts whatever brings up the link to `peer`, once.
    fn ensure(self: &Arc<Self>, peer: usize) {
        {
            let mut want = self.want.lock().expect("link state");
            if want[peer] != Want::Idle {
                return;
            }
            want[peer] = if peer < self.rank {
                Want::Dialing
            } else {
                Want::Asked
            };
        }
        let Some(addr) = self.addrs[peer] else {
            // Not in our peer table: the peer knows ours and dials when it needs the link.
            return;
        };
        let me = self.clone();
        let dial = peer < self.rank;
        let spawned = std::thread::Builder::new()
            .name(if dial { "dtcomm-dial" } else { "dtcomm-ask" }.into())
            .spawn(move || {
                let su = me.setup();
                if dial {
                    me.send(match dial_all(&su, &me.auth, peer, addr) {
                        Ok((data, ctrl)) => Arrival::Link { peer, data, ctrl },
                        Err(e) => e.into_arrival(peer),
                    });
                } else if let Err(e) = connect(&su, &me.auth, peer, addr, DIAL_ME) {
                    me.send(e.into_arrival(peer));
                }
            });
        if let Err(e) = spawned {
            self.send(Arrival::Gone {
                peer,
                detail: format!("spawning a thread to link rank {peer}: {e}"),
            });
        }
    }
}

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
        self.shared.ensure(peer);
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

/// Why a dial failed.
enum DialError {
    Gone(String),
    Refused(String),
}

impl DialError {
    fn into_arrival(self, peer: usize) -> Arrival {
        match self {
            DialError::Gone(detail) => Arrival::Gone { peer, detail },
            DialError::Refused(detail) => Arrival::Refused { peer, detail },
        }
    }
}

/// Dials every stream of the link to (lower) `peer`: data streams, then control.
fn dial_all(
    su: &Setup,
    auth: &Auth,
    peer: usize,
    addr: SocketAddr,
) -> Result<(Vec<TcpStream>, TcpStream), DialError> {
    let mut data = Vec::with_capacity(su.nsocks);
    for s in 0..su.nsocks {
        data.push(connect(su, auth, peer, addr, s)?);
    }
    let ctrl = connect(su, auth, peer, addr, su.nsocks)?;
    Ok((data, ctrl))
}

/// Opens one proven connection to `peer` at `addr` for `stream` (or a dial-me request).
fn connect(
    su: &Setup,
    auth: &Auth,
    peer: usize,
    addr: SocketAddr,
    stream: usize,
) -> Result<TcpStream, DialError> {
    let mut warned = false;
    let mut last_err = String::new();
    let mut refused_since: Option<Instant> = None;
    loop {
        let Some(left) = su.remaining() else {
            return Err(DialError::Gone(format!(
                "connecting to rank {peer} at {addr}: no link within {:?}; last error: {last_err}",
                su.timeout
            )));
        };
        if !warned && su.start.elapsed() > su.timeout / 2 {
            warned = true;
            tracing::warn!(rank = su.rank, peer, %addr, "dtcomm: still connecting to rank {peer} at {addr} after half the deadline");
        }
        let attempt = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .and_then(|s| {
                su.size_buffers(SockRef::from(&s))?;
                s.connect_timeout(&addr.into(), left.min(Duration::from_secs(5)))?;
                Ok(TcpStream::from(s))
            });
        let mut s = match attempt {
            Ok(s) => s,
            Err(e) => {
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    let since = *refused_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= REFUSED_GRACE {
                        return Err(DialError::Gone(format!(
                            "rank {peer}'s data listener at {addr} refuses connections \
                             (its communicator was closed or its process exited)"
                        )));
                    }
                } else {
                    refused_since = None;
                }
                last_err = e.to_string();
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        refused_since = None;
        let what = |e: String| {
            DialError::Refused(format!(
                "handshake with rank {peer} at {addr} (stream {stream}, {}): {e}",
                auth.label
            ))
        };
        let hello = handshake::hello(auth, su.me(stream), handshake::nonce());
        let mut challenge = [0u8; handshake::CHALLENGE_LEN];
        let io = s
            .set_nodelay(true)
            .and_then(|_| s.set_write_timeout(Some(left)))
            .and_then(|_| s.set_read_timeout(Some(left)))
            .and_then(|_| s.write_all(&hello))
            .and_then(|_| s.read_exact(&mut challenge));
        if let Err(e) = io {
            // Dropped without a challenge: the listener is not (yet) in this context (a peer
            // still finishing the previous round, or a port reused by another process). Try
            // again until the deadline, which names the peer and the last error.
            last_err = format!(
                "handshake: {e} (the listener dropped the hello: not yet in {}?)",
                auth.label
            );
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let ((their_rank, their_world), proof) =
            handshake::prove(auth, &hello, &challenge).map_err(|d| what(d.to_string()))?;
        if their_rank != peer {
            return Err(what(format!("the listener is rank {their_rank}")));
        }
        // Let the acceptor see the proof (and fail on the mismatch too) before failing here.
        let sent = s.write_all(&proof);
        if their_world != su.world {
            return Err(DialError::Refused(mismatch_detail(
                su,
                peer,
                their_world,
                None,
            )));
        }
        let mut ack = [0u8; 4];
        sent.and_then(|_| s.read_exact(&mut ack))
            .map_err(|e| what(format!("{e} (the peer refused the link)")))?;
        if &ack != handshake::ACK {
            return Err(what(format!("bad handshake reply {ack:?}")));
        }
        s.set_read_timeout(None)
            .and_then(|_| s.set_write_timeout(None))
            .and_then(|_| s.set_nonblocking(true))
            .map_err(|e| what(e.to_string()))?;
        return Ok(s);
    }
}

/// What a handshake thread found out about one accepted connection.
enum Accepted {
    /// A proven member's stream (or dial-me request).
    Member(Hello, TcpStream),
    /// A proven member with another world size or socket count.
    Mismatch(Hello),
    /// Not a member of this context: dropped.
    Stranger(SocketAddr, String),
}

/// The acceptor's side of one handshake, on its own thread.
fn answer(auth: &Auth, me: Hello, mut s: TcpStream, from: SocketAddr, wait: Duration) -> Accepted {
    let stranger = |why: String| Accepted::Stranger(from, why);
    let mut hello = [0u8; handshake::HELLO_LEN];
    let io = s
        .set_nonblocking(false)
        .and_then(|_| s.set_nodelay(true))
        .and_then(|_| s.set_read_timeout(Some(wait)))
        .and_then(|_| s.set_write_timeout(Some(wait)))
        .and_then(|_| s.read_exact(&mut hello));
    if let Err(e) = io {
        return stranger(format!("no hello within {wait:?}: {e}"));
    }
    let (them, challenge) = match handshake::challenge(auth, &hello, me, handshake::nonce()) {
        Ok(x) => x,
        Err(d) => return stranger(d.to_string()),
    };
    let mut proof = [0u8; handshake::PROOF_LEN];
    if let Err(e) = s
        .write_all(&challenge)
        .and_then(|_| s.read_exact(&mut proof))
    {
        return stranger(format!("no proof: {e}"));
    }
    if let Err(d) = handshake::check(auth, &hello, &challenge, &proof) {
        return stranger(format!("{d} (claimed rank {})", them.rank));
    }
    if them.world != me.world || them.nsocks != me.nsocks {
        return Accepted::Mismatch(them);
    }
    Accepted::Member(them, s)
}

/// Per higher peer: its data streams and its control stream, as they connect.
type Partial = (Vec<Option<TcpStream>>, Option<TcpStream>);

/// Takes connections until the linker is dropped.
fn accept_loop(sh: &Arc<Shared>, listener: &TcpListener) {
    let wake = &sh.accept_wake;
    let su = sh.setup();
    let (tx, rx) = mpsc::channel::<(u64, Accepted)>();
    let mut partial: BTreeMap<usize, Partial> = BTreeMap::new();
    // Handshakes in flight: when each started, and a handle to close it early.
    let mut in_flight: BTreeMap<u64, (Instant, SocketAddr, Option<TcpStream>)> = BTreeMap::new();
    let mut next_id = 0u64;
    let mut dropped = 0usize;
    let mut evicted = 0usize;
    let cap = sh.world.saturating_mul(sh.nsocks + 2) + SPARE_HANDSHAKES;
    if let Err(e) = listener.set_nonblocking(true) {
        sh.send(Arrival::Refused {
            peer: sh.rank,
            detail: format!("data listener: set_nonblocking: {e}"),
        });
        return;
    }
    while !sh.stop.load(Ordering::Acquire) {
        wake.reset();
        while let Ok((id, a)) = rx.try_recv() {
            let evicted_before = in_flight.remove(&id).is_none();
            match a {
                // Counted when it was closed to make room.
                Accepted::Stranger(..) if evicted_before => {}
                Accepted::Stranger(from, why) => {
                    dropped += 1;
                    sh.note_stranger(from, false);
                    if dropped <= DROPS_LOGGED || dropped.is_multiple_of(100) {
                        tracing::warn!(rank = sh.rank, %from, dropped, "dtcomm: dropped a connection to the data port from {from}: {why} ({dropped} dropped so far)");
                    }
                }
                Accepted::Mismatch(them) => sh.send(Arrival::Refused {
                    peer: them.rank,
                    detail: mismatch_detail(&su, them.rank, them.world, Some(them.nsocks)),
                }),
                Accepted::Member(them, s) => member(sh, &mut partial, them, s),
            }
        }
        loop {
            match listener.accept() {
                Ok((s, from)) => {
                    if in_flight.len() >= cap {
                        let now = Instant::now();
                        let oldest = in_flight
                            .iter()
                            .next()
                            .filter(|(_, (since, _, _))| now - *since >= HANDSHAKE_GRACE)
                            .map(|(id, _)| *id);
                        match oldest.and_then(|id| in_flight.remove(&id)) {
                            Some((_, old_from, stream)) => {
                                // Its thread's read fails at once (its report is not counted
                                // again: the id is gone).
                                if let Some(old) = stream {
                                    let _ = old.shutdown(std::net::Shutdown::Both);
                                }
                                evicted += 1;
                                sh.note_stranger(old_from, true);
                            }
                            None => {
                                dropped += 1;
                                sh.note_stranger(from, false);
                                if dropped <= DROPS_LOGGED || dropped.is_multiple_of(100) {
                                    tracing::warn!(rank = sh.rank, %from, "dtcomm: dropped a connection from {from}: {} handshakes in flight", in_flight.len());
                                }
                                continue;
                            }
                        }
                    }
                    next_id += 1;
                    let id = next_id;
                    in_flight.insert(id, (Instant::now(), from, s.try_clone().ok()));
                    let (tx, auth, me) = (tx.clone(), sh.auth.clone(), su.me(0));
                    let shared = sh.clone();
                    let spawned = std::thread::Builder::new()
                        .name("dtcomm-hello".into())
                        .spawn(move || {
                            let _ = tx.send((id, answer(&auth, me, s, from, STRANGER_WAIT)));
                            shared.accept_wake.wake();
                        });
                    if let Err(e) = spawned {
                        in_flight.remove(&id);
                        tracing::warn!(rank = sh.rank, "dtcomm: spawning a handshake thread: {e}");
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(rank = sh.rank, "dtcomm: accept on the data port: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    break;
                }
            }
        }
        let mut pfd = [
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two initialised pollfds on the stack.
        unsafe { libc::poll(pfd.as_mut_ptr(), 2, 1000) };
    }
    if dropped + evicted > 0 {
        tracing::info!(
            rank = sh.rank,
            dropped,
            evicted,
            "dtcomm: {dropped} unproven connection(s) to the data port were dropped, {evicted} \
             silent one(s) closed to make room"
        );
    }
}

/// A proven member's connection: a stream of a higher rank's link, or a lower rank's
/// dial-me request.
fn member(sh: &Arc<Shared>, partial: &mut BTreeMap<usize, Partial>, them: Hello, mut s: TcpStream) {
    let p = them.rank;
    let ack = |s: &mut TcpStream| {
        s.write_all(handshake::ACK)
            .and_then(|_| s.set_read_timeout(None))
            .and_then(|_| s.set_write_timeout(None))
            .and_then(|_| s.set_nonblocking(true))
    };
    if them.stream == DIAL_ME && p < sh.rank {
        let _ = ack(&mut s);
        sh.ensure(p);
        return;
    }
    if p <= sh.rank || p >= sh.world || them.stream > sh.nsocks {
        sh.send(Arrival::Refused {
            peer: p,
            detail: format!(
                "rank {p} (proven member) sent an unexpected hello: stream {}",
                them.stream
            ),
        });
        return;
    }
    let slot = partial
        .entry(p)
        .or_insert_with(|| ((0..sh.nsocks).map(|_| None).collect(), None));
    let place = if them.stream == sh.nsocks {
        &mut slot.1
    } else {
        &mut slot.0[them.stream]
    };
    if place.is_some() {
        sh.send(Arrival::Refused {
            peer: p,
            detail: format!(
                "rank {p} connected stream {} twice (two ranks with one rank number?)",
                them.stream
            ),
        });
        return;
    }
    if let Err(e) = ack(&mut s) {
        sh.send(Arrival::Gone {
            peer: p,
            detail: format!("acknowledging rank {p}'s stream {}: {e}", them.stream),
        });
        return;
    }
    *place = Some(s);
    if slot.1.is_some() && slot.0.iter().all(Option::is_some) {
        let (data, ctrl) = partial.remove(&p).expect("slot");
        sh.send(Arrival::Link {
            peer: p,
            data: data.into_iter().map(|d| d.expect("complete")).collect(),
            ctrl: ctrl.expect("complete"),
        });
    }
}
