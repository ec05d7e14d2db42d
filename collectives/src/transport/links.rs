//! The engine's links: each peer's link, chosen once, and the round fence in front of them.
//!
//! Host peers that share a segment are reached through its pipes (`shm/pipe.rs`), everyone
//! else through the inner transport (TCP, or the in-memory twin); the choice is a table filled
//! when shared-memory set-up installs the pipes ([`Links::install_pipes`]), at the same point
//! of the call sequence on every rank of the host. The control plane (goodbyes, aborts, stall
//! reports, lost peers) stays on the inner transport; pipes carry data, and an abort is also
//! marked in the segment for host peers that hold no link to the failed rank.
//!
//! The round's fence (`fence.rs`) is read here: [`check`](ControlPlane::check) fails with the
//! round's end once the server ended it, and parks wake every [`FENCE_POLL`] while it is armed.
//! The engine holds `Links` by value: a frame to a TCP peer costs one virtual call.

use std::sync::Arc;
use std::time::Duration;

use super::shm::pipe::Pipes;
use super::{ControlPlane, DataPlane, LinkError, StreamId, Transport};
use crate::fence::{FENCE_POLL, RoundFence};

/// Longest a wait on TCP lasts while pipes are waited on too (pipes are looked at between).
const MIXED_NAP: Duration = Duration::from_millis(1);

/// See the module docs.
pub(crate) struct Links {
    inner: Box<dyn Transport>,
    pipes: Option<Pipes>,
    /// Per peer: its pipe's local index, or `None` for the inner transport (empty until the
    /// pipes are installed: every peer on the inner transport).
    route: Vec<Option<usize>>,
    fence: Arc<RoundFence>,
    /// Scratch for `park`: the inner streams, the local ranks of pipe sends and receives.
    inner_sends: Vec<StreamId>,
    inner_recvs: Vec<StreamId>,
    pipe_sends: Vec<usize>,
    pipe_recvs: Vec<usize>,
}

impl Links {
    /// Every peer on `inner`, behind `fence`.
    pub(crate) fn new(inner: Box<dyn Transport>, fence: Arc<RoundFence>) -> Links {
        Links {
            inner,
            pipes: None,
            route: Vec::new(),
            fence,
            inner_sends: Vec::new(),
            inner_recvs: Vec::new(),
            pipe_sends: Vec::new(),
            pipe_recvs: Vec::new(),
        }
    }

    /// Sends the host peers of `pipes` through them from now on (`world`: the communicator's
    /// size). Set-up calls it once, at the same point of the call sequence on every rank of
    /// the host.
    pub(crate) fn install_pipes(&mut self, pipes: Pipes, world: usize) {
        debug_assert!(self.pipes.is_none(), "pipes are installed once");
        self.route = (0..world).map(|p| pipes.route(p)).collect();
        self.pipes = Some(pipes);
    }

    /// The peer's pipe, if it has one.
    fn route(&self, peer: usize) -> Option<(&Pipes, usize)> {
        let i = (*self.route.get(peer)?)?;
        self.pipes.as_ref().map(|p| (p, i))
    }

    fn fence_check(&self) -> Result<(), LinkError> {
        match self.fence.ended() {
            Some(end) => Err(LinkError::RoundEnded(end)),
            None => Ok(()),
        }
    }

    /// Parks on the links (the fence not looked at).
    fn park_links(
        &mut self,
        sends: &[StreamId],
        recvs: &[StreamId],
        timeout: Duration,
    ) -> Result<(), LinkError> {
        let Some(pipes) = self.pipes.as_ref() else {
            return self.inner.park(sends, recvs, timeout);
        };
        self.inner_sends.clear();
        self.inner_recvs.clear();
        self.pipe_sends.clear();
        self.pipe_recvs.clear();
        for (ids, inner, local) in [
            (sends, &mut self.inner_sends, &mut self.pipe_sends),
            (recvs, &mut self.inner_recvs, &mut self.pipe_recvs),
        ] {
            for &(peer, stream) in ids {
                match self.route.get(peer).copied().flatten() {
                    Some(i) => local.push(i),
                    None => inner.push((peer, stream)),
                }
            }
        }
        if self.pipe_sends.is_empty() && self.pipe_recvs.is_empty() {
            return self
                .inner
                .park(&self.inner_sends, &self.inner_recvs, timeout);
        }
        if self.inner_sends.is_empty() && self.inner_recvs.is_empty() {
            return pipes.wait(&self.pipe_sends, &self.pipe_recvs, timeout);
        }
        // Both kinds: a short wait on the sockets, then a glance at the pipes (no sleep).
        self.inner
            .park(&self.inner_sends, &self.inner_recvs, timeout.min(MIXED_NAP))?;
        pipes.wait(&self.pipe_sends, &self.pipe_recvs, Duration::ZERO)
    }
}

impl DataPlane for Links {
    fn streams(&self, peer: usize) -> usize {
        match self.route(peer) {
            Some(_) => 1,
            None => self.inner.streams(peer),
        }
    }

    fn try_send(
        &mut self,
        peer: usize,
        stream: usize,
        a: &[u8],
        b: &[u8],
    ) -> Result<usize, LinkError> {
        match self.route(peer) {
            Some((p, i)) => p.try_send(i, a, b),
            None => self.inner.try_send(peer, stream, a, b),
        }
    }

    fn try_recv(
        &mut self,
        peer: usize,
        stream: usize,
        a: &mut [u8],
        b: &mut [u8],
    ) -> Result<usize, LinkError> {
        match self.route(peer) {
            Some((p, i)) => p.try_recv(i, a, b),
            None => self.inner.try_recv(peer, stream, a, b),
        }
    }

    fn peek(&mut self, peer: usize, stream: usize, buf: &mut [u8]) -> Result<usize, LinkError> {
        match self.route(peer) {
            Some((p, i)) => p.peek(i, buf),
            None => self.inner.peek(peer, stream, buf),
        }
    }

    fn park(
        &mut self,
        sends: &[StreamId],
        recvs: &[StreamId],
        timeout: Duration,
    ) -> Result<(), LinkError> {
        let timeout = if self.fence.armed() {
            timeout.min(FENCE_POLL)
        } else {
            timeout
        };
        self.park_links(sends, recvs, timeout)?;
        self.fence_check()
    }
}

impl ControlPlane for Links {
    fn check(&mut self) -> Result<(), LinkError> {
        self.fence_check()?;
        // The sockets first: an abort relayed over TCP carries its reason.
        self.inner.check()?;
        match self.pipes.as_ref().and_then(Pipes::aborted) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn report_stall(&mut self, op: u8, seq: u64, waiting_for: &[usize]) {
        self.inner.report_stall(op, seq, waiting_for);
    }

    fn stalls(&mut self, op: u8, seq: u64) -> Vec<(usize, Vec<usize>)> {
        self.inner.stalls(op, seq)
    }

    fn abort(&mut self, lost: Option<usize>, reason: &str) {
        self.inner.abort(lost, reason);
        if let Some(p) = &self.pipes {
            p.abort(lost, reason);
        }
    }

    fn shutdown(&mut self) {
        self.inner.shutdown();
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn linked(&self) -> Vec<usize> {
        self.inner.linked()
    }

    fn strangers(&self) -> crate::error::Strangers {
        self.inner.strangers()
    }
}
