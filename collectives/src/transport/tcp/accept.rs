//! The accepting side of links: one acceptor thread per communicator takes connections on the
//! data listener for its whole life and hands each to a short-lived handshake thread (a
//! stranger that sends nothing holds only its own thread, for at most [`STRANGER_WAIT`]);
//! proven members' streams are gathered into links, dial-me requests start a dial, and
//! strangers are dropped and counted.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use super::dial::{DIAL_ME, ensure};
use super::handshake::{self, Auth, Hello};
use super::link_state::{Arrival, Shared};
use super::setup::mismatch_detail;

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
pub(super) fn accept_loop(sh: &Arc<Shared>, listener: &TcpListener) {
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
        ensure(sh, p);
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
