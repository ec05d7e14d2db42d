//! The link chosen per peer: host peers that share a segment are reached through its pipes
//! (`shm/pipe.rs`), everyone else through the inner transport (TCP, or the in-memory twin).
//! The control plane (goodbyes, aborts, stall reports, lost peers) stays on the inner
//! transport; pipes carry data, and an abort is also marked in the segment for host peers
//! that hold no link to the failed rank.
//!
//! The pipes arrive after construction: shared-memory set-up runs over the inner links and
//! then installs them in the slot this transport reads ([`PipeSlot`]), at the same point of
//! the call sequence on every rank of the host.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::{ControlPlane, DataPlane, LinkError, StreamId, Transport};
use crate::shm::pipe::Pipes;

/// Where set-up puts the host's pipes.
pub(crate) type PipeSlot = Arc<OnceLock<Pipes>>;

/// Longest a wait on TCP lasts while pipes are waited on too (pipes are looked at between).
const MIXED_NAP: Duration = Duration::from_millis(1);

/// A transport that routes each peer to its link.
pub(crate) struct Routed {
    inner: Box<dyn Transport>,
    pipes: PipeSlot,
    /// Scratch for `park`: the inner streams, the local ranks of pipe sends and receives.
    inner_sends: Vec<StreamId>,
    inner_recvs: Vec<StreamId>,
    pipe_sends: Vec<usize>,
    pipe_recvs: Vec<usize>,
}

impl Routed {
    pub(crate) fn new(inner: Box<dyn Transport>) -> (Routed, PipeSlot) {
        let pipes: PipeSlot = Arc::new(OnceLock::new());
        (
            Routed {
                inner,
                pipes: pipes.clone(),
                inner_sends: Vec::new(),
                inner_recvs: Vec::new(),
                pipe_sends: Vec::new(),
                pipe_recvs: Vec::new(),
            },
            pipes,
        )
    }

    fn route(&self, peer: usize) -> Option<(&Pipes, usize)> {
        let p = self.pipes.get()?;
        p.route(peer).map(|i| (p, i))
    }
}

impl DataPlane for Routed {
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
        let Some(pipes) = self.pipes.get() else {
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
                match pipes.route(peer) {
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

impl ControlPlane for Routed {
    fn check(&mut self) -> Result<(), LinkError> {
        // The sockets first: an abort relayed over TCP carries its reason.
        self.inner.check()?;
        match self.pipes.get().and_then(Pipes::aborted) {
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
        if let Some(p) = self.pipes.get() {
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
