//! A transport behind the round fence (`fence.rs`): its control plane also says when the round
//! ended, and its parks wake every [`FENCE_POLL`] while the fence is armed.

use std::sync::Arc;
use std::time::Duration;

use super::{ControlPlane, DataPlane, LinkError, StreamId, Transport};
use crate::fence::{FENCE_POLL, RoundFence};

fn fence_check(fence: &RoundFence) -> Result<(), LinkError> {
    match fence.ended() {
        Some(end) => Err(LinkError::RoundEnded(end)),
        None => Ok(()),
    }
}

/// A transport behind a fence: its control plane also says when the round ended, and its
/// parks wake every [`FENCE_POLL`] while the fence is armed.
pub(crate) struct Fenced {
    inner: Box<dyn Transport>,
    fence: Arc<RoundFence>,
}

impl Fenced {
    pub(crate) fn new(inner: Box<dyn Transport>, fence: Arc<RoundFence>) -> Fenced {
        Fenced { inner, fence }
    }
}

impl DataPlane for Fenced {
    fn streams(&self, peer: usize) -> usize {
        self.inner.streams(peer)
    }

    fn try_send(
        &mut self,
        peer: usize,
        stream: usize,
        a: &[u8],
        b: &[u8],
    ) -> Result<usize, LinkError> {
        self.inner.try_send(peer, stream, a, b)
    }

    fn try_recv(
        &mut self,
        peer: usize,
        stream: usize,
        a: &mut [u8],
        b: &mut [u8],
    ) -> Result<usize, LinkError> {
        self.inner.try_recv(peer, stream, a, b)
    }

    fn peek(&mut self, peer: usize, stream: usize, buf: &mut [u8]) -> Result<usize, LinkError> {
        self.inner.peek(peer, stream, buf)
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
        self.inner.park(sends, recvs, timeout)?;
        fence_check(&self.fence)
    }
}

impl ControlPlane for Fenced {
    fn check(&mut self) -> Result<(), LinkError> {
        fence_check(&self.fence)?;
        self.inner.check()
    }

    fn report_stall(&mut self, op: u8, seq: u64, waiting_for: &[usize]) {
        self.inner.report_stall(op, seq, waiting_for);
    }

    fn stalls(&mut self, op: u8, seq: u64) -> Vec<(usize, Vec<usize>)> {
        self.inner.stalls(op, seq)
    }

    fn abort(&mut self, lost: Option<usize>, reason: &str) {
        self.inner.abort(lost, reason);
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
