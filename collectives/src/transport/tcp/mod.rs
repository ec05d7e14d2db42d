//! The TCP transport: `nsocks` data sockets and one control socket per linked peer, all
//! non-blocking. Data sockets carry frames; the control socket carries goodbyes and aborts,
//! and its end-of-file without a goodbye means the peer is lost. Built by
//! [`bootstrap`](crate::bootstrap); a peer's link opens when a call first touches it
//! (`linker.rs`; every link proves membership, `handshake.rs`): until it is up, its streams move nothing and `park` waits on the
//! linker's wake-up as well.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

mod accept;
mod dial;
pub(crate) mod handshake;
mod link_state;
pub(crate) mod linker;
pub(crate) mod setup;

use self::linker::{Arrival, Linker};
use super::control::{self, Control};
use super::{ControlPlane, DataPlane, LinkError, StreamId};

/// One peer's sockets.
pub(crate) struct Peer {
    pub data: Vec<TcpStream>,
    pub ctrl: TcpStream,
    ctrl_buf: Vec<u8>,
    goodbye: bool,
    eof: bool,
    /// Stall reports from this peer: (op, seq, waiting for).
    stalls: Vec<(u8, u64, Vec<usize>)>,
}

impl Peer {
    pub(crate) fn new(data: Vec<TcpStream>, ctrl: TcpStream) -> Peer {
        Peer {
            data,
            ctrl,
            ctrl_buf: Vec::new(),
            goodbye: false,
            eof: false,
            stalls: Vec::new(),
        }
    }
}

/// This rank's end of the TCP data plane.
pub(crate) struct TcpTransport {
    rank: usize,
    /// Indexed by rank; `None` for this rank and for peers not linked yet.
    peers: Vec<Option<Peer>>,
    /// The ranks in `peers` that are linked, in the order their links came up.
    linked: Vec<usize>,
    /// Why a peer could not be linked (said whenever it is used).
    failed: Vec<Option<LinkError>>,
    /// The first of those, for `check` (which must not scan every peer on every turn).
    first_failure: Option<LinkError>,
    linker: Linker,
    describe: String,
    pollfds: Vec<libc::pollfd>,
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

impl TcpTransport {
    pub(crate) fn new(rank: usize, world: usize, linker: Linker, describe: String) -> TcpTransport {
        TcpTransport {
            rank,
            peers: (0..world).map(|_| None).collect(),
            linked: Vec::new(),
            failed: vec![None; world],
            first_failure: None,
            linker,
            describe,
            pollfds: Vec::new(),
        }
    }

    fn peer(&mut self, peer: usize) -> &mut Peer {
        self.peers[peer].as_mut().expect("a linked peer")
    }

    /// Takes in what the link threads produced: links to install, failures to report.
    fn absorb(&mut self) {
        while let Some(a) = self.linker.try_arrival() {
            match a {
                Arrival::Link { peer, data, ctrl } => {
                    if peer != self.rank && self.peers[peer].is_none() {
                        tracing::debug!(rank = self.rank, peer, "dtcomm: linked rank {peer}");
                        self.peers[peer] = Some(Peer::new(data, ctrl));
                        self.linked.push(peer);
                    }
                }
                Arrival::Gone { peer, detail } => self.fail_link(
                    peer,
                    LinkError::Closed {
                        peer,
                        graceful: false,
                        detail,
                    },
                ),
                Arrival::Refused { peer, detail } => {
                    self.fail_link(peer, LinkError::Refused { peer, detail })
                }
            }
        }
    }

    fn fail_link(&mut self, peer: usize, e: LinkError) {
        self.first_failure.get_or_insert_with(|| e.clone());
        self.failed[peer].get_or_insert(e);
    }

    /// The descriptor of `peer`'s data `stream`; `None` while its link is coming up (which
    /// this starts).
    fn data_fd(&mut self, peer: usize, stream: usize) -> Result<Option<RawFd>, LinkError> {
        if self.peers[peer].is_none() {
            self.absorb();
            if self.peers[peer].is_none() {
                if let Some(e) = &self.failed[peer] {
                    return Err(e.clone());
                }
                self.linker.ensure(peer);
                return Ok(None);
            }
        }
        Ok(Some(self.peer(peer).data[stream].as_raw_fd()))
    }

    fn closed(&self, peer: usize, e: &io::Error) -> LinkError {
        let graceful = self.peers[peer].as_ref().is_some_and(|p| p.goodbye);
        LinkError::Closed {
            peer,
            graceful,
            detail: format!("socket error: {e}"),
        }
    }

    /// Reads what the control socket of `peer` has; returns an abort or loss if it says so.
    fn read_ctrl(&mut self, peer: usize) -> Result<(), LinkError> {
        let p = self.peer(peer);
        if p.eof {
            return Ok(());
        }
        let mut buf = [0u8; 4096];
        let mut closed: Option<String> = None;
        loop {
            match read_fd(p.ctrl.as_raw_fd(), &mut buf, &mut []) {
                Ok(0) => {
                    closed = Some("connection closed without goodbye (process died?)".into());
                    break;
                }
                Ok(n) => p.ctrl_buf.extend_from_slice(&buf[..n]),
                Err(e) if would_block(&e) => break,
                Err(e) => {
                    closed = Some(format!("control socket: {e}"));
                    break;
                }
            }
        }
        // Messages that arrived before the end of the stream count first (a goodbye, an abort).
        let parsed = Self::parse_ctrl(p, peer);
        if let Some(detail) = closed {
            p.eof = true;
            parsed?;
            if !p.goodbye {
                return Err(LinkError::Closed {
                    peer,
                    graceful: false,
                    detail,
                });
            }
            return Ok(());
        }
        parsed
    }

    /// Takes the whole messages `p`'s control buffer holds (an abort stays there: every later
    /// check reports it again).
    fn parse_ctrl(p: &mut Peer, peer: usize) -> Result<(), LinkError> {
        loop {
            let (msg, len) = match control::decode(&p.ctrl_buf) {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()),
                Err(e) => {
                    return Err(LinkError::Closed {
                        peer,
                        graceful: false,
                        detail: e.to_string(),
                    });
                }
            };
            match msg {
                Control::Goodbye => p.goodbye = true,
                Control::Stall {
                    op,
                    seq,
                    waiting_for,
                } => p.stalls.push((op, seq, waiting_for)),
                Control::Abort {
                    origin,
                    lost,
                    reason,
                } => {
                    return Err(LinkError::Aborted {
                        origin,
                        lost,
                        reason,
                    });
                }
            }
            p.ctrl_buf.drain(..len);
        }
    }

    fn ctrl_send_all(&mut self, msg: &[u8]) {
        for p in self.peers.iter_mut().flatten() {
            // Best effort: the control socket is idle, so a small message fits its buffer.
            let _ = send_fd(p.ctrl.as_raw_fd(), msg, &[]);
        }
    }
}

fn read_fd(fd: i32, a: &mut [u8], b: &mut [u8]) -> io::Result<usize> {
    let iov = [
        libc::iovec {
            iov_base: a.as_mut_ptr().cast(),
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        },
    ];
    let cnt = if b.is_empty() { 1 } else { 2 };
    // SAFETY: both iovecs point into live, exclusively borrowed buffers of the given lengths.
    let n = unsafe { libc::readv(fd, iov.as_ptr(), cnt) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn send_fd(fd: i32, a: &[u8], b: &[u8]) -> io::Result<usize> {
    let mut iov = [
        libc::iovec {
            iov_base: a.as_ptr() as *mut _,
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_ptr() as *mut _,
            iov_len: b.len(),
        },
    ];
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = if b.is_empty() { 1 } else { 2 };
    // SAFETY: the iovecs point into live buffers that sendmsg only reads; MSG_NOSIGNAL turns
    // SIGPIPE into EPIPE.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

impl DataPlane for TcpTransport {
    fn streams(&self, peer: usize) -> usize {
        if peer == self.rank {
            1
        } else {
            self.linker.nsocks()
        }
    }

    fn try_send(
        &mut self,
        peer: usize,
        stream: usize,
        a: &[u8],
        b: &[u8],
    ) -> Result<usize, LinkError> {
        if a.is_empty() && b.is_empty() {
            return Ok(0);
        }
        let Some(fd) = self.data_fd(peer, stream)? else {
            return Ok(0);
        };
        match send_fd(fd, a, b) {
            Ok(n) => Ok(n),
            Err(e) if would_block(&e) => Ok(0),
            Err(e) => {
                // A reset often means the peer died: let the control plane say why first.
                self.read_ctrl(peer)?;
                Err(self.closed(peer, &e))
            }
        }
    }

    fn try_recv(
        &mut self,
        peer: usize,
        stream: usize,
        a: &mut [u8],
        b: &mut [u8],
    ) -> Result<usize, LinkError> {
        let Some(fd) = self.data_fd(peer, stream)? else {
            return Ok(0);
        };
        match read_fd(fd, a, b) {
            Ok(0) if a.len() + b.len() > 0 => {
                self.read_ctrl(peer)?;
                let eof = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "end of stream in the middle of a call",
                );
                Err(self.closed(peer, &eof))
            }
            Ok(n) => Ok(n),
            Err(e) if would_block(&e) => Ok(0),
            Err(e) => {
                self.read_ctrl(peer)?;
                Err(self.closed(peer, &e))
            }
        }
    }

    fn peek(&mut self, peer: usize, stream: usize, buf: &mut [u8]) -> Result<usize, LinkError> {
        let Some(fd) = self.data_fd(peer, stream)? else {
            return Ok(0);
        };
        // SAFETY: `buf` is a live, exclusively borrowed buffer of `buf.len()` bytes.
        let n = unsafe {
            libc::recv(
                fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if would_block(&e) {
            return Ok(0);
        }
        self.read_ctrl(peer)?;
        Err(self.closed(peer, &e))
    }

    fn park(
        &mut self,
        sends: &[StreamId],
        recvs: &[StreamId],
        timeout: Duration,
    ) -> Result<(), LinkError> {
        self.pollfds.clear();
        for (events, ids) in [(libc::POLLOUT, sends), (libc::POLLIN, recvs)] {
            for &(p, s) in ids {
                if let Some(fd) = self.data_fd(p, s)? {
                    self.pollfds.push(libc::pollfd {
                        fd,
                        events,
                        revents: 0,
                    });
                }
            }
        }
        let waker = self.linker.waker().fd();
        self.pollfds.push(libc::pollfd {
            fd: waker,
            events: libc::POLLIN,
            revents: 0,
        });
        for &r in &self.linked {
            if let Some(p) = self.peers[r].as_ref().filter(|p| !p.eof) {
                self.pollfds.push(libc::pollfd {
                    fd: p.ctrl.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: pollfds is a live Vec of initialised pollfd structs of the given length.
        let rc = unsafe {
            libc::poll(
                self.pollfds.as_mut_ptr(),
                self.pollfds.len() as libc::nfds_t,
                ms,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if !would_block(&e) {
                tracing::debug!("poll failed: {e}");
            }
        }
        if self.pollfds.iter().any(|p| p.fd == waker && p.revents != 0) {
            // Something arrived: take it in now, so the next poll does not return at once.
            self.linker.waker().reset();
            self.absorb();
        }
        Ok(())
    }
}

impl ControlPlane for TcpTransport {
    fn check(&mut self) -> Result<(), LinkError> {
        self.absorb();
        if let Some(e) = &self.first_failure {
            return Err(e.clone());
        }
        for i in 0..self.linked.len() {
            self.read_ctrl(self.linked[i])?;
        }
        Ok(())
    }

    fn report_stall(&mut self, op: u8, seq: u64, waiting_for: &[usize]) {
        let msg = Control::Stall {
            op,
            seq,
            waiting_for: waiting_for.to_vec(),
        };
        self.ctrl_send_all(&msg.encode());
    }

    fn stalls(&mut self, op: u8, seq: u64) -> Vec<(usize, Vec<usize>)> {
        let mut out = Vec::new();
        for (r, p) in self.peers.iter().enumerate() {
            if let Some(p) = p
                && let Some((_, _, w)) = p.stalls.iter().rev().find(|s| s.0 == op && s.1 == seq)
            {
                out.push((r, w.clone()));
            }
        }
        out
    }

    fn abort(&mut self, lost: Option<usize>, reason: &str) {
        let msg = Control::Abort {
            origin: self.rank,
            lost,
            reason: reason.to_owned(),
        };
        self.ctrl_send_all(&msg.encode());
    }

    fn shutdown(&mut self) {
        self.ctrl_send_all(&Control::Goodbye.encode());
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn linked(&self) -> Vec<usize> {
        let mut l = self.linked.clone();
        l.sort_unstable();
        l
    }

    fn strangers(&self) -> crate::error::Strangers {
        self.linker.strangers()
    }
}
