//! The UDP sockets under QUIC endpoints, with receive and send buffers sized for bursts.
//!
//! A QUIC handshake starts with a 1200-byte (padded) Initial; a few hundred members starting at
//! once overflow the kernel's default socket buffer (`net.core.rmem_default`, ~208 KiB), and
//! every dropped Initial costs its sender a probe timeout (about a second with quinn's 333 ms
//! initial RTT). Buffer memory is charged only while datagrams wait in it, so a large limit
//! costs nothing at rest.

use std::net::{SocketAddr, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

/// Receive buffer asked for on a server socket (Linux doubles it for bookkeeping): holds a
/// burst of a few thousand Initials while the endpoint catches up.
#[cfg(feature = "server")]
pub(crate) const SERVER_RECV_BUFFER: usize = 8 << 20;
/// Send buffer asked for on a server socket: a completed round sends every member its welcome
/// at once.
#[cfg(feature = "server")]
pub(crate) const SERVER_SEND_BUFFER: usize = 4 << 20;
/// Buffers asked for on a client socket (one [`Connector`](super::Connector) may carry many
/// connections, as in a launcher or a benchmark herd).
pub(crate) const CLIENT_BUFFER: usize = 2 << 20;

/// A bound UDP socket with buffers of (at least, as far as the kernel allows) these sizes.
/// With `force`, a privileged process goes past `net.core.{r,w}mem_max`. Returns the socket
/// and the receive buffer size the kernel granted.
pub(crate) fn bind(
    addr: SocketAddr,
    recv: usize,
    send: usize,
    force: bool,
) -> std::io::Result<(UdpSocket, usize)> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // Dual stack, as std's bind on [::] gives by default on Linux.
        let _ = socket.set_only_v6(false);
    }
    grow(&socket, recv, send, force);
    socket.bind(&addr.into())?;
    let granted = socket.recv_buffer_size().unwrap_or(0);
    Ok((socket.into(), granted))
}

fn grow(socket: &Socket, recv: usize, send: usize, force: bool) {
    // Best effort: a socket with smaller buffers still works.
    if socket.recv_buffer_size().is_ok_and(|n| n < recv) {
        let _ = socket.set_recv_buffer_size(recv);
        if force && socket.recv_buffer_size().is_ok_and(|n| n < recv) {
            set_force(socket, Buffer::Recv, recv);
        }
    }
    if socket.send_buffer_size().is_ok_and(|n| n < send) {
        let _ = socket.set_send_buffer_size(send);
        if force && socket.send_buffer_size().is_ok_and(|n| n < send) {
            set_force(socket, Buffer::Send, send);
        }
    }
}

enum Buffer {
    Recv,
    Send,
}

/// SO_RCVBUFFORCE / SO_SNDBUFFORCE: past the sysctl caps, for CAP_NET_ADMIN (fails quietly
/// without it).
#[cfg(all(feature = "server", target_os = "linux"))]
fn set_force(socket: &Socket, which: Buffer, bytes: usize) {
    use std::os::fd::AsRawFd;
    let opt = match which {
        Buffer::Recv => libc::SO_RCVBUFFORCE,
        Buffer::Send => libc::SO_SNDBUFFORCE,
    };
    let v: libc::c_int = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: setsockopt reads exactly size_of::<c_int>() bytes from &v on a socket we own.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(not(all(feature = "server", target_os = "linux")))]
fn set_force(_: &Socket, _: Buffer, _: usize) {}
