//! Building the TCP data plane: choose the interface, listen, and learn where every peer
//! listens; the links to them open when a call first needs them (`transport/tcp/linker.rs`, `dial.rs`, `accept.rs`).
//! every one proving membership with the handshake (`transport/tcp/handshake.rs`). Two ways to learn
//! the peers' addresses and the secret: [`store`] (a c10d-style store; rank 0 draws the secret
//! and publishes it there) and [`welcome`] (the native rendezvous: addresses from the
//! server's `Welcome`, the secret derived from the job's token; `Communicator::subset` builds a
//! communicator of some ranks through its parent the same way, for process sets). The
//! communicators themselves are built in `communicator/construct.rs`. Every connect, handshake and
//! wait has a deadline, with a warning at half of it naming the rank not heard from.
//!
//! A connection that cannot prove itself (idle, garbage, another round, a wrong proof, a
//! replayed hello) is dropped and logged (rate-limited); it never fails anything. Two ranks
//! that both prove themselves but disagree on the world size fail at once, naming both.

mod generation;
pub(crate) mod store;
pub mod welcome;

use std::net::{IpAddr, SocketAddr, TcpListener};

use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::config::Config;
use crate::error::CommError;
use crate::transport::iface;
use crate::transport::tcp::TcpTransport;
use crate::transport::tcp::handshake::Auth;
use crate::transport::tcp::linker;

use crate::transport::tcp::setup::Setup;
pub(crate) use store::tcp_mesh;

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

/// The TCP transport over `bound`: links to the peers at `addrs` (indexed by rank; `None` for
/// a peer that will dial this rank) open when a call first needs them (`transport/tcp/linker.rs`, `dial.rs`, `accept.rs`).
pub(crate) fn mesh(
    su: &Setup,
    auth: &Auth,
    bound: Bound,
    addrs: Vec<Option<SocketAddr>>,
) -> Result<TcpTransport, CommError> {
    let describe = format!(
        "tcp {} on {} ({} data socket(s)/peer, {}, links opened on first use)",
        bound.addr, bound.iface, su.nsocks, auth.label
    );
    let linker = linker::Linker::start(su, auth, bound.listener, addrs)?;
    tracing::info!(rank = su.rank, world = su.world, elapsed = ?su.start.elapsed(), "dtcomm: data plane ready: {describe}");
    Ok(TcpTransport::new(su.rank, su.world, linker, describe))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

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
