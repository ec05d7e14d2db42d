//! The hierarchical backend: an allreduce over ranks of several hosts that each share memory
//! within: shared memory within each host, the links between one rank per host.

use super::links::allreduce_schedule;
use super::shm::ctx::run_split;
use super::shm::ops;
use crate::call::Call;
use crate::communicator::buffers::{bytes_mut, input};
use crate::communicator::{Inner, State};
use crate::error::CommError;
use crate::op::ReduceOp;
use crate::reduce::divide_bytes;

impl Inner {
    /// An allreduce over ranks of several hosts that all share memory within: shared memory
    /// within each host, the links between (`ops::allreduce_across`); this rank is `host`-th
    /// of the one rank per host, `peers`, that the links join.
    ///
    /// # Safety
    /// As for `Inner::execute`.
    pub(in crate::communicator) unsafe fn run_hierarchical(
        &self,
        st: &mut State,
        call: &Call,
        op: ReduceOp,
        host: usize,
        peers: &[usize],
    ) -> Result<(), CommError> {
        let (send, recv) = (call.send.as_ref(), call.recv.as_ref());
        let r = recv.expect("checked");
        let dtype = r.dtype();
        let desc = call.desc(st.seq);
        st.seq += 1;
        let timeout = call.deadline.unwrap_or(self.config.timeout.value);
        let small = self.config.tree_threshold.value;
        let cfg = &self.config;
        let cross =
            |len: usize| allreduce_schedule(cfg, host, peers.len(), len, dtype).remap(peers);
        let mut copy = Vec::new();
        // SAFETY: the buffers passed `check` and are valid per the caller's contract; `input`
        // copies a send that overlaps the output.
        let i = match send {
            // SAFETY: checked buffers, valid for the call (`run`'s contract).
            Some(s) if s.ptr() != r.ptr() => Some(unsafe { input(send, recv, &mut copy) }),
            _ => None,
        };
        // SAFETY: as above.
        let w = unsafe { bytes_mut(recv) };
        let g = st.shm.as_mut().expect("route.rs checked the host group");
        let result = run_split(&mut st.engine, g, &desc, timeout, |e, g, d| {
            ops::allreduce_across(e, g, &desc, d, dtype, op.combine(), w, i, small, &cross)
        })
        .map(|()| {
            if op == ReduceOp::Avg {
                // SAFETY: as above.
                divide_bytes(dtype, unsafe { bytes_mut(recv) }, self.world);
            }
        });
        self.failed_if(st, result)
    }
}
