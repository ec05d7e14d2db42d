//! The dialing side of a link: this rank connects every stream of the link to a lower peer
//! (data streams, then control), or asks a higher peer to dial it with a *dial-me* hello; each
//! connection proves membership with the handshake and is refused or retried by its rules.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockRef, Socket, Type};

use super::handshake::{self, Auth};
use super::link_state::{Arrival, Shared, Want};
use super::setup::{Setup, mismatch_detail};

/// How long a peer's listener may refuse connections before the peer counts as gone (its
/// listener is up before its address is published, so a refusal means it closed).
const REFUSED_GRACE: Duration = Duration::from_millis(250);
/// The `stream` of a dial-me hello: "I need this link; dial me".
pub(crate) const DIAL_ME: usize = u32::MAX as usize;

/// Starts whatever brings up the link to `peer`, once: this rank dials a lower peer, asks a
/// higher one to dial it (each on its own thread).
pub(super) fn ensure(sh: &Arc<Shared>, peer: usize) {
    {
        let mut want = sh.want.lock().expect("link state");
        if want[peer] != Want::Idle {
            return;
        }
        want[peer] = if peer < sh.rank {
            Want::Dialing
        } else {
            Want::Asked
        };
    }
    let Some(addr) = sh.addrs[peer] else {
        // Not in our peer table: the peer knows ours and dials when it needs the link.
        return;
    };
    let me = sh.clone();
    let dial = peer < sh.rank;
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
        sh.send(Arrival::Gone {
            peer,
            detail: format!("spawning a thread to link rank {peer}: {e}"),
        });
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
