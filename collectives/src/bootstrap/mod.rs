//! Building the TCP mesh: choose the interface, listen, connect to lower ranks and accept
//! from higher ones, every link proving membership with the [`handshake`]. Two ways to learn
//! the peers' addresses and the secret: [`store`] (a c10d-style store; rank 0 draws the secret
//! and publishes it there) and [`welcome`] (the native rendezvous: addresses from the
//! server's `Welcome`, the secret derived from the job's token). Every connect, handshake and
//! wait has the call's deadline, with a warning at half of it naming the ranks not heard from.
//!
//! A connection that cannot prove itself (idle, garbage, another round, a wrong proof, a
//! replayed hello) is dropped and logged (rate-limited); it never fails the set-up. Two ranks
//! that both prove themselves but disagree on the world size fail at once, naming both.

pub(crate) mod handshake;
pub(crate) mod store;
pub mod welcome;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::config::Config;
use crate::error::CommError;
use crate::transport::iface;
use crate::transport::tcp::{Peer, TcpTransport};
use handshake::{Auth, Hello};

pub(crate) use store::tcp_mesh;

/// Longest a stranger may hold a handshake slot (a member answers in microseconds).
const STRANGER_WAIT: Duration = Duration::from_secs(5);
/// Handshakes in flight at once beyond the expected links; more are dropped.
const SPARE_HANDSHAKES: usize = 64;
/// Dropped connections logged one by one; after that, every 100th.
const DROPS_LOGGED: usize = 5;

pub(crate) struct Setup {
    pub rank: usize,
    pub world: usize,
    pub nsocks: usize,
    pub start: Instant,
    pub timeout: Duration,
    pub bufsize: Option<usize>,
}

impl Setup {
    pub(crate) fn new(rank: usize, world: usize, cfg: &Config) -> Setup {
        Setup {
            rank,
            world,
            nsocks: cfg.nsocks_perpeer.value,
            start: Instant::now(),
            timeout: cfg.timeout.value,
            bufsize: cfg.socket_bufsize.value,
        }
    }
    pub(crate) fn err(&self, detail: impl Into<String>) -> CommError {
        CommError::Setup {
            rank: self.rank,
            elapsed: self.start.elapsed(),
            detail: detail.into(),
        }
    }
    pub(crate) fn remaining(&self) -> Option<Duration> {
        self.timeout
            .checked_sub(self.start.elapsed())
            .filter(|d| !d.is_zero())
    }
    /// Socket buffer sizes, set before connect/listen so the TCP window scale covers them.
    fn size_buffers(&self, s: SockRef<'_>) -> std::io::Result<()> {
        if let Some(b) = self.bufsize {
            s.set_send_buffer_size(b)?;
            s.set_recv_buffer_size(b)?;
        }
        Ok(())
    }
    fn me(&self, stream: usize) -> Hello {
        Hello {
            rank: self.rank,
            world: self.world,
            stream,
            nsocks: self.nsocks,
        }
    }
}

pub(crate) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length; gethostname NUL-terminates within it
    // on success (we also cap at the first NUL).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A bound, listening data socket on the chosen interface (`DTCOMM_SOCKET_IFNAME`).
pub(crate) struct Bound {
    pub listener: TcpListener,
    pub addr: SocketAddr,
    pub iface: String,
}

/// Binds this rank's data listener (`rank` only names errors).
pub(crate) fn bind(rank: usize, cfg: &Config) -> Result<Bound, CommError> {
    let su = Setup::new(rank, rank + 1, cfg);
    let addrs = iface::list().map_err(|e| su.err(format!("listing interfaces: {e}")))?;
    let chosen =
        iface::choose(cfg.socket_ifname.value.as_deref(), &addrs).map_err(|e| su.err(e))?;
    let bind = SocketAddr::new(chosen.ip, 0);
    let sock = Socket::new(Domain::for_address(bind), Type::STREAM, Some(Protocol::TCP))
        .and_then(|s| {
            s.set_reuse_address(true)?;
            su.size_buffers(SockRef::from(&s))?;
            s.bind(&bind.into())?;
            s.listen(1024)?;
            s.set_nonblocking(true)?;
            Ok(s)
        })
        .map_err(|e| su.err(format!("listening on {bind} ({}): {e}", chosen.name)))?;
    let listener: TcpListener = sock.into();
    let addr = listener
        .local_addr()
        .map_err(|e| su.err(format!("local_addr: {e}")))?;
    Ok(Bound {
        listener,
        addr,
        iface: chosen.name.clone(),
    })
}

/// Refuses loopback addresses across hosts (`peers`: rank, address, host).
pub(crate) fn check_loopback(
    su: &Setup,
    me: IpAddr,
    host: &str,
    peers: &[(usize, SocketAddr, String)],
) -> Result<(), CommError> {
    for (p, addr, h) in peers {
        if h != host && (me.is_loopback() || addr.ip().is_loopback()) {
            let who = if me.is_loopback() {
                format!("this rank advertises loopback {me}")
            } else {
                format!("rank {p} advertises loopback {addr}")
            };
            return Err(su.err(format!(
                "{who} but rank {p} is on another host ({h:?}, this is {host:?}); \
                 set DTCOMM_SOCKET_IFNAME to a routable interface"
            )));
        }
    }
    Ok(())
}

/// Two proven members disagree on the world size (or, `their_nsocks` when known, the sockets
/// per peer).
pub(crate) fn mismatch(
    su: &Setup,
    peer: usize,
    their_world: usize,
    their_nsocks: Option<usize>,
) -> CommError {
    let (theirs, mine) = match their_nsocks {
        Some(n) => (
            format!(" ({n} socket(s)/peer)"),
            format!(" ({} socket(s)/peer)", su.nsocks),
        ),
        None => (String::new(), String::new()),
    };
    su.err(format!(
        "rank {peer} has world size {their_world}{theirs} but rank {} has world size {}{mine}: \
         every rank must be started with the same world size and DTCOMM_NSOCKS_PERPEER",
        su.rank, su.world
    ))
}

/// Connects to every lower rank (`lower[p]`, its address) and accepts every higher one on
/// `bound`; returns the transport.
pub(crate) fn mesh(
    su: &Setup,
    auth: &Auth,
    bound: Bound,
    lower: &[SocketAddr],
) -> Result<TcpTransport, CommError> {
    let mut peers: Slots = (0..su.world)
        .map(|p| (p != su.rank).then(|| ((0..su.nsocks).map(|_| None).collect(), None)))
        .collect();
    for (p, addr) in lower.iter().enumerate().take(su.rank) {
        for s in 0..=su.nsocks {
            let stream = connect(su, auth, p, *addr, s)?;
            let slot = peers[p].as_mut().expect("peer");
            if s == su.nsocks {
                slot.1 = Some(stream)
            } else {
                slot.0[s] = Some(stream)
            }
        }
    }
    accept_all(su, auth, &bound.listener, &mut peers)?;
    let mut out = Vec::with_capacity(su.world);
    for p in peers {
        out.push(match p {
            None => None,
            Some((data, ctrl)) => {
                let data: Vec<TcpStream> = data
                    .into_iter()
                    .map(|d| d.expect("all data streams connected"))
                    .collect();
                let ctrl = ctrl.expect("control stream connected");
                for s in data.iter().chain(std::iter::once(&ctrl)) {
                    s.set_nonblocking(true)
                        .map_err(|e| su.err(format!("set_nonblocking: {e}")))?;
                }
                Some(Peer::new(data, ctrl))
            }
        });
    }
    let describe = format!(
        "tcp {} on {} ({} data socket(s)/peer, {})",
        bound.addr, bound.iface, su.nsocks, auth.label
    );
    tracing::info!(rank = su.rank, world = su.world, elapsed = ?su.start.elapsed(), "dtcomm: mesh connected: {describe}");
    Ok(TcpTransport::new(su.rank, out, describe))
}

fn connect(
    su: &Setup,
    auth: &Auth,
    peer: usize,
    addr: SocketAddr,
    stream: usize,
) -> Result<TcpStream, CommError> {
    let mut warned = false;
    let mut last_err = String::new();
    loop {
        let Some(left) = su.remaining() else {
            return Err(su.err(format!("connecting to rank {peer} at {addr} (stream {stream}): deadline passed; last error: {last_err}")));
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
                last_err = e.to_string();
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let what = |e: String| {
            su.err(format!(
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
            return Err(mismatch(su, peer, their_world, None));
        }
        let mut ack = [0u8; 4];
        sent.and_then(|_| s.read_exact(&mut ack))
            .map_err(|e| what(format!("{e} (the peer refused the link)")))?;
        if &ack != handshake::ACK {
            return Err(what(format!("bad handshake reply {ack:?}")));
        }
        s.set_read_timeout(None)
            .and_then(|_| s.set_write_timeout(None))
            .map_err(|e| what(e.to_string()))?;
        return Ok(s);
    }
}

/// Per peer: its data streams and its control stream, as they connect.
type Slots = Vec<Option<(Vec<Option<TcpStream>>, Option<TcpStream>)>>;

/// What a handshake thread found out about one accepted connection.
enum Accepted {
    /// A proven member's stream.
    Member(Hello, TcpStream),
    /// A proven member with another world size or socket count.
    Mismatch(Hello),
    /// Not a member of this context: dropped.
    Stranger(SocketAddr, String),
}

/// The acceptor's side of one handshake, on its own thread (a stranger that sends nothing
/// only holds its thread, for at most [`STRANGER_WAIT`]).
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

fn accept_all(
    su: &Setup,
    auth: &Auth,
    listener: &TcpListener,
    peers: &mut Slots,
) -> Result<(), CommError> {
    let missing = |peers: &Slots| -> Vec<usize> {
        (su.rank + 1..su.world)
            .filter(|&p| {
                peers[p]
                    .as_ref()
                    .is_some_and(|(d, c)| c.is_none() || d.iter().any(Option::is_none))
            })
            .collect()
    };
    let expected = (su.world - su.rank - 1) * (su.nsocks + 1);
    let (tx, rx) = mpsc::channel::<Accepted>();
    let mut in_flight = 0usize;
    let mut dropped = 0usize;
    let mut warned = false;
    let result = 'accept: loop {
        // Handshakes that finished.
        while let Ok(a) = rx.try_recv() {
            in_flight -= 1;
            match a {
                Accepted::Stranger(from, why) => {
                    dropped += 1;
                    if dropped <= DROPS_LOGGED || dropped.is_multiple_of(100) {
                        tracing::warn!(rank = su.rank, %from, dropped, "dtcomm: dropped a connection to the data port from {from}: {why} ({dropped} dropped so far)");
                    }
                }
                Accepted::Mismatch(them) => {
                    break 'accept Err(mismatch(su, them.rank, them.world, Some(them.nsocks)));
                }
                Accepted::Member(them, mut s) => {
                    let p = them.rank;
                    let slot = match peers.get_mut(p).and_then(Option::as_mut) {
                        Some(slot) if p > su.rank && them.stream <= su.nsocks => slot,
                        _ => {
                            break 'accept Err(su.err(format!(
                                "rank {p} (proven member) sent an unexpected hello: stream {}",
                                them.stream
                            )));
                        }
                    };
                    let place = if them.stream == su.nsocks {
                        &mut slot.1
                    } else {
                        &mut slot.0[them.stream]
                    };
                    if place.is_some() {
                        break 'accept Err(su.err(format!(
                            "rank {p} connected stream {} twice (two ranks with one rank number?)",
                            them.stream
                        )));
                    }
                    s.write_all(handshake::ACK)
                        .and_then(|_| s.set_read_timeout(None))
                        .and_then(|_| s.set_write_timeout(None))
                        .map_err(|e| su.err(format!("ack to rank {p}: {e}")))?;
                    *place = Some(s);
                }
            }
        }
        let waiting = missing(peers);
        if waiting.is_empty() {
            break Ok(());
        }
        let Some(left) = su.remaining() else {
            break Err(su.err(format!(
                "ranks {waiting:?} never connected to {:?} ({dropped} unproven connection(s) dropped)",
                listener.local_addr().ok()
            )));
        };
        if !warned && su.start.elapsed() > su.timeout / 2 {
            warned = true;
            tracing::warn!(
                rank = su.rank,
                ?waiting,
                "dtcomm: half the setup deadline passed; ranks not connected yet: {waiting:?}"
            );
        }
        match listener.accept() {
            Ok((s, from)) => {
                if in_flight >= expected + SPARE_HANDSHAKES {
                    dropped += 1;
                    if dropped <= DROPS_LOGGED || dropped.is_multiple_of(100) {
                        tracing::warn!(rank = su.rank, %from, "dtcomm: dropped a connection from {from}: {in_flight} handshakes in flight");
                    }
                    continue;
                }
                in_flight += 1;
                let (tx, auth, me) = (tx.clone(), auth.clone(), su.me(0));
                let wait = left.min(STRANGER_WAIT);
                let spawned = std::thread::Builder::new()
                    .name("dtcomm-hello".into())
                    .spawn(move || {
                        let _ = tx.send(answer(&auth, me, s, from, wait));
                    });
                if let Err(e) = spawned {
                    break Err(su.err(format!("spawning a handshake thread: {e}")));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut pfd = libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = left.min(Duration::from_millis(10)).as_millis().max(1) as i32;
                // SAFETY: one initialised pollfd on the stack.
                unsafe { libc::poll(&mut pfd, 1, ms) };
            }
            Err(e) => break Err(su.err(format!("accept: {e}"))),
        }
    };
    if dropped > 0 {
        tracing::info!(
            rank = su.rank,
            dropped,
            "dtcomm: {dropped} unproven connection(s) to the data port were dropped during set-up"
        );
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn su() -> Setup {
        Setup {
            rank: 0,
            world: 3,
            nsocks: 1,
            start: Instant::now(),
            timeout: Duration::from_secs(1),
            bufsize: None,
        }
    }

    #[test]
    fn loopback_is_refused_across_hosts_only() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let eth: IpAddr = "10.0.0.5".parse().unwrap();
        let peers = |h1: &str, a1: &str| {
            vec![
                (0, "127.0.0.1:1".parse().unwrap(), "a".to_owned()),
                (1, a1.parse().unwrap(), h1.to_owned()),
            ]
        };
        // Everyone on one host: loopback is fine.
        assert!(check_loopback(&su(), lo, "a", &peers("a", "127.0.0.1:2")).is_ok());
        // This rank advertises loopback, a peer is elsewhere.
        let e = check_loopback(&su(), lo, "a", &peers("b", "10.0.0.6:2")).unwrap_err();
        assert!(
            e.to_string().contains("this rank advertises loopback"),
            "{e}"
        );
        // A peer on another host advertises loopback.
        let e = check_loopback(&su(), eth, "a", &peers("b", "127.0.0.1:2")).unwrap_err();
        assert!(e.to_string().contains("rank 1 advertises loopback"), "{e}");
    }
}
