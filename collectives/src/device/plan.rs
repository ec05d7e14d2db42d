//! A device call, planned without touching a device: which NCCL collective runs it (when NCCL
//! has one), which buffers host staging copies in and out, and the record the optional
//! cross-rank check (`DTCOMM_NCCL_CHECK=1`) compares. Pure functions of the call.

use crate::call::{Call, CallDesc, Collective, Memory, RawBuf};
use crate::device::api::{Block, DevPtr, NcclOp, StreamHandle};

/// The device and stream of a call whose buffers are device memory (`None` for host calls).
/// The check (`communicator/args.rs`) made sure every buffer of a call agrees.
pub(crate) fn device_of(call: &Call) -> Option<(i32, StreamHandle)> {
    [call.send.as_ref(), call.recv.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|b| match b.memory() {
            Memory::Device { device, stream } => Some((device, StreamHandle(stream))),
            _ => None,
        })
}

fn ptr(b: &RawBuf) -> DevPtr {
    DevPtr(b.ptr() as u64)
}

/// `b`'s address `elems` elements in (within the buffer: the check bounded the counts).
fn at(b: &RawBuf, elems: usize) -> DevPtr {
    DevPtr((b.ptr() as u64).wrapping_add(elems.wrapping_mul(b.dtype().size()) as u64))
}

/// Start offsets (elements) of consecutive blocks of `counts`, as the host engine lays them.
fn offsets(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0usize, |at, &n| {
            let o = *at;
            *at = at.saturating_add(n);
            Some(o)
        })
        .collect()
}

/// The blocks of an exchange being built: empty ones are not posted, and a block this rank
/// would send to itself from where it would receive it is no copy at all (in-place
/// all-gather(v) and gather), so neither half is posted.
#[derive(Default)]
struct Exchange {
    sends: Vec<Block>,
    recvs: Vec<Block>,
}

impl Exchange {
    fn send(&mut self, peer: usize, ptr: DevPtr, count: usize) {
        if count > 0 {
            self.sends.push(Block { peer, ptr, count });
        }
    }

    fn recv(&mut self, peer: usize, ptr: DevPtr, count: usize) {
        if count > 0 {
            self.recvs.push(Block { peer, ptr, count });
        }
    }

    fn op(mut self, rank: usize) -> NcclOp {
        let own = |b: &[Block]| b.iter().position(|b| b.peer == rank);
        if let (Some(s), Some(r)) = (own(&self.sends), own(&self.recvs))
            && self.sends[s] == self.recvs[r]
        {
            self.sends.remove(s);
            self.recvs.remove(r);
        }
        NcclOp::Exchange {
            sends: self.sends,
            recvs: self.recvs,
        }
    }
}

/// The NCCL call(s) for `call` on rank `rank` of `world`, or `None` when it is staged: point to
/// point (made by two ranks only), barrier (no buffers), and, where some rank's NCCL lacks
/// `ncclSend`/`ncclRecv` (`p2p` false, agreed by every rank), the calls that need them.
///
/// All-gather with equal counts is `ncclAllGather`; with counts that differ, all-to-all(v),
/// gather and scatter are an [`NcclOp::Exchange`] laid out exactly as the host engine lays the
/// buffers (blocks of the counts one after another, in rank order). The choice depends only on
/// what every rank passes alike (the collective, `counts`, `p2p`), so every rank makes the same
/// one.
pub(crate) fn nccl_op(call: &Call, rank: usize, world: usize, p2p: bool) -> Option<NcclOp> {
    let (send, recv) = (call.send.as_ref(), call.recv.as_ref());
    let op = match &call.collective {
        Collective::AllReduce { op } => {
            let r = recv?;
            NcclOp::AllReduce {
                send: ptr(send.unwrap_or(r)),
                recv: ptr(r),
                count: r.count(),
                op: *op,
            }
        }
        Collective::Broadcast { root } => {
            let r = recv?;
            NcclOp::Broadcast {
                send: ptr(send.unwrap_or(r)),
                recv: ptr(r),
                count: r.count(),
                root: *root,
            }
        }
        Collective::Reduce { op, root } => {
            let input = send.or(recv)?;
            NcclOp::Reduce {
                send: ptr(input),
                recv: ptr(recv.unwrap_or(input)),
                count: input.count(),
                op: *op,
                root: *root,
            }
        }
        Collective::AllGather { counts } => {
            let (s, r) = (send?, recv?);
            match counts {
                Some(c) if c.iter().any(|&n| n != s.count()) => {
                    let mut x = Exchange::default();
                    for (q, (&n, o)) in c.iter().zip(offsets(c)).enumerate() {
                        x.send(q, ptr(s), s.count());
                        x.recv(q, at(r, o), n);
                    }
                    x.op(rank)
                }
                _ => NcclOp::AllGather {
                    send: ptr(s),
                    recv: ptr(r),
                    count: s.count(),
                },
            }
        }
        Collective::ReduceScatter { op } => {
            let (s, r) = (send?, recv?);
            NcclOp::ReduceScatter {
                send: ptr(s),
                recv: ptr(r),
                count: r.count(),
                op: *op,
            }
        }
        Collective::AllToAll {
            send_counts,
            recv_counts,
        } => {
            let (s, r) = (send?, recv?);
            let sc = crate::call::block_counts(send_counts.as_ref(), s.count(), world);
            let rc = crate::call::block_counts(recv_counts.as_ref(), r.count(), world);
            let mut x = Exchange::default();
            let blocks = sc.iter().zip(offsets(&sc)).zip(rc.iter().zip(offsets(&rc)));
            for (q, ((&ns, os), (&nr, or))) in blocks.enumerate() {
                x.send(q, at(s, os), ns);
                x.recv(q, at(r, or), nr);
            }
            x.op(rank)
        }
        Collective::Gather { root } => {
            // The root's recv holds `world` blocks of its own send's count.
            let s = send?;
            let mut x = Exchange::default();
            x.send(*root, ptr(s), s.count());
            if rank == *root {
                let r = recv?;
                for q in 0..world {
                    x.recv(q, at(r, q * s.count()), s.count());
                }
            }
            x.op(rank)
        }
        Collective::Scatter { root } => {
            // The root's send holds `world` blocks of its own recv's count.
            let r = recv?;
            let mut x = Exchange::default();
            if rank == *root {
                let s = send?;
                for q in 0..world {
                    x.send(q, at(s, q * r.count()), r.count());
                }
            }
            x.recv(*root, ptr(r), r.count());
            x.op(rank)
        }
        Collective::Barrier
        | Collective::Send { .. }
        | Collective::Recv { .. }
        | Collective::RecvAny { .. } => return None,
    };
    (p2p || !op.needs_p2p()).then_some(op)
}

/// The first send block of an exchange that one of its receives overlaps, with that receive:
/// grouped `ncclSend`/`ncclRecv` run concurrently, so the receive could overwrite the data
/// before it is sent. (The host engine copies an overlapping input aside first; the NCCL path
/// has no device memory of its own to do that.) `size` is the element size.
pub(crate) fn overlap(op: &NcclOp, size: usize) -> Option<(Block, Block)> {
    let NcclOp::Exchange { sends, recvs } = op else {
        return None;
    };
    let span = |b: &Block| {
        let start = u128::from(b.ptr.0);
        (start, start + (b.count as u128) * (size as u128))
    };
    sends.iter().find_map(|s| {
        let (a0, a1) = span(s);
        recvs
            .iter()
            .find(|r| {
                let (b0, b1) = span(r);
                a0 < b1 && b0 < a1
            })
            .map(|r| (*s, *r))
    })
}

/// Whether `call` is point to point (send, receive): made by two ranks, not all of them, so
/// it can take part in nothing collective (the path agreement, NCCL's set-up); it is staged.
pub(crate) fn point_to_point(call: &Call) -> bool {
    matches!(
        call.collective,
        Collective::Send { .. } | Collective::Recv { .. } | Collective::RecvAny { .. }
    )
}

/// Whether this rank's `recv` is written by `call` (the non-roots of reduce and gather keep
/// theirs), i.e. whether staging copies it back.
pub(crate) fn writes_recv(call: &Call, rank: usize) -> bool {
    match call.collective {
        Collective::Reduce { root, .. } | Collective::Gather { root } => rank == root,
        Collective::Send { .. } => false,
        _ => call.recv.is_some(),
    }
}

/// Whether staging must copy `recv` in before the host call: in-place calls read it, and the
/// non-roots of an in-place reduce keep it.
pub(crate) fn reads_recv(call: &Call) -> bool {
    call.send.is_none()
        && matches!(
            call.collective,
            Collective::AllReduce { .. } | Collective::Broadcast { .. } | Collective::Reduce { .. }
        )
}

/// Words of the record `DTCOMM_NCCL_CHECK=1` all-gathers before an NCCL call.
pub(crate) const CHECK_WORDS: usize = 6;

/// `desc` (of `call`) as the check compares it. The count is the whole buffer's, the same on
/// every rank for every call but all-to-all with per-peer counts, whose recv holds what this
/// rank receives: there the count is left out (0) and only the op, dtype and sequence number are
/// compared; counts that do not pair up (what p sends q against what q expects from p) are not
/// seen by the check (NCCL hangs or truncates on them; the twin fails naming both ranks).
pub(crate) fn check_desc(call: &Call, desc: CallDesc) -> CallDesc {
    match &call.collective {
        Collective::AllToAll {
            send_counts,
            recv_counts,
        } if send_counts.is_some() || recv_counts.is_some() => CallDesc { count: 0, ..desc },
        _ => desc,
    }
}

/// `desc` as the check's record.
pub(crate) fn check_record(desc: &CallDesc) -> [u64; CHECK_WORDS] {
    [
        desc.op as u64,
        desc.dtype as u64,
        desc.redop.map_or(0, |r| r as u64),
        desc.count,
        desc.root.map_or(u64::MAX, |r| r as u64),
        desc.seq,
    ]
}

/// The first rank whose record differs from `mine`, with its call as it described it.
pub(crate) fn first_mismatch(
    mine: &CallDesc,
    all: &[[u64; CHECK_WORDS]],
) -> Option<(usize, CallDesc)> {
    let own = check_record(mine);
    let (peer, rec) = all.iter().enumerate().find(|(_, r)| **r != own)?;
    let theirs = CallDesc {
        op: crate::call::OpKind::from_u8(rec[0] as u8).unwrap_or(mine.op),
        dtype: crate::dtype::DType::from_u8(rec[1] as u8).unwrap_or(mine.dtype),
        redop: crate::op::ReduceOp::from_u8(rec[2] as u8),
        count: rec[3],
        root: (rec[4] != u64::MAX).then_some(rec[4] as usize),
        seq: rec[5],
    };
    Some((peer, theirs))
}

#[cfg(test)]
mod tests;
