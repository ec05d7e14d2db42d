//! The negotiator over real communicators (in-memory transport, a thread per rank): operations
//! complete once every rank submitted them, whatever the order; fused allreduces give each
//! tensor its own result; scale factors; allgather with a first dimension per rank;
//! broadcast; a mismatch fails on every rank and later operations work; duplicates refused;
//! in-place buffers (lone, fused, broadcast) hold their results and are only read otherwise;
//! one rank's shutdown ends the negotiation for all.

use std::time::Duration;

use dtcomm::negotiate::{InPlace, Kind, NegotiateError, Negotiator, Payload, Request};
use dtcomm::{Communicator, DType, Options, ReduceOp};

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn back(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs `body(rank, negotiator)` on every rank of an in-memory group of `world`.
fn group(world: usize, threshold: u64, body: impl Fn(usize, &Negotiator) + Sync) {
    let comms = Communicator::in_memory(world, Options::default()).unwrap();
    std::thread::scope(|s| {
        for (rank, comm) in comms.into_iter().enumerate() {
            let body = &body;
            s.spawn(move || {
                let n = Negotiator::start(
                    std::sync::Arc::new(comm),
                    Duration::from_millis(1),
                    threshold,
                );
                body(rank, &n);
                n.shutdown();
            });
        }
    });
}

#[test]
fn names_complete_whatever_order_ranks_submit_them_and_fused_results_are_per_tensor() {
    group(3, 1 << 20, |rank, n| {
        // Each rank submits the same 6 names in its own order.
        let mut order: Vec<usize> = (0..6).collect();
        order.rotate_left(rank * 2);
        let handles: Vec<_> = order
            .iter()
            .map(|&i| {
                let r =
                    Request::allreduce(format!("allreduce.g{i}"), DType::F32, &[3], ReduceOp::Sum);
                let v = [(rank * 10 + i) as f32; 3];
                (i, n.submit(r, f32s(&v)).unwrap())
            })
            .collect();
        for (i, h) in handles {
            // 0+10+20 + 3i
            assert_eq!(
                back(&h.wait().unwrap().data),
                vec![(30 + 3 * i) as f32; 3],
                "g{i}"
            );
        }
    });
}

/// `buf` lent in place.
fn lend(buf: &mut [f32]) -> Payload {
    // SAFETY: every caller keeps `buf` alive and untouched until the operation is waited for.
    Payload::InPlace(unsafe { InPlace::new(buf.as_mut_ptr().cast(), std::mem::size_of_val(buf)) })
}

#[test]
fn in_place_buffers_hold_the_results_of_lone_fused_and_broadcast_operations() {
    for threshold in [0, 1 << 20] {
        group(2, threshold, |rank, n| {
            let r = rank as f32;
            let mut a = [r + 1.0; 3];
            let mut b = [r + 10.0; 2];
            let mut c = [r; 4];
            let mut src = [r * 2.0; 5];
            let ha = n
                .submit(
                    Request::allreduce("allreduce.a", DType::F32, &[3], ReduceOp::Sum),
                    lend(&mut a),
                )
                .unwrap();
            let hb = n
                .submit(
                    Request::allreduce("allreduce.b", DType::F32, &[2], ReduceOp::Sum),
                    lend(&mut b),
                )
                .unwrap();
            let hc = n
                .submit(
                    Request {
                        kind: Kind::Broadcast,
                        op: None,
                        root: Some(1),
                        ..Request::allreduce("broadcast.c", DType::F32, &[4], ReduceOp::Sum)
                    },
                    lend(&mut c),
                )
                .unwrap();
            // An allgather only reads the lent buffer.
            let hg = n
                .submit(
                    Request {
                        kind: Kind::Allgather,
                        op: None,
                        ..Request::allreduce("allgather.g", DType::F32, &[5], ReduceOp::Sum)
                    },
                    lend(&mut src),
                )
                .unwrap();
            for h in [ha, hb, hc] {
                assert!(h.wait().unwrap().data.is_empty(), "the result is in place");
            }
            assert_eq!(
                back(&hg.wait().unwrap().data),
                vec![0., 0., 0., 0., 0., 2., 2., 2., 2., 2.]
            );
            assert_eq!(a, [3.0; 3], "threshold {threshold}");
            assert_eq!(b, [21.0; 2]);
            assert_eq!(c, [1.0; 4], "rank 1's buffer everywhere");
            assert_eq!(src, [r * 2.0; 5], "left as it was");
        });
    }
}

#[test]
fn an_operation_waits_for_every_rank_and_never_completes_inside_submit() {
    group(2, 0, |rank, n| {
        let r = Request::allreduce("allreduce.late", DType::F32, &[1], ReduceOp::Sum);
        if rank == 1 {
            std::thread::sleep(Duration::from_millis(200));
        }
        let h = n.submit(r, f32s(&[1.0])).unwrap();
        if rank == 0 {
            assert!(!h.poll(), "rank 1 has not submitted yet");
        }
        assert_eq!(back(&h.wait().unwrap().data), vec![2.0]);
    });
}

#[test]
fn scale_factors_allgather_and_broadcast() {
    group(2, 0, |rank, n| {
        let avg = Request {
            prescale: 2.0,
            postscale: 0.25,
            ..Request::allreduce("allreduce.avg", DType::F32, &[2], ReduceOp::Sum)
        };
        let h1 = n.submit(avg, f32s(&[1.0 + rank as f32; 2])).unwrap();
        // rank r contributes r+1 rows of 2
        let rows = rank as u64 + 1;
        let ag = Request {
            kind: Kind::Allgather,
            op: None,
            ..Request::allreduce("allgather.x", DType::F32, &[rows, 2], ReduceOp::Sum)
        };
        let h2 = n
            .submit(ag, f32s(&vec![rank as f32; rows as usize * 2]))
            .unwrap();
        let bc = Request {
            kind: Kind::Broadcast,
            op: None,
            root: Some(1),
            ..Request::allreduce("broadcast.y", DType::F32, &[2], ReduceOp::Sum)
        };
        let h3 = n.submit(bc, f32s(&[rank as f32 + 5.0; 2])).unwrap();
        // (1*2 + 2*2) * 0.25
        assert_eq!(back(&h1.wait().unwrap().data), vec![1.5; 2]);
        assert_eq!(
            back(&h2.wait().unwrap().data),
            vec![0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
        );
        assert_eq!(back(&h3.wait().unwrap().data), vec![6.0; 2]);
    });
}

#[test]
fn a_mismatch_fails_on_every_rank_and_later_operations_work() {
    group(3, 1 << 20, |rank, n| {
        let shape = if rank == 2 { [5] } else { [4] };
        let bad = Request::allreduce("allreduce.bad", DType::F32, &shape, ReduceOp::Sum);
        let h = n.submit(bad, f32s(&vec![1.0; shape[0] as usize])).unwrap();
        match h.wait() {
            Err(NegotiateError::Mismatch(m)) => {
                assert!(m.contains("shapes") && m.contains("rank 2"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        let ok = Request::allreduce("allreduce.ok", DType::F32, &[1], ReduceOp::Max);
        let h = n.submit(ok, f32s(&[rank as f32])).unwrap();
        assert_eq!(back(&h.wait().unwrap().data), vec![2.0]);
        // A duplicate pending name, and a buffer of the wrong size, are refused at once.
        let b = Request {
            kind: Kind::Barrier,
            op: None,
            shape: vec![],
            ..Request::allreduce("barrier.1", DType::F32, &[], ReduceOp::Sum)
        };
        let hb = n.submit(b.clone(), Vec::new()).unwrap();
        if rank == 0 {
            let e = n.submit(b, Vec::new()).unwrap_err();
            assert!(e.to_string().contains("already pending"), "{e}");
            let wrong = Request::allreduce("allreduce.w", DType::F32, &[3], ReduceOp::Sum);
            assert!(matches!(
                n.submit(wrong, vec![0; 4]),
                Err(NegotiateError::BadBuffer(_))
            ));
        }
        hb.wait().unwrap();
    });
}

#[test]
fn alltoall_with_splits_and_reducescatter_with_uneven_rows() {
    group(3, 0, |rank, n| {
        // Rank r sends (p + 1) rows of 2 to rank p, each row valued 10r + p.
        let splits: Vec<u64> = (0..3).map(|p| p + 1).collect();
        let rows: Vec<f32> = (0..3u64)
            .flat_map(|p| std::iter::repeat_n((10 * rank as u64 + p) as f32, 2 * (p as usize + 1)))
            .collect();
        let a2a = Request {
            kind: Kind::Alltoall,
            op: None,
            splits,
            ..Request::allreduce("alltoall.x", DType::F32, &[6, 2], ReduceOp::Sum)
        };
        let out = n.submit(a2a, f32s(&rows)).unwrap().wait().unwrap();
        // From each source p: rank + 1 rows valued 10p + rank.
        let want: Vec<f32> = (0..3u64)
            .flat_map(|p| std::iter::repeat_n((10 * p + rank as u64) as f32, 2 * (rank + 1)))
            .collect();
        assert_eq!(back(&out.data), want);
        assert_eq!(out.counts, vec![2 * (rank as u64 + 1); 3]);
        // 4 rows over 3 ranks: rank 0 gets 2, the others 1; sum then scaled by 0.5.
        let rs = Request {
            kind: Kind::Reducescatter,
            postscale: 0.5,
            ..Request::allreduce("reducescatter.y", DType::F32, &[4, 1], ReduceOp::Sum)
        };
        let out = n
            .submit(rs, f32s(&[1.0, 2.0, 3.0, 4.0]))
            .unwrap()
            .wait()
            .unwrap();
        let want: &[f32] = match rank {
            0 => &[1.5, 3.0],
            1 => &[4.5],
            _ => &[6.0],
        };
        assert_eq!(back(&out.data), want);
        // A split that does not fit fails on every rank.
        let bad = Request {
            kind: Kind::Alltoall,
            op: None,
            splits: if rank == 1 { vec![5, 5, 5] } else { vec![] },
            ..Request::allreduce("alltoall.bad", DType::F32, &[3, 1], ReduceOp::Sum)
        };
        match n.submit(bad, f32s(&[0.0; 3])).unwrap().wait() {
            Err(NegotiateError::Mismatch(m)) => assert!(m.contains("rank 1"), "{m}"),
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn a_name_one_rank_never_submits_fails_at_the_deadline_on_the_ranks_waiting() {
    let opts = Options {
        timeout: Some(Duration::from_millis(1000)),
        ..Options::default()
    };
    let comms = Communicator::in_memory(2, opts).unwrap();
    std::thread::scope(|s| {
        for (rank, comm) in comms.into_iter().enumerate() {
            s.spawn(move || {
                let n = Negotiator::start(std::sync::Arc::new(comm), Duration::from_millis(1), 0);
                if rank == 0 {
                    let r = Request::allreduce("allreduce.orphan", DType::F32, &[1], ReduceOp::Sum);
                    match n.submit(r, f32s(&[1.0])).unwrap().wait() {
                        Err(NegotiateError::Mismatch(m)) => {
                            assert!(m.contains("ranks [1] did not submit"), "{m}")
                        }
                        other => panic!("{other:?}"),
                    }
                }
                if rank == 1 {
                    // After rank 0's deadline for the orphan, well before its own for `next`.
                    std::thread::sleep(Duration::from_millis(1300));
                }
                // Later operations still work on both ranks.
                let r = Request::allreduce("allreduce.next", DType::F32, &[1], ReduceOp::Sum);
                assert_eq!(
                    back(&n.submit(r, f32s(&[1.0])).unwrap().wait().unwrap().data),
                    vec![2.0]
                );
                n.shutdown();
            });
        }
    });
}

/// Horovod's rule: one rank's shutdown ends the negotiation on every rank in the same cycle.
/// What another rank has pending fails at once (not at the stall deadline, here 60 s) naming
/// the rank that shut down, and so does what it submits later.
#[test]
fn one_ranks_shutdown_fails_the_others_pending_operations_at_once_naming_it() {
    let opts = Options {
        timeout: Some(Duration::from_secs(60)),
        ..Options::default()
    };
    let comms = Communicator::in_memory(3, opts).unwrap();
    std::thread::scope(|s| {
        for (rank, comm) in comms.into_iter().enumerate() {
            s.spawn(move || {
                let n = Negotiator::start(std::sync::Arc::new(comm), Duration::from_millis(1), 0);
                let r = Request::allreduce("allreduce.done", DType::F32, &[1], ReduceOp::Sum);
                assert_eq!(
                    back(&n.submit(r, f32s(&[1.0])).unwrap().wait().unwrap().data),
                    [3.0]
                );
                if rank == 2 {
                    n.shutdown();
                    return;
                }
                let t = std::time::Instant::now();
                let r = Request::allreduce("allreduce.left", DType::F32, &[1], ReduceOp::Sum);
                match n.submit(r, f32s(&[1.0])).unwrap().wait() {
                    Err(e @ NegotiateError::Shutdown(..)) => {
                        let m = e.to_string();
                        assert!(m.contains("allreduce.left") && m.contains("rank 2"), "{m}");
                    }
                    other => panic!("{other:?}"),
                }
                assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
                let r = Request::allreduce("allreduce.later", DType::F32, &[1], ReduceOp::Sum);
                match n.submit(r, f32s(&[1.0])) {
                    Err(e @ NegotiateError::Shutdown(..)) => {
                        assert!(e.to_string().contains("rank 2"))
                    }
                    other => panic!("{:?}", other.map(|_| ())),
                }
                n.shutdown();
            });
        }
    });
}

#[test]
fn a_joined_rank_contributes_zeros_until_every_rank_joined() {
    group(3, 1 << 20, |rank, n| {
        let join = || Request {
            kind: Kind::Join,
            op: None,
            shape: vec![],
            ..Request::allreduce("join", DType::U8, &[], ReduceOp::Sum)
        };
        if rank == 2 {
            // Rank 2 has no more data: it joins at once.
            let last = n.submit(join(), Vec::new()).unwrap().wait().unwrap();
            assert_eq!(last.counts, vec![1], "the same answer on every rank");
            return;
        }
        for step in 0..3 {
            let r = Request::allreduce(
                format!("allreduce.s{step}"),
                DType::F32,
                &[2],
                ReduceOp::Sum,
            );
            let out = n.submit(r, f32s(&[1.0, 2.0])).unwrap().wait().unwrap();
            assert_eq!(back(&out.data), vec![2.0, 4.0], "rank 2 adds zeros");
        }
        // An allgather needs every rank: with rank 2 joined it fails on the others.
        let ag = Request {
            kind: Kind::Allgather,
            op: None,
            ..Request::allreduce("allgather.g", DType::F32, &[1], ReduceOp::Sum)
        };
        match n.submit(ag, f32s(&[0.0])).unwrap().wait() {
            Err(NegotiateError::Mismatch(m)) => assert!(m.contains("[2] have joined"), "{m}"),
            other => panic!("{other:?}"),
        }
        if rank == 1 {
            std::thread::sleep(Duration::from_millis(100));
        }
        let last = n.submit(join(), Vec::new()).unwrap().wait().unwrap();
        assert_eq!(last.counts, vec![1], "rank 1 joined last");
    });
}

#[test]
fn cycle_marks_are_recorded_only_while_asked_and_in_order() {
    group(2, 0, |_, n| {
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(n.take_cycle_marks(), (Vec::new(), 0), "off by default");
        n.mark_cycles(true);
        std::thread::sleep(Duration::from_millis(50));
        let (marks, dropped) = n.take_cycle_marks();
        assert!(
            marks.len() >= 5,
            "{} cycles in 50 ms of 1 ms cycles",
            marks.len()
        );
        assert!(marks.windows(2).all(|w| w[0] <= w[1]), "{marks:?}");
        assert_eq!(dropped, 0);
        n.mark_cycles(false);
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(n.take_cycle_marks().0, Vec::<u64>::new());
    });
}

#[test]
fn bursts_larger_than_a_negotiation_slot_arrive_whole_on_every_rank() {
    // Rank r submits 150 names at once, long ones, in its own order, while rank 0 also
    // submits a few short ones alone: contributions far past the first slot (256 bytes) and
    // of different sizes per rank take the overflow round, then the grown slot; every
    // operation still completes with every rank's data.
    group(3, 1 << 20, |rank, n| {
        for round in 0..3 {
            let mut order: Vec<usize> = (0..150).collect();
            order.rotate_left(rank * 37);
            let handles: Vec<_> = order
                .iter()
                .map(|&i| {
                    let name = format!("allreduce.round{round}.a-rather-long-parameter-name.{i}");
                    let r = Request::allreduce(name, DType::F32, &[2], ReduceOp::Sum);
                    (i, n.submit(r, f32s(&[(rank + i) as f32; 2])).unwrap())
                })
                .collect();
            for (i, h) in handles {
                // (0 + i) + (1 + i) + (2 + i)
                assert_eq!(back(&h.wait().unwrap().data), vec![(3 + 3 * i) as f32; 2]);
            }
            let r = Request::allreduce(format!("small.{round}"), DType::F32, &[1], ReduceOp::Max);
            let h = n.submit(r, f32s(&[rank as f32])).unwrap();
            assert_eq!(back(&h.wait().unwrap().data), vec![2.0]);
        }
    });
}
