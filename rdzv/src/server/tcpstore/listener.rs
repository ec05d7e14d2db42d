//! The listening socket: dual-stack when bound to `::`, a large backlog, tuned accepted sockets.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use tokio::net::{TcpListener, TcpStream};

use crate::server::config::ServeConfig;

/// Binds `host:port`. For `::` it asks for a dual-stack socket and falls back to `0.0.0.0` on
/// hosts without IPv6.
pub(crate) fn bind(config: &ServeConfig) -> std::io::Result<TcpListener> {
    let host = config.tcpstore_host.unwrap_or(config.host);
    let addr = SocketAddr::new(host, config.port);
    match bind_one(addr, config) {
        Err(e) if host == IpAddr::from([0u16; 8]) => {
            tracing::warn!(error = %e, "no IPv6 on this host; listening on 0.0.0.0 only");
            bind_one(
                SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), config.port),
                config,
            )
        }
        other => other,
    }
}

fn bind_one(addr: SocketAddr, config: &ServeConfig) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    // Linux copies these to every accepted socket, which saves five system calls per
    // connection in a burst of thousands; other systems get them per connection (`tune`).
    set_options(SockRef::from(&socket), config.tcp_keepalive);
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(config.backlog)?;
    TcpListener::from_std(socket.into())
}

/// NODELAY (replies are tiny and latency-bound) and keepalive (to notice vanished hosts whose
/// connections would otherwise look alive forever).
fn set_options(sock: SockRef<'_>, keepalive: Duration) {
    if let Err(e) = sock.set_tcp_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY");
    }
    if !keepalive.is_zero() {
        let ka = TcpKeepalive::new()
            .with_time(keepalive)
            .with_interval(Duration::from_secs(10))
            .with_retries(3);
        if let Err(e) = sock.set_tcp_keepalive(&ka) {
            tracing::debug!(error = %e, "SO_KEEPALIVE");
        }
    }
}

/// Per-connection options where the platform does not inherit them from the listener.
pub(crate) fn tune(stream: &TcpStream, keepalive: Duration) {
    if cfg!(target_os = "linux") {
        return;
    }
    set_options(SockRef::from(stream), keepalive);
}
