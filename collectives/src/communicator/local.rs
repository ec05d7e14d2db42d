//! A checked [`Call`] run over shared memory (`shm/ops.rs`) when every rank of the
//! communicator is on this host and the collective has a shared-memory algorithm, or an
//! allreduce across hosts that each share memory within; the others go through schedules and
//! links (`execute.rs`).

use super::execute::{allreduce_schedule, as_bytes, bytes_mut, copy_over, input, staged};
use super::{Inner, State};
use crate::call::{Call, CallDesc, Collective, OpKind};
use crate::dtype::DType;
use crate::error::CommError;
use crate::op::ReduceOp;
use crate::reduce::divide_bytes;
use crate::shm::ops;

impl Inner {
    /// Runs `call` over shared memory, or returns `None` when it is not for shared memory.
    ///
    /// # Safety
    /// As for [`execute`](Self::execute).
    pub(super) unsafe fn execute_local(
        &self,
        st: &mut State,
        call: &Call,
    ) -> Option<Result<(), CommError>> {
        let g = st.engine.shm.as_ref()?;
        if g.size() != self.world {
            // SAFETY: as for this function.
            return unsafe { self.execute_across(st, call) };
        }
        let (send, recv) = (call.send.as_ref(), call.recv.as_ref());
        let dtype = recv.or(send).map_or(DType::U8, |b| b.dtype());
        let timeout = call.deadline.unwrap_or(self.config.timeout.value);
        let small = self.config.tree_threshold.value;
        let mut desc = CallDesc {
            op: call.collective.kind(),
            dtype,
            redop: None,
            count: 0,
            root: None,
            seq: st.seq,
        };
        let mut copy = Vec::new();
        // SAFETY (every block below): the buffers passed `check` and are valid per the
        // caller's contract; `input` copies a send that overlaps the output.
        let result = match &call.collective {
            Collective::AllReduce { op } => {
                let r = recv.expect("checked");
                desc.redop = Some(*op);
                desc.count = r.count() as u64;
                let i = match send {
                    Some(s) if s.ptr() != r.ptr() => Some(unsafe { input(send, recv, &mut copy) }),
                    _ => None,
                };
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                st.engine
                    .run_local(&desc, timeout, |cx| {
                        ops::allreduce(cx, dtype, op.combine(), w, i, small)
                    })
                    .map(|()| {
                        if *op == ReduceOp::Avg {
                            divide_bytes(dtype, unsafe { bytes_mut(recv) }, self.world);
                        }
                    })
            }
            Collective::Reduce { op, root } => {
                // An allreduce whose result only the root keeps: the non-roots reduce a copy
                // of their input, so their buffers stay as they were.
                let inp = send.or(recv).expect("checked");
                let n = inp.count();
                desc.redop = Some(*op);
                desc.count = n as u64;
                desc.root = Some(*root);
                let mut scratch;
                let w: &mut [u8] = if self.rank == *root {
                    let r = recv.expect("checked");
                    unsafe { copy_over(inp, r) };
                    unsafe { bytes_mut(recv) }
                } else {
                    scratch = unsafe { staged(Some(inp)) };
                    &mut as_bytes(&mut scratch)[..n * dtype.size()]
                };
                st.seq += 1;
                let is_root = self.rank == *root;
                st.engine
                    .run_local(&desc, timeout, |cx| {
                        ops::allreduce(cx, dtype, op.combine(), w, None, small)
                    })
                    .map(|()| {
                        if is_root && *op == ReduceOp::Avg {
                            divide_bytes(dtype, unsafe { bytes_mut(recv) }, self.world);
                        }
                    })
            }
            Collective::Broadcast { root } => {
                let r = recv.expect("checked");
                if let (Some(s), true) = (send, self.rank == *root) {
                    unsafe { copy_over(s, r) };
                }
                desc.count = r.count() as u64;
                desc.root = Some(*root);
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                st.engine
                    .run_local(&desc, timeout, |cx| ops::broadcast(cx, *root, w))
            }
            Collective::AllGather { counts } => {
                let s = send.expect("checked");
                if counts
                    .as_ref()
                    .is_some_and(|c| c.iter().any(|&n| n != s.count()))
                {
                    return None;
                }
                desc.count = (s.count() * self.world) as u64;
                let i = unsafe { input(send, recv, &mut copy) };
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                st.engine
                    .run_local(&desc, timeout, |cx| ops::allgather(cx, i, w))
            }
            Collective::ReduceScatter { op } => {
                desc.redop = Some(*op);
                desc.count = send.expect("checked").count() as u64;
                let i = unsafe { input(send, recv, &mut copy) };
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                st.engine
                    .run_local(&desc, timeout, |cx| {
                        ops::reduce_scatter(cx, dtype, op.combine(), i, w)
                    })
                    .map(|()| {
                        if *op == ReduceOp::Avg {
                            divide_bytes(dtype, unsafe { bytes_mut(recv) }, self.world);
                        }
                    })
            }
            Collective::AllToAll {
                send_counts: None,
                recv_counts: None,
            } => {
                desc.count = send.expect("checked").count() as u64;
                let i = unsafe { input(send, recv, &mut copy) };
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                st.engine
                    .run_local(&desc, timeout, |cx| ops::all_to_all(cx, dtype.size(), i, w))
            }
            Collective::Gather { root } => {
                desc.count = send.expect("checked").count() as u64;
                desc.root = Some(*root);
                let (i, w) = if self.rank == *root {
                    unsafe { (input(send, recv, &mut copy), bytes_mut(recv)) }
                } else {
                    (unsafe { bytes_mut(send) } as &[u8], &mut [][..])
                };
                st.seq += 1;
                st.engine
                    .run_local(&desc, timeout, |cx| ops::gather(cx, *root, i, w))
            }
            Collective::Scatter { root } => {
                desc.count = recv.expect("checked").count() as u64;
                desc.root = Some(*root);
                let i: &[u8] = if self.rank == *root {
                    unsafe { input(send, recv, &mut copy) }
                } else {
                    &[]
                };
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                st.engine.run_local(&desc, timeout, |cx| {
                    ops::scatter(cx, dtype.size(), *root, i, w)
                })
            }
            Collective::Barrier => {
                debug_assert_eq!(desc.op, OpKind::Barrier);
                st.seq += 1;
                st.engine.run_local(&desc, timeout, ops::barrier)
            }
            _ => return None,
        };
        Some(self.failed_if(st, result))
    }

    fn failed_if(&self, st: &mut State, r: Result<(), CommError>) -> Result<(), CommError> {
        r.inspect_err(|e| {
            tracing::error!(rank = self.rank, "dtcomm: {e}");
            st.failed = Some(e.clone());
        })
    }

    /// An allreduce over ranks of several hosts that all share memory within: shared memory
    /// within each host, the links between (`ops::allreduce_across`). `None` for anything
    /// else (which then runs over the links alone).
    ///
    /// # Safety
    /// As for [`execute`](Self::execute).
    unsafe fn execute_across(&self, st: &mut State, call: &Call) -> Option<Result<(), CommError>> {
        let Collective::AllReduce { op } = &call.collective else {
            return None;
        };
        let (host, peers) = st.engine.shm.as_ref()?.across.clone()?;
        let (send, recv) = (call.send.as_ref(), call.recv.as_ref());
        let r = recv.expect("checked");
        let dtype = r.dtype();
        let desc = CallDesc {
            op: OpKind::AllReduce,
            dtype,
            redop: Some(*op),
            count: r.count() as u64,
            root: None,
            seq: st.seq,
        };
        st.seq += 1;
        let timeout = call.deadline.unwrap_or(self.config.timeout.value);
        let small = self.config.tree_threshold.value;
        let cfg = &self.config;
        let cross =
            |len: usize| allreduce_schedule(cfg, host, peers.len(), len, dtype).remap(&peers);
        let mut copy = Vec::new();
        // SAFETY: the buffers passed `check` and are valid per the caller's contract; `input`
        // copies a send that overlaps the output.
        let i = match send {
            Some(s) if s.ptr() != r.ptr() => Some(unsafe { input(send, recv, &mut copy) }),
            _ => None,
        };
        // SAFETY: as above.
        let w = unsafe { bytes_mut(recv) };
        let result = st
            .engine
            .run_split(&desc, timeout, |e, g, d| {
                ops::allreduce_across(e, g, &desc, d, dtype, op.combine(), w, i, small, &cross)
            })
            .map(|()| {
                if *op == ReduceOp::Avg {
                    // SAFETY: as above.
                    divide_bytes(dtype, unsafe { bytes_mut(recv) }, self.world);
                }
            });
        Some(self.failed_if(st, result))
    }
}
