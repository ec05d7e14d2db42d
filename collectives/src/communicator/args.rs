//! Checking a [`Call`] against this communicator before anything is sent: buffers (memory
//! kind, null, alignment, overflow), dtypes, counts, roots and peers. An error here is
//! [`CommError::InvalidArgument`]: nothing was sent and the communicator stays usable.

use super::Inner;
use crate::call::{Call, Collective, Memory, RawBuf};
use crate::error::CommError;

impl Inner {
    fn check_buf(&self, op: &'static str, what: &str, b: &RawBuf) -> Result<(), CommError> {
        let Some(len) = b.byte_len().filter(|l| *l <= isize::MAX as usize) else {
            return Err(self.invalid(
                op,
                format!(
                    "{what}: {} elements of {} overflow the address space",
                    b.count(),
                    b.dtype()
                ),
            ));
        };
        if len > 0 && b.ptr().is_null() {
            return Err(self.invalid(
                op,
                format!("{what} is a null pointer with {} elements", b.count()),
            ));
        }
        if len > 0 && !(b.ptr() as usize).is_multiple_of(b.dtype().align()) {
            return Err(self.invalid(
                op,
                format!(
                    "{what} at {:p} is not aligned for {} ({} bytes)",
                    b.ptr(),
                    b.dtype(),
                    b.dtype().align()
                ),
            ));
        }
        Ok(())
    }

    /// A call's buffers are all host memory, or all on one device and stream, and device
    /// buffers need a device runtime and `DTCOMM_CUDA` other than `off`.
    fn check_memory(
        &self,
        op: &'static str,
        send: Option<&RawBuf>,
        recv: Option<&RawBuf>,
    ) -> Result<(), CommError> {
        let (Some(s), Some(r)) = (send, recv) else {
            return self.check_device(op, send.or(recv).map(RawBuf::memory));
        };
        if s.memory() != r.memory() {
            return Err(self.invalid(
                op,
                format!(
                    "send is {:?} memory but recv is {:?}: a call's buffers must all be on the \
                     host or all on one device and stream",
                    s.memory(),
                    r.memory()
                ),
            ));
        }
        self.check_device(op, Some(s.memory()))
    }

    fn check_device(&self, op: &'static str, memory: Option<Memory>) -> Result<(), CommError> {
        let Some(Memory::Device { device, .. }) = memory else {
            return Ok(());
        };
        if self.config.cuda.value == crate::device::CudaMode::Off {
            return Err(self.invalid(
                op,
                format!(
                    "device buffers are refused ({}=off)",
                    self.config.cuda.source
                ),
            ));
        }
        if device < 0 {
            return Err(self.invalid(op, format!("device ordinal {device} is negative")));
        }
        self.device_runtime()
            .map(|_| ())
            .map_err(|why| self.invalid(op, format!("device buffers cannot be used here: {why}")))
    }

    fn need<'c>(
        &self,
        op: &'static str,
        what: &str,
        b: Option<&'c RawBuf>,
    ) -> Result<&'c RawBuf, CommError> {
        let b = b.ok_or_else(|| self.invalid(op, format!("needs a {what} buffer")))?;
        self.check_buf(op, what, b)?;
        Ok(b)
    }

    fn check_root(&self, op: &'static str, root: usize) -> Result<(), CommError> {
        if root >= self.world {
            return Err(self.invalid(
                op,
                format!("root {root} is not in a world of {}", self.world),
            ));
        }
        Ok(())
    }

    fn check_peer(&self, op: &'static str, peer: usize) -> Result<(), CommError> {
        if peer >= self.world || peer == self.rank {
            return Err(self.invalid(
                op,
                format!("peer {peer} (this is rank {} of {})", self.rank, self.world),
            ));
        }
        Ok(())
    }

    fn same_dtype(&self, op: &'static str, s: &RawBuf, r: &RawBuf) -> Result<(), CommError> {
        if s.dtype() != r.dtype() {
            return Err(self.invalid(
                op,
                format!("send is {} but recv is {}", s.dtype(), r.dtype()),
            ));
        }
        Ok(())
    }

    fn same_count(&self, op: &'static str, s: &RawBuf, r: &RawBuf) -> Result<(), CommError> {
        self.same_dtype(op, s, r)?;
        if s.count() != r.count() {
            return Err(self.invalid(
                op,
                format!("send has {} elements but recv has {}", s.count(), r.count()),
            ));
        }
        Ok(())
    }

    fn counts(
        &self,
        op: &'static str,
        what: &str,
        counts: &[usize],
        total: usize,
    ) -> Result<(), CommError> {
        let sum = counts.iter().try_fold(0usize, |a, c| a.checked_add(*c));
        if counts.len() != self.world || sum != Some(total) {
            return Err(self.invalid(
                op,
                format!(
                    "{what} {counts:?} must have {} entries summing to {total}",
                    self.world
                ),
            ));
        }
        Ok(())
    }

    /// A reduction's operator must be defined on its dtype (no `max` of complex numbers, no
    /// `avg` of bools, bitwise operators on integers and bool only). The answer depends on the
    /// call alone, so every rank refuses it alike, before anything is sent.
    fn check_op(&self, op: &'static str, call: &Call) -> Result<(), CommError> {
        let (Collective::AllReduce { op: redop }
        | Collective::Reduce { op: redop, .. }
        | Collective::ReduceScatter { op: redop }) = call.collective
        else {
            return Ok(());
        };
        let Some(dtype) = call.send.as_ref().or(call.recv.as_ref()).map(RawBuf::dtype) else {
            return Ok(());
        };
        redop.supports(dtype).map_err(|why| self.invalid(op, why))
    }

    /// Checks `call`'s arguments against this communicator without touching any buffer's
    /// contents: an error here sends nothing and does not fail the communicator.
    pub(crate) fn check(&self, call: &Call) -> Result<(), CommError> {
        let op = call.collective.name();
        if call.deadline.is_some_and(|d| d.is_zero()) {
            return Err(self.invalid(op, "the deadline must be positive"));
        }
        let (rank, world) = (self.rank, self.world);
        let (send, recv) = (call.send.as_ref(), call.recv.as_ref());
        self.check_memory(op, send, recv)?;
        self.check_op(op, call)?;
        match &call.collective {
            Collective::AllReduce { .. } | Collective::Broadcast { .. } => {
                let r = self.need(op, "recv", recv)?;
                if let Collective::Broadcast { root } = call.collective {
                    self.check_root(op, root)?;
                    if rank != root {
                        return Ok(());
                    }
                }
                if let Some(s) = send {
                    self.check_buf(op, "send", s)?;
                    self.same_count(op, s, r)?;
                }
            }
            Collective::Reduce { root, .. } => {
                self.check_root(op, *root)?;
                match send {
                    Some(s) => {
                        self.check_buf(op, "send", s)?;
                        if rank == *root {
                            let r = self.need(op, "recv", recv)?;
                            self.same_count(op, s, r)?;
                        }
                    }
                    None => {
                        self.need(op, "recv", recv)?;
                    }
                }
            }
            Collective::AllGather { counts } => {
                let s = self.need(op, "send", send)?;
                let r = self.need(op, "recv", recv)?;
                self.same_dtype(op, s, r)?;
                match counts {
                    Some(c) => {
                        self.counts(op, "counts", c, r.count())?;
                        if c[rank] != s.count() {
                            return Err(self.invalid(
                                op,
                                format!(
                                    "counts[{rank}] is {} but send has {} elements",
                                    c[rank],
                                    s.count()
                                ),
                            ));
                        }
                    }
                    None if s.count().checked_mul(world) != Some(r.count()) => {
                        return Err(self.invalid(
                            op,
                            format!(
                                "recv has {} elements, need send's {} x world {world}",
                                r.count(),
                                s.count()
                            ),
                        ));
                    }
                    None => {}
                }
            }
            Collective::ReduceScatter { .. } => {
                let s = self.need(op, "send", send)?;
                let r = self.need(op, "recv", recv)?;
                self.same_dtype(op, s, r)?;
                if r.count().checked_mul(world) != Some(s.count()) {
                    return Err(self.invalid(
                        op,
                        format!(
                            "send has {} elements, need recv's {} x world {world}",
                            s.count(),
                            r.count()
                        ),
                    ));
                }
            }
            Collective::Gather { root } | Collective::Scatter { root } => {
                self.check_root(op, *root)?;
                let gather = matches!(call.collective, Collective::Gather { .. });
                let (mine, mine_name, rooted, rooted_name) = if gather {
                    (send, "send", recv, "recv")
                } else {
                    (recv, "recv", send, "send")
                };
                let m = self.need(op, mine_name, mine)?;
                if rank == *root {
                    let r = self.need(op, rooted_name, rooted)?;
                    self.same_dtype(op, m, r)?;
                    if m.count().checked_mul(world) != Some(r.count()) {
                        return Err(self.invalid(
                            op,
                            format!(
                                "the root's {rooted_name} has {} elements, need {} x world {world}",
                                r.count(),
                                m.count()
                            ),
                        ));
                    }
                }
            }
            Collective::AllToAll {
                send_counts,
                recv_counts,
            } => {
                let s = self.need(op, "send", send)?;
                let r = self.need(op, "recv", recv)?;
                self.same_dtype(op, s, r)?;
                match (send_counts, recv_counts) {
                    (None, None) => {
                        if s.count() != r.count() || s.count() % world != 0 {
                            return Err(self.invalid(
                                op,
                                format!(
                                    "send {} / recv {} elements must be equal multiples of world {world}",
                                    s.count(),
                                    r.count()
                                ),
                            ));
                        }
                    }
                    (sc, rc) => {
                        let sc = sc.clone().unwrap_or_else(|| vec![s.count() / world; world]);
                        let rc = rc.clone().unwrap_or_else(|| vec![r.count() / world; world]);
                        self.counts(op, "send counts", &sc, s.count())?;
                        self.counts(op, "recv counts", &rc, r.count())?;
                        if sc[rank] != rc[rank] {
                            return Err(self.invalid(
                                op,
                                format!(
                                    "this rank sends itself {} elements but receives {}",
                                    sc[rank], rc[rank]
                                ),
                            ));
                        }
                    }
                }
            }
            Collective::Barrier => {}
            Collective::Send { peer } => {
                self.check_peer(op, *peer)?;
                self.need(op, "send", send)?;
            }
            Collective::Recv { peer } => {
                self.check_peer(op, *peer)?;
                self.need(op, "recv", recv)?;
            }
            Collective::RecvAny { .. } => {
                if self.world < 2 {
                    return Err(self.invalid(op, "a receive from any source needs another rank"));
                }
                self.need(op, "recv", recv)?;
            }
        }
        Ok(())
    }
}
