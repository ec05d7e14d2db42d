//! A device call, planned without touching a device: which NCCL collective runs it (when NCCL
//! has one), which buffers host staging copies in and out, and the record the optional
//! cross-rank check (`DTCOMM_NCCL_CHECK=1`) compares. Pure functions of the call.

use crate::call::{Call, CallDesc, Collective, Memory, RawBuf};
use crate::device::api::{DevPtr, NcclOp, StreamHandle};

/// The device and stream of a call whose buffers are device memory (`None` for host calls).
/// The check (`communicator/check.rs`) made sure every buffer of a call agrees.
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

/// The NCCL collective for `call` among `world` ranks, or `None` when NCCL has none
/// (all-gather and all-to-all with counts that differ, gather, scatter, point to point): those
/// are staged through the host.
pub(crate) fn nccl_op(call: &Call, world: usize) -> Option<NcclOp> {
    let (send, recv) = (call.send.as_ref(), call.recv.as_ref());
    Some(match &call.collective {
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
            if counts
                .as_ref()
                .is_some_and(|c| c.iter().any(|&n| n != s.count()))
            {
                return None;
            }
            NcclOp::AllGather {
                send: ptr(s),
                recv: ptr(r),
                count: s.count(),
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
            let count = s.count() / world;
            let equal =
                |c: &Option<Vec<usize>>| c.as_ref().is_none_or(|c| c.iter().all(|&n| n == count));
            if !equal(send_counts) || !equal(recv_counts) {
                return None;
            }
            NcclOp::AllToAll {
                send: ptr(s),
                recv: ptr(r),
                count,
            }
        }
        _ => return None,
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
mod tests {
    use super::*;
    use crate::call::OpKind;
    use crate::dtype::DType;
    use crate::op::ReduceOp;

    fn dev(p: u64, n: usize) -> RawBuf {
        RawBuf::device(p as *mut u8, n, DType::F32, 1, 7)
    }

    #[test]
    fn nccl_runs_what_it_has_and_the_rest_is_staged() {
        let c = Call::new(Collective::AllReduce { op: ReduceOp::Avg }).recv(dev(64, 10));
        assert_eq!(device_of(&c), Some((1, StreamHandle(7))));
        assert_eq!(
            nccl_op(&c, 2),
            Some(NcclOp::AllReduce {
                send: DevPtr(64),
                recv: DevPtr(64),
                count: 10,
                op: ReduceOp::Avg
            })
        );
        let v = Call::new(Collective::AllGather {
            counts: Some(vec![2, 3]),
        })
        .send(dev(64, 2))
        .recv(dev(128, 5));
        assert_eq!(nccl_op(&v, 2), None, "all_gather_v has no NCCL collective");
        let eq = Call::new(Collective::AllGather {
            counts: Some(vec![2, 2]),
        })
        .send(dev(64, 2))
        .recv(dev(128, 4));
        assert!(matches!(
            nccl_op(&eq, 2),
            Some(NcclOp::AllGather { count: 2, .. })
        ));
        let a = Call::new(Collective::AllToAll {
            send_counts: None,
            recv_counts: None,
        })
        .send(dev(64, 8))
        .recv(dev(128, 8));
        assert!(matches!(
            nccl_op(&a, 2),
            Some(NcclOp::AllToAll { count: 4, .. })
        ));
        let av = Call::new(Collective::AllToAll {
            send_counts: Some(vec![3, 5]),
            recv_counts: None,
        })
        .send(dev(64, 8))
        .recv(dev(128, 8));
        assert_eq!(nccl_op(&av, 2), None, "all_to_all_v is staged");
        let g = Call::new(Collective::Gather { root: 0 }).send(dev(64, 2));
        assert_eq!(nccl_op(&g, 2), None);
        assert!(!writes_recv(&g, 1));
        let r = Call::new(Collective::Reduce {
            op: ReduceOp::Sum,
            root: 1,
        })
        .send(dev(64, 4));
        assert_eq!(
            nccl_op(&r, 2),
            Some(NcclOp::Reduce {
                send: DevPtr(64),
                recv: DevPtr(64),
                count: 4,
                op: ReduceOp::Sum,
                root: 1
            })
        );
        assert!(reads_recv(&c) && !reads_recv(&r));
    }

    #[test]
    fn the_check_names_the_first_rank_that_differs() {
        let d = |count, seq| CallDesc {
            op: OpKind::AllReduce,
            dtype: DType::F32,
            redop: Some(ReduceOp::Sum),
            count,
            root: None,
            seq,
        };
        let all = [
            check_record(&d(8, 3)),
            check_record(&d(8, 3)),
            check_record(&d(9, 3)),
        ];
        assert_eq!(first_mismatch(&d(8, 3), &all), Some((2, d(9, 3))));
        assert_eq!(first_mismatch(&d(8, 3), &all[..2]), None);
    }
}
