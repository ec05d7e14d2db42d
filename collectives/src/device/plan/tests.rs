//! The plan's unit tests: which calls NCCL runs and how, the exchanges' blocks laid out as the
//! host engine lays the buffers, and the check's record.

use super::*;
use crate::call::OpKind;
use crate::dtype::DType;
use crate::op::ReduceOp;

fn dev(p: u64, n: usize) -> RawBuf {
    typed(p, n, DType::F32)
}

fn typed(p: u64, n: usize, dtype: DType) -> RawBuf {
    RawBuf::device(p as *mut u8, n, dtype, 1, 7)
}

fn b(peer: usize, ptr: u64, count: usize) -> Block {
    Block {
        peer,
        ptr: DevPtr(ptr),
        count,
    }
}

fn exchange(sends: Vec<Block>, recvs: Vec<Block>) -> Option<NcclOp> {
    Some(NcclOp::Exchange { sends, recvs })
}

#[test]
fn nccl_runs_what_it_has_and_the_rest_is_staged() {
    let c = Call::new(Collective::AllReduce { op: ReduceOp::Avg }).recv(dev(64, 10));
    assert_eq!(device_of(&c), Some((1, StreamHandle(7))));
    assert_eq!(
        nccl_op(&c, 0, 2, true),
        Some(NcclOp::AllReduce {
            send: DevPtr(64),
            recv: DevPtr(64),
            count: 10,
            op: ReduceOp::Avg
        })
    );
    let eq = Call::new(Collective::AllGather {
        counts: Some(vec![2, 2]),
    })
    .send(dev(64, 2))
    .recv(dev(128, 4));
    assert!(matches!(
        nccl_op(&eq, 1, 2, false),
        Some(NcclOp::AllGather { count: 2, .. })
    ));
    let g = Call::new(Collective::Gather { root: 0 }).send(dev(64, 2));
    assert!(!writes_recv(&g, 1));
    let r = Call::new(Collective::Reduce {
        op: ReduceOp::Sum,
        root: 1,
    })
    .send(dev(64, 4));
    assert_eq!(
        nccl_op(&r, 0, 2, true),
        Some(NcclOp::Reduce {
            send: DevPtr(64),
            recv: DevPtr(64),
            count: 4,
            op: ReduceOp::Sum,
            root: 1
        })
    );
    assert!(reads_recv(&c) && !reads_recv(&r));
    for p2p in [true, false] {
        let send = Call::new(Collective::Send { peer: 1 }).send(dev(64, 2));
        assert_eq!(nccl_op(&send, 0, 2, p2p), None, "point to point is staged");
        assert_eq!(nccl_op(&Call::new(Collective::Barrier), 0, 2, p2p), None);
    }
}

#[test]
fn all_gather_v_sends_to_every_rank_and_receives_each_block_where_the_host_puts_it() {
    // counts [2, 0, 3], f32: blocks at 0, 8 and 8 bytes (the middle one empty)
    let call = |rank: usize, send: u64| {
        let c = vec![2, 0, 3];
        Call::new(Collective::AllGather { counts: Some(c) })
            .send(dev(send, [2, 0, 3][rank]))
            .recv(dev(1000, 5))
    };
    assert_eq!(
        nccl_op(&call(0, 64), 0, 3, true),
        exchange(
            vec![b(0, 64, 2), b(1, 64, 2), b(2, 64, 2)],
            vec![b(0, 1000, 2), b(2, 1008, 3)]
        )
    );
    assert_eq!(
        nccl_op(&call(1, 64), 1, 3, true),
        exchange(vec![], vec![b(0, 1000, 2), b(2, 1008, 3)]),
        "a rank with count 0 posts no send, and nobody receives from it"
    );
    // In place: rank 2's send is its own block of recv; that block is not copied at all.
    assert_eq!(
        nccl_op(&call(2, 1008), 2, 3, true),
        exchange(vec![b(0, 1008, 3), b(1, 1008, 3)], vec![b(0, 1000, 2)])
    );
    assert_eq!(
        nccl_op(&call(0, 64), 0, 3, false),
        None,
        "staged without ncclSend/ncclRecv"
    );
}

#[test]
fn all_to_all_sends_block_p_to_p_equal_or_uneven() {
    let a = Call::new(Collective::AllToAll {
        send_counts: None,
        recv_counts: None,
    })
    .send(dev(64, 8))
    .recv(dev(128, 8));
    assert_eq!(
        nccl_op(&a, 1, 2, true),
        exchange(
            vec![b(0, 64, 4), b(1, 80, 4)],
            vec![b(0, 128, 4), b(1, 144, 4)]
        )
    );
    assert_eq!(nccl_op(&a, 1, 2, false), None);
    // i64, rank 1 of 3: sends 3, 0, 5 and receives 1, 2, 0 (offsets in elements of 8 bytes)
    let v = Call::new(Collective::AllToAll {
        send_counts: Some(vec![3, 0, 5]),
        recv_counts: Some(vec![1, 2, 0]),
    })
    .send(typed(800, 8, DType::I64))
    .recv(typed(1600, 3, DType::I64));
    assert_eq!(
        nccl_op(&v, 1, 3, true),
        exchange(
            vec![b(0, 800, 3), b(2, 824, 5)],
            vec![b(0, 1600, 1), b(1, 1608, 2)]
        )
    );
    // Counts given on one side only: the other side is equal blocks, as on the host.
    let half = Call::new(Collective::AllToAll {
        send_counts: Some(vec![1, 3]),
        recv_counts: None,
    })
    .send(dev(64, 4))
    .recv(dev(128, 4));
    assert_eq!(
        nccl_op(&half, 0, 2, true),
        exchange(
            vec![b(0, 64, 1), b(1, 68, 3)],
            vec![b(0, 128, 2), b(1, 136, 2)]
        )
    );
}

#[test]
fn gather_sends_to_the_root_and_the_root_receives_every_block() {
    // root 2 of 3, two i64 each; the non-roots pass no recv
    let nonroot = Call::new(Collective::Gather { root: 2 }).send(typed(64, 2, DType::I64));
    assert_eq!(
        nccl_op(&nonroot, 0, 3, true),
        exchange(vec![b(2, 64, 2)], vec![])
    );
    let root = nonroot.clone().recv(typed(1000, 6, DType::I64));
    assert_eq!(
        nccl_op(&root, 2, 3, true),
        exchange(
            vec![b(2, 64, 2)],
            vec![b(0, 1000, 2), b(1, 1016, 2), b(2, 1032, 2)]
        )
    );
    // The root's send already in its block of recv: no self copy.
    let inplace = Call::new(Collective::Gather { root: 1 })
        .send(typed(1016, 2, DType::I64))
        .recv(typed(1000, 6, DType::I64));
    assert_eq!(
        nccl_op(&inplace, 1, 3, true),
        exchange(vec![], vec![b(0, 1000, 2), b(2, 1032, 2)])
    );
    let empty = Call::new(Collective::Gather { root: 0 })
        .send(dev(64, 0))
        .recv(dev(128, 0));
    assert_eq!(nccl_op(&empty, 0, 3, true), exchange(vec![], vec![]));
    assert_eq!(nccl_op(&root, 2, 3, false), None);
}

#[test]
fn scatter_sends_block_p_from_the_root_to_p() {
    // root 1 of 3, two f32 each; the non-roots pass no send
    let nonroot = Call::new(Collective::Scatter { root: 1 }).recv(dev(500, 2));
    assert_eq!(
        nccl_op(&nonroot, 2, 3, true),
        exchange(vec![], vec![b(1, 500, 2)])
    );
    let root = nonroot.clone().send(dev(64, 6));
    assert_eq!(
        nccl_op(&root, 1, 3, true),
        exchange(
            vec![b(0, 64, 2), b(1, 72, 2), b(2, 80, 2)],
            vec![b(1, 500, 2)]
        )
    );
    let empty = Call::new(Collective::Scatter { root: 0 }).recv(dev(500, 0));
    assert_eq!(nccl_op(&empty, 1, 3, true), exchange(vec![], vec![]));
    assert_eq!(nccl_op(&nonroot, 2, 3, false), None);
}

#[test]
fn an_exchange_whose_receives_overwrite_its_sends_is_found() {
    let inplace = Call::new(Collective::AllToAll {
        send_counts: None,
        recv_counts: None,
    })
    .send(dev(64, 4))
    .recv(dev(64, 4));
    let op = nccl_op(&inplace, 0, 2, true).unwrap();
    // (its own block is no copy; the one it sends rank 1 is where rank 1's lands)
    assert_eq!(overlap(&op, 4), Some((b(1, 72, 2), b(1, 72, 2))));
    // In-place all_gather_v writes only the blocks it does not send from.
    let ag = Call::new(Collective::AllGather {
        counts: Some(vec![1, 3]),
    })
    .send(dev(68, 3))
    .recv(dev(64, 4));
    let op = nccl_op(&ag, 1, 2, true).unwrap();
    assert_eq!(overlap(&op, 4), None);
    // Adjacent, not overlapping.
    let apart = Call::new(Collective::AllToAll {
        send_counts: None,
        recv_counts: None,
    })
    .send(dev(64, 4))
    .recv(dev(80, 4));
    assert_eq!(overlap(&nccl_op(&apart, 0, 2, true).unwrap(), 4), None);
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

#[test]
fn the_check_leaves_out_the_count_of_all_to_all_v_only() {
    let d = CallDesc {
        op: OpKind::AllToAll,
        dtype: DType::F32,
        redop: None,
        count: 7,
        root: None,
        seq: 4,
    };
    let v = Call::new(Collective::AllToAll {
        send_counts: Some(vec![3, 4]),
        recv_counts: None,
    });
    assert_eq!(check_desc(&v, d).count, 0);
    let eq = Call::new(Collective::AllToAll {
        send_counts: None,
        recv_counts: None,
    });
    assert_eq!(check_desc(&eq, d), d);
    let agv = Call::new(Collective::AllGather {
        counts: Some(vec![3, 4]),
    });
    assert_eq!(
        check_desc(&agv, d),
        d,
        "all_gather_v's total is the same everywhere"
    );
}
