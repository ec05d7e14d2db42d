//! Building the TCP mesh through a [`Store`]: listen on the chosen interface, publish the
//! address, read every peer's, refuse loopback across hosts, then connect to lower ranks and
//! accept from higher ones. Every connect, handshake and wait has the call's deadline, with a
//! warning at half of it naming the ranks not heard from.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use dt_rdzv::store::{Store, StoreError};
use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::config::Config;
use crate::error::CommError;
use crate::transport::iface;
use crate::transport::tcp::{Peer, TcpTransport};

const HELLO_MAGIC: &[u8; 4] = b"DTCH";
const ACK_MAGIC: &[u8; 4] = b"DTCA";
const VERSION: u32 = 1;

struct Setup {
    rank: usize,
    world: usize,
    nsocks: usize,
    start: Instant,
    timeout: Duration,
    bufsize: Option<usize>,
}

impl Setup {
    fn err(&self, detail: impl Into<String>) -> CommError {
        CommError::Setup {
            rank: self.rank,
            elapsed: self.start.elapsed(),
            detail: detail.into(),
        }
    }
    fn remaining(&self) -> Option<Duration> {
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
    fn tune(&self, s: &TcpStream) -> std::io::Result<()> {
        s.set_nodelay(true)
    }
}

fn hostname() -> String {
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

fn rank_of_key(k: &str) -> String {
    k.rsplit('/').next().unwrap_or(k).to_owned()
}

/// Builds this rank's TCP transport.
pub(crate) fn tcp_mesh(
    store: &dyn Store,
    rank: usize,
    world: usize,
    cfg: &Config,
) -> Result<TcpTransport, CommError> {
    let su = Setup {
        rank,
        world,
        nsocks: cfg.nsocks_perpeer.value,
        start: Instant::now(),
        timeout: cfg.timeout.value,
        bufsize: cfg.socket_bufsize.value,
    };
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
    let me = listener
        .local_addr()
        .map_err(|e| su.err(format!("local_addr: {e}")))?;
    let host = hostname();
    tracing::info!(rank, world, interface = %chosen.name, address = %me, host = %host, "dtcomm: advertising data address");
    // The k-th communicator a rank builds on this store and prefix uses generation k, so
    // several communicators (created in the same order on every rank) never read each other's
    // addresses.
    let prefix = &cfg.store_prefix.value;
    let generation = store
        .add(&format!("{prefix}/generation/{rank}"), 1)
        .map_err(|e| su.err(format!("store: {e}")))?;
    let key = |r: usize| format!("{prefix}/{generation}/addr/{r}");
    store
        .set(
            &key(rank),
            format!("{me}\n{host}\n{}", chosen.name).as_bytes(),
        )
        .map_err(|e| su.err(format!("publishing address: {e}")))?;

    // Read every peer's address: half the deadline, a warning naming who is missing, the rest.
    let keys: Vec<String> = (0..world).map(key).collect();
    let krefs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let half = su.timeout / 2;
    if let Err(StoreError::Timeout { missing, .. }) = store.wait(&krefs, half) {
        let ranks: Vec<String> = missing.iter().map(|k| rank_of_key(k)).collect();
        tracing::warn!(
            rank,
            ?ranks,
            "dtcomm: half the setup deadline passed; ranks not heard from: {ranks:?}"
        );
    }
    let values = store
        .multi_get(&krefs, su.remaining().unwrap_or(Duration::from_millis(1)))
        .map_err(|e| match e {
            StoreError::Timeout { missing, .. } => {
                let ranks: Vec<String> = missing.iter().map(|k| rank_of_key(k)).collect();
                su.err(format!("ranks {ranks:?} never published their address"))
            }
            e => su.err(format!("reading peer addresses: {e}")),
        })?;
    let mut peers_addr = Vec::with_capacity(world);
    for (r, v) in values.iter().enumerate() {
        let s = String::from_utf8_lossy(v);
        let mut it = s.lines();
        let addr: SocketAddr = it
            .next()
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| su.err(format!("rank {r} published a bad address {s:?}")))?;
        let h = it.next().unwrap_or("").to_owned();
        peers_addr.push((addr, h));
    }
    check_loopback(&su, me.ip(), &host, &peers_addr)?;

    let mut peers: Slots = (0..world)
        .map(|p| (p != rank).then(|| ((0..su.nsocks).map(|_| None).collect(), None)))
        .collect();
    for (p, (addr, _)) in peers_addr.iter().enumerate().take(rank) {
        for s in 0..=su.nsocks {
            let stream = connect(&su, p, *addr, s)?;
            let slot = peers[p].as_mut().expect("peer");
            if s == su.nsocks {
                slot.1 = Some(stream)
            } else {
                slot.0[s] = Some(stream)
            }
        }
    }
    accept_all(&su, &listener, &mut peers)?;
    let mut out = Vec::with_capacity(world);
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
        "tcp {me} on {} ({} data socket(s)/peer)",
        chosen.name, su.nsocks
    );
    tracing::info!(rank, world, elapsed = ?su.start.elapsed(), "dtcomm: mesh connected: {describe}");
    Ok(TcpTransport::new(rank, out, describe))
}

fn check_loopback(
    su: &Setup,
    me: IpAddr,
    host: &str,
    peers: &[(SocketAddr, String)],
) -> Result<(), CommError> {
    for (p, (addr, h)) in peers.iter().enumerate() {
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

fn connect(
    su: &Setup,
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
        match attempt {
            Ok(s) => {
                let mut s = s;
                let hello = [
                    &HELLO_MAGIC[..],
                    &VERSION.to_le_bytes(),
                    &(su.rank as u32).to_le_bytes(),
                    &(su.world as u32).to_le_bytes(),
                    &(stream as u32).to_le_bytes(),
                    &(su.nsocks as u32).to_le_bytes(),
                ]
                .concat();
                let left = su.remaining().unwrap_or(Duration::from_millis(1));
                let r = su.tune(&s).and_then(|_| {
                    s.set_write_timeout(Some(left))?;
                    s.set_read_timeout(Some(left))?;
                    s.write_all(&hello)?;
                    let mut ack = [0u8; 4];
                    s.read_exact(&mut ack)?;
                    if &ack != ACK_MAGIC {
                        return Err(std::io::Error::other(format!(
                            "bad handshake reply {ack:?}"
                        )));
                    }
                    s.set_read_timeout(None)?;
                    s.set_write_timeout(None)?;
                    Ok(())
                });
                match r {
                    Ok(()) => return Ok(s),
                    Err(e) => {
                        return Err(su.err(format!(
                            "handshake with rank {peer} at {addr} (stream {stream}): {e}"
                        )));
                    }
                }
            }
            Err(e) => {
                last_err = e.to_string();
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Per peer: its data streams and its control stream, as they connect.
type Slots = Vec<Option<(Vec<Option<TcpStream>>, Option<TcpStream>)>>;

fn accept_all(su: &Setup, listener: &TcpListener, peers: &mut Slots) -> Result<(), CommError> {
    let missing = |peers: &Slots| -> Vec<usize> {
        (su.rank + 1..su.world)
            .filter(|&p| {
                peers[p]
                    .as_ref()
                    .is_some_and(|(d, c)| c.is_none() || d.iter().any(Option::is_none))
            })
            .collect()
    };
    let mut warned = false;
    loop {
        let waiting = missing(peers);
        if waiting.is_empty() {
            return Ok(());
        }
        let Some(left) = su.remaining() else {
            return Err(su.err(format!(
                "ranks {waiting:?} never connected to {:?}",
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
            Ok((mut s, from)) => {
                s.set_nonblocking(false)
                    .map_err(|e| su.err(format!("accept from {from}: {e}")))?;
                let mut hello = [0u8; 24];
                let r = su.tune(&s).and_then(|_| {
                    s.set_read_timeout(Some(left))?;
                    s.read_exact(&mut hello)
                });
                if let Err(e) = r {
                    tracing::warn!(rank = su.rank, %from, "dtcomm: dropping a connection with no valid hello: {e}");
                    continue;
                }
                let f =
                    |i: usize| u32::from_le_bytes(hello[i..i + 4].try_into().expect("4")) as usize;
                let (ver, p, world, stream, nsocks) = (f(4), f(8), f(12), f(16), f(20));
                if &hello[..4] != HELLO_MAGIC || ver != VERSION as usize {
                    tracing::warn!(rank = su.rank, %from, "dtcomm: dropping a connection that is not a dtcomm peer");
                    continue;
                }
                if world != su.world || nsocks != su.nsocks {
                    return Err(su.err(format!(
                        "rank {p} at {from} has world {world}, {nsocks} socket(s)/peer; this rank has world {}, {}",
                        su.world, su.nsocks
                    )));
                }
                let slot = match peers.get_mut(p).and_then(Option::as_mut) {
                    Some(slot) if p > su.rank && stream <= su.nsocks => slot,
                    _ => {
                        return Err(su.err(format!(
                            "unexpected hello from {from}: rank {p}, stream {stream}"
                        )));
                    }
                };
                let place = if stream == su.nsocks {
                    &mut slot.1
                } else {
                    &mut slot.0[stream]
                };
                if place.is_some() {
                    return Err(su.err(format!(
                        "rank {p} connected stream {stream} twice (two ranks with one rank number?)"
                    )));
                }
                s.set_read_timeout(None)
                    .and_then(|_| s.write_all(ACK_MAGIC))
                    .map_err(|e| su.err(format!("ack to rank {p}: {e}")))?;
                *place = Some(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut pfd = libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = left.min(Duration::from_millis(100)).as_millis().max(1) as i32;
                // SAFETY: one initialised pollfd on the stack.
                unsafe { libc::poll(&mut pfd, 1, ms) };
            }
            Err(e) => return Err(su.err(format!("accept: {e}"))),
        }
    }
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
                ("127.0.0.1:1".parse().unwrap(), "a".to_owned()),
                (a1.parse().unwrap(), h1.to_owned()),
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
