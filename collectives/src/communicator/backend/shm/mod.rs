//! The shared-memory backend: a checked [`Call`] run over shared memory, where `route.rs` sends
//! it: every rank of the communicator on this host and a collective with a shared-memory
//! algorithm (all but point to point). The segment, its layout, futexes, pipes and peers'
//! liveness are links (`transport/shm/`); what this backend adds:
//!
//! * `group.rs`: the host's ranks and the epoch protocol every collective uses;
//! * `ctx.rs`: what every shared-memory collective gets (the group, the links, the deadline);
//! * `allreduce.rs`: allreduce reading every peer's segment, and across hosts;
//! * `ops.rs`: broadcast, allgather, reduce-scatter, all-to-all, gather, scatter, barrier;
//! * `setup.rs`: finding host peers over the links already up and joining them.

use crate::call::{Call, CallDesc, Collective, OpKind};
use crate::communicator::buffers::{as_bytes, bytes_mut, copy_over, input, staged};
use crate::communicator::{Inner, State};
use crate::dtype::DType;
use crate::error::CommError;
use crate::op::ReduceOp;
use crate::reduce::divide_bytes;
mod allreduce;
pub(in crate::communicator) mod ctx;
pub(in crate::communicator) mod group;
pub(in crate::communicator) mod ops;
pub(in crate::communicator) mod setup;

pub(crate) use group::ShmGroup;

use self::ctx::run_local;

/// The host group of a state `route.rs` sent here (it checked there is one).
macro_rules! group {
    ($st:expr) => {
        $st.shm.as_mut().expect("route.rs checked the host group")
    };
}

/// Whether shared memory has an algorithm for `call`: every collective but point to point and
/// the uneven forms (`allgatherv`, `alltoallv`).
pub(in crate::communicator) fn has_algorithm(call: &Call) -> bool {
    match &call.collective {
        Collective::Send { .. } | Collective::Recv { .. } | Collective::RecvAny { .. } => false,
        Collective::AllToAll {
            send_counts,
            recv_counts,
        } => send_counts.is_none() && recv_counts.is_none(),
        Collective::AllGather { counts } => {
            let sent = call.send.as_ref().map_or(0, |s| s.count());
            counts.as_ref().is_none_or(|c| c.iter().all(|&n| n == sent))
        }
        _ => true,
    }
}

impl Inner {
    /// Runs `call` over shared memory.
    ///
    /// # Safety
    /// As for `Inner::execute`.
    pub(in crate::communicator) unsafe fn run_shm(
        &self,
        st: &mut State,
        call: &Call,
    ) -> Result<(), CommError> {
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
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    Some(s) if s.ptr() != r.ptr() => Some(unsafe { input(send, recv, &mut copy) }),
                    _ => None,
                };
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                run_local(&mut st.engine, group!(st), &desc, timeout, |cx| {
                    ops::allreduce(cx, dtype, op.combine(), w, i, small)
                })
                .map(|()| {
                    if *op == ReduceOp::Avg {
                        // SAFETY: checked buffers, valid for the call (`run`'s contract).
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
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    unsafe { copy_over(inp, r) };
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    unsafe { bytes_mut(recv) }
                } else {
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    scratch = unsafe { staged(Some(inp)) };
                    &mut as_bytes(&mut scratch)[..n * dtype.size()]
                };
                st.seq += 1;
                let is_root = self.rank == *root;
                run_local(&mut st.engine, group!(st), &desc, timeout, |cx| {
                    ops::allreduce(cx, dtype, op.combine(), w, None, small)
                })
                .map(|()| {
                    if is_root && *op == ReduceOp::Avg {
                        // SAFETY: checked buffers, valid for the call (`run`'s contract).
                        divide_bytes(dtype, unsafe { bytes_mut(recv) }, self.world);
                    }
                })
            }
            Collective::Broadcast { root } => {
                let r = recv.expect("checked");
                if let (Some(s), true) = (send, self.rank == *root) {
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    unsafe { copy_over(s, r) };
                }
                desc.count = r.count() as u64;
                desc.root = Some(*root);
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                run_local(&mut st.engine, group!(st), &desc, timeout, |cx| {
                    ops::broadcast(cx, *root, w)
                })
            }
            Collective::AllGather { .. } => {
                let s = send.expect("checked");
                debug_assert!(
                    has_algorithm(call),
                    "route.rs sends allgatherv over the links"
                );
                desc.count = (s.count() * self.world) as u64;
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let i = unsafe { input(send, recv, &mut copy) };
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                run_local(&mut st.engine, group!(st), &desc, timeout, |cx| {
                    ops::allgather(cx, i, w)
                })
            }
            Collective::ReduceScatter { op } => {
                desc.redop = Some(*op);
                desc.count = send.expect("checked").count() as u64;
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let i = unsafe { input(send, recv, &mut copy) };
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                run_local(&mut st.engine, group!(st), &desc, timeout, |cx| {
                    ops::reduce_scatter(cx, dtype, op.combine(), i, w)
                })
                .map(|()| {
                    if *op == ReduceOp::Avg {
                        // SAFETY: checked buffers, valid for the call (`run`'s contract).
                        divide_bytes(dtype, unsafe { bytes_mut(recv) }, self.world);
                    }
                })
            }
            Collective::AllToAll {
                send_counts: None,
                recv_counts: None,
            } => {
                desc.count = send.expect("checked").count() as u64;
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let i = unsafe { input(send, recv, &mut copy) };
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                run_local(&mut st.engine, group!(st), &desc, timeout, |cx| {
                    ops::all_to_all(cx, dtype.size(), i, w)
                })
            }
            Collective::Gather { root } => {
                desc.count = send.expect("checked").count() as u64;
                desc.root = Some(*root);
                let (i, w) = if self.rank == *root {
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    unsafe { (input(send, recv, &mut copy), bytes_mut(recv)) }
                } else {
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    (unsafe { bytes_mut(send) } as &[u8], &mut [][..])
                };
                st.seq += 1;
                run_local(&mut st.engine, group!(st), &desc, timeout, |cx| {
                    ops::gather(cx, *root, i, w)
                })
            }
            Collective::Scatter { root } => {
                desc.count = recv.expect("checked").count() as u64;
                desc.root = Some(*root);
                let i: &[u8] = if self.rank == *root {
                    // SAFETY: checked buffers, valid for the call (`run`'s contract).
                    unsafe { input(send, recv, &mut copy) }
                } else {
                    &[]
                };
                // SAFETY: checked buffers, valid for the call (`run`'s contract).
                let w = unsafe { bytes_mut(recv) };
                st.seq += 1;
                run_local(&mut st.engine, group!(st), &desc, timeout, |cx| {
                    ops::scatter(cx, dtype.size(), *root, i, w)
                })
            }
            Collective::Barrier => {
                debug_assert_eq!(desc.op, OpKind::Barrier);
                st.seq += 1;
                run_local(&mut st.engine, group!(st), &desc, timeout, ops::barrier)
            }
            _ => unreachable!("route.rs sends what has no shared-memory algorithm over the links"),
        };
        self.failed_if(st, result)
    }

    /// Records an error as the communicator's failure (and logs it).
    pub(in crate::communicator) fn failed_if(
        &self,
        st: &mut State,
        r: Result<(), CommError>,
    ) -> Result<(), CommError> {
        r.inspect_err(|e| {
            tracing::error!(rank = self.rank, "dtcomm: {e}");
            st.failed = Some(e.clone());
        })
    }
}
