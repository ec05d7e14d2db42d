//! The narrow transport interface the engine drives, and its implementations: [`mem`] (the
//! in-memory twin, for tests) and [`tcp`] (sockets, socket2).
//!
//! [`links`] is what the engine holds: each peer's link (the host's shared-memory pipes of
//! [`shm`], or the inner transport) and the round's fence in front of them.
//!
//! A transport moves bytes on numbered streams to and from each peer, without blocking, and
//! parks the caller until one of the streams it cares about may progress ([`DataPlane`]); and
//! it carries a control plane beside the data ([`ControlPlane`]): goodbyes, aborts, stall
//! reports and the loss of a peer, as [`control`]'s messages. [`frame`] is the data frames'
//! header codec.

pub(crate) mod control;
pub(crate) mod frame;
pub(crate) mod iface;
pub(crate) mod links;
pub(crate) mod mem;
pub(crate) mod shm;
pub(crate) mod tcp;
pub(crate) mod waker;

use std::time::Duration;

/// What a transport reports instead of bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LinkError {
    /// The peer's side is gone. `graceful`: it said goodbye first (closed its communicator).
    Closed {
        peer: usize,
        graceful: bool,
        detail: String,
    },
    /// A peer failed and told everyone; `lost` is the rank it lost, if that was the cause.
    Aborted {
        origin: usize,
        lost: Option<usize>,
        reason: String,
    },
    /// The membership service ended this communicator's round (see `fence`).
    RoundEnded(crate::fence::RoundEnd),
    /// A member that cannot be linked to (another world size, a bad handshake reply).
    Refused { peer: usize, detail: String },
}

/// A stream: (peer, stream index).
pub(crate) type StreamId = (usize, usize);

/// The data plane: bytes on numbered streams to and from each peer, without blocking, and a
/// park until one of them may move.
pub(crate) trait DataPlane: Send {
    /// Number of data streams to `peer`.
    fn streams(&self, peer: usize) -> usize;
    /// Writes a prefix of `a ++ b` without blocking; `Ok(0)` when nothing fits now.
    fn try_send(
        &mut self,
        peer: usize,
        stream: usize,
        a: &[u8],
        b: &[u8],
    ) -> Result<usize, LinkError>;
    /// Reads into `a ++ b` without blocking; `Ok(0)` when nothing is there now.
    fn try_recv(
        &mut self,
        peer: usize,
        stream: usize,
        a: &mut [u8],
        b: &mut [u8],
    ) -> Result<usize, LinkError>;
    /// Copies up to `buf.len()` bytes waiting on a stream into `buf` without consuming them;
    /// `Ok(0)` when nothing is there now.
    fn peek(&mut self, peer: usize, stream: usize, buf: &mut [u8]) -> Result<usize, LinkError>;
    /// Blocks up to `timeout` until a stream in `sends` may accept bytes, one in `recvs` has
    /// bytes, or the control plane has news. Spurious returns are allowed.
    fn park(
        &mut self,
        sends: &[StreamId],
        recvs: &[StreamId],
        timeout: Duration,
    ) -> Result<(), LinkError>;
}

/// The control plane beside the data ([`control`]'s messages): aborts, goodbyes, stall
/// reports, the loss of a peer, and what a timeout reports about the links.
pub(crate) trait ControlPlane: Send {
    /// Reads the control plane: an abort from a peer or a peer lost without goodbye.
    fn check(&mut self) -> Result<(), LinkError>;
    /// Tells every peer that this rank has waited half the deadline of call `(op, seq)` for
    /// `waiting_for` (best effort).
    fn report_stall(&mut self, op: u8, seq: u64, waiting_for: &[usize]);
    /// Stall reports received for call `(op, seq)`: (reporting rank, ranks it waits for).
    fn stalls(&mut self, op: u8, seq: u64) -> Vec<(usize, Vec<usize>)>;
    /// Tells every peer this rank failed (best effort, never blocks for long).
    fn abort(&mut self, lost: Option<usize>, reason: &str);
    /// Says goodbye to every peer: this rank closes its communicator on purpose.
    fn shutdown(&mut self);
    /// A short description for logs and the benchmark preamble.
    fn describe(&self) -> String;
    /// The peers this rank holds a link to now.
    fn linked(&self) -> Vec<usize>;
    /// Unproven connections this rank's listener dropped so far (for timeouts).
    fn strangers(&self) -> crate::error::Strangers;
}

/// A whole transport: both planes (what the engine holds, boxed).
pub(crate) trait Transport: DataPlane + ControlPlane {}

impl<T: DataPlane + ControlPlane + ?Sized> Transport for T {}
