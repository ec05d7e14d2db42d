//! The negotiation core alone: names complete when every rank submitted them (in any order),
//! mismatches become errors for everyone and later names still work, duplicates are refused,
//! ready allreduces fuse up to the threshold.

use dtcomm::negotiate::{Coordinator, DEFAULT_FUSION_THRESHOLD, Kind, Request, Response};
use dtcomm::{DType, ReduceOp};
use proptest::prelude::*;

fn ar(name: &str, n: u64) -> Request {
    Request::allreduce(name, DType::F32, &[n], ReduceOp::Sum)
}

fn names(r: &Response) -> Vec<&str> {
    match r {
        Response::Run { names, .. } => names.iter().map(String::as_str).collect(),
        Response::Error { name, .. } => vec![name.as_str()],
    }
}

#[test]
fn operations_complete_when_every_rank_submitted_them_not_in_submission_order() {
    let mut c = Coordinator::new(2, 0);
    c.submit(0, ar("allreduce.a", 4)).unwrap();
    c.submit(0, ar("allreduce.b", 4)).unwrap();
    c.submit(1, ar("allreduce.b", 4)).unwrap();
    let first = c.cycle();
    assert_eq!(
        first.iter().map(names).collect::<Vec<_>>(),
        vec![vec!["allreduce.b"]]
    );
    assert_eq!(c.missing("allreduce.a"), vec![1]);
    c.submit(1, ar("allreduce.a", 4)).unwrap();
    assert_eq!(
        c.cycle().iter().map(names).collect::<Vec<_>>(),
        vec![vec!["allreduce.a"]]
    );
    assert_eq!(c.pending(), 0);
}

#[test]
fn a_barrier_completes_while_an_unrelated_operation_is_pending() {
    let barrier = |r: u32| Request {
        kind: Kind::Barrier,
        shape: vec![],
        op: None,
        ..ar(&format!("barrier.{}", r - r), 0)
    };
    let mut c = Coordinator::new(3, DEFAULT_FUSION_THRESHOLD);
    c.submit(0, ar("allreduce.slow", 8)).unwrap();
    for r in 0..3 {
        c.submit(r, barrier(r)).unwrap();
    }
    let out = c.cycle();
    assert_eq!(out.len(), 1);
    assert!(matches!(
        &out[0],
        Response::Run {
            kind: Kind::Barrier,
            ..
        }
    ));
    assert_eq!(c.missing("allreduce.slow"), vec![1, 2]);
}

#[test]
fn a_mismatch_is_an_error_naming_both_ranks_and_later_names_still_work() {
    let mut c = Coordinator::new(3, DEFAULT_FUSION_THRESHOLD);
    c.submit(0, ar("allreduce.x", 4)).unwrap();
    c.submit(1, ar("allreduce.x", 4)).unwrap();
    c.submit(
        2,
        Request::allreduce("allreduce.x", DType::I32, &[4], ReduceOp::Sum),
    )
    .unwrap();
    for r in 0..3 {
        c.submit(r, ar("allreduce.y", 4)).unwrap();
    }
    let out = c.cycle();
    assert_eq!(out.len(), 2, "{out:?}");
    match &out[0] {
        Response::Error { name, message } => {
            assert_eq!(name, "allreduce.x");
            assert!(
                message.contains("data types")
                    && message.contains("rank 0")
                    && message.contains("rank 2"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(names(&out[1]), vec!["allreduce.y"]);
    // Scale factors, shapes, roots and ops are checked too.
    let mut c = Coordinator::new(2, 0);
    c.submit(
        0,
        Request {
            postscale: 0.5,
            ..ar("allreduce.s", 4)
        },
    )
    .unwrap();
    c.submit(1, ar("allreduce.s", 4)).unwrap();
    c.submit(0, ar("allreduce.shape", 4)).unwrap();
    c.submit(1, ar("allreduce.shape", 5)).unwrap();
    let msgs: Vec<String> = c
        .cycle()
        .into_iter()
        .map(|r| match r {
            Response::Error { message, .. } => message,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(
        msgs[0].contains("postscale") && msgs[1].contains("shapes"),
        "{msgs:?}"
    );
}

#[test]
fn allgather_shapes_may_differ_in_the_first_dimension_only() {
    let ag = |n: u64, m: u64| Request {
        kind: Kind::Allgather,
        op: None,
        shape: vec![n, m],
        ..ar("allgather.t", 0)
    };
    let mut c = Coordinator::new(2, 0);
    c.submit(0, ag(3, 4)).unwrap();
    c.submit(1, ag(5, 4)).unwrap();
    assert!(matches!(c.cycle()[0], Response::Run { .. }));
    c.submit(0, ag(3, 4)).unwrap();
    c.submit(1, ag(3, 5)).unwrap();
    assert!(matches!(c.cycle()[0], Response::Error { .. }));
}

#[test]
fn a_duplicate_pending_name_is_refused_and_the_first_kept() {
    let mut c = Coordinator::new(2, 0);
    c.submit(0, ar("allreduce.d", 4)).unwrap();
    let e = c.submit(0, ar("allreduce.d", 8)).unwrap_err();
    assert_eq!((e.rank, e.name.as_str()), (0, "allreduce.d"));
    assert!(e.to_string().contains("already pending"));
    c.submit(1, ar("allreduce.d", 4)).unwrap();
    assert!(matches!(c.cycle()[0], Response::Run { bytes: 16, .. }));
    // Once answered, the name may be used again.
    c.submit(0, ar("allreduce.d", 4)).unwrap();
}

#[test]
fn ready_allreduces_fuse_up_to_the_threshold_and_only_with_their_kind() {
    let mut c = Coordinator::new(2, 64);
    for r in 0..2 {
        for i in 0..5 {
            c.submit(r, ar(&format!("allreduce.g{i}"), 4)).unwrap(); // 16 bytes each
        }
        c.submit(
            r,
            Request::allreduce("allreduce.h", DType::F64, &[2], ReduceOp::Sum),
        )
        .unwrap();
        c.submit(
            r,
            Request {
                kind: Kind::Broadcast,
                op: None,
                root: Some(0),
                ..ar("broadcast.b", 4)
            },
        )
        .unwrap();
    }
    let out = c.cycle();
    let groups: Vec<Vec<&str>> = out.iter().map(names).collect();
    assert_eq!(
        groups,
        vec![
            vec![
                "allreduce.g0",
                "allreduce.g1",
                "allreduce.g2",
                "allreduce.g3"
            ],
            vec!["allreduce.g4"],
            vec!["allreduce.h"],
            vec!["broadcast.b"],
        ]
    );
    let mut c = Coordinator::new(1, 0);
    c.submit(0, ar("allreduce.a", 1)).unwrap();
    c.submit(0, ar("allreduce.b", 1)).unwrap();
    assert_eq!(c.cycle().len(), 2, "threshold 0: no fusion");
}

proptest! {
    /// Each rank submits the same names in its own order, with cycles at random points: every
    /// name is answered exactly once, and each fused group fits the threshold (or is alone).
    #[test]
    fn every_name_is_answered_once_whatever_the_interleaving(
        sizes in proptest::collection::vec(1u64..40, 1..12),
        world in 1u32..5,
        seed in any::<u64>(),
        threshold in prop_oneof![Just(0u64), 16u64..400],
    ) {
        let mut c = Coordinator::new(world, threshold);
        let mut orders: Vec<Vec<usize>> = (0..world)
            .map(|r| {
                let mut o: Vec<usize> = (0..sizes.len()).collect();
                let mut x = seed ^ (u64::from(r) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                for i in (1..o.len()).rev() {
                    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                    o.swap(i, (x % (i as u64 + 1)) as usize);
                }
                o
            })
            .collect();
        let mut answered: Vec<String> = Vec::new();
        let mut step = seed;
        while orders.iter().any(|o| !o.is_empty()) {
            step = step.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let r = (step >> 33) as usize % world as usize;
            if let Some(i) = orders[r].pop() {
                c.submit(r as u32, ar(&format!("allreduce.t{i}"), sizes[i])).unwrap();
            }
            if (step >> 40) % 3 == 0 {
                for resp in c.cycle() {
                    if let Response::Run { names, bytes, .. } = &resp {
                        prop_assert!(names.len() == 1 || *bytes <= threshold);
                    }
                    answered.extend(names(&resp).into_iter().map(str::to_owned));
                }
            }
        }
        for resp in c.cycle() {
            answered.extend(names(&resp).into_iter().map(str::to_owned));
        }
        answered.sort();
        let mut want: Vec<String> = (0..sizes.len()).map(|i| format!("allreduce.t{i}")).collect();
        want.sort();
        prop_assert_eq!(answered, want);
        prop_assert_eq!(c.pending(), 0);
    }
}

#[test]
fn a_name_some_ranks_never_submit_fails_after_the_stall_limit_naming_them() {
    let mut c = Coordinator::new(3, 0).with_stall_cycles(5);
    c.submit(0, ar("allreduce.lonely", 4)).unwrap();
    c.submit(2, ar("allreduce.lonely", 4)).unwrap();
    for _ in 0..4 {
        assert!(c.cycle().is_empty());
    }
    let out = c.cycle();
    match &out[..] {
        [Response::Error { name, message }] => {
            assert_eq!(name, "allreduce.lonely");
            assert!(
                message.contains("ranks [1] did not submit")
                    && message.contains("ranks [0, 2] did"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.pending(), 0);
}

/// A join that fails at the stall deadline leaves its ranks unjoined: a barrier or allreduce
/// the others submit afterwards waits for them again (found by Horovod's
/// `test_horovod_join_allgather` at world 3, where the failed join let one rank's barrier
/// complete alone and the ranks fell out of step for the rest of the suite).
#[test]
fn a_failed_join_leaves_nobody_joined() {
    let only = |kind: Kind, name: &str| Request {
        kind,
        shape: vec![],
        op: None,
        ..ar(name, 0)
    };
    let mut c = Coordinator::new(3, 0).with_stall_cycles(3);
    c.submit(1, only(Kind::Join, "join")).unwrap();
    let mut out = Vec::new();
    for _ in 0..3 {
        out.extend(c.cycle());
    }
    assert!(
        matches!(&out[..], [Response::Error { name, .. }] if name == "join"),
        "{out:?}"
    );
    c.submit(0, only(Kind::Barrier, "barrier.noname")).unwrap();
    c.submit(2, only(Kind::Barrier, "barrier.noname")).unwrap();
    assert!(c.cycle().is_empty(), "the barrier ran without rank 1");
    c.submit(1, only(Kind::Barrier, "barrier.noname")).unwrap();
    assert!(matches!(
        &c.cycle()[..],
        [Response::Run {
            kind: Kind::Barrier,
            ..
        }]
    ));
}

#[test]
fn early_cycles_answer_ready_names_but_do_not_bring_the_stall_deadline_closer() {
    let mut c = Coordinator::new(2, 0).with_stall_cycles(2);
    c.submit(0, ar("allreduce.x", 4)).unwrap();
    // A waiter woke the cycle thread early, many times: rank 1 is not late by those.
    for _ in 0..10 {
        assert!(c.early_cycle().is_empty());
    }
    c.submit(0, ar("allreduce.y", 4)).unwrap();
    c.submit(1, ar("allreduce.y", 4)).unwrap();
    match &c.early_cycle()[..] {
        [Response::Run { names, .. }] => assert_eq!(names, &["allreduce.y"]),
        other => panic!("{other:?}"),
    }
    assert!(c.cycle().is_empty(), "one cycle of two");
    match &c.cycle()[..] {
        [Response::Error { name, message }] => {
            assert_eq!(name, "allreduce.x");
            assert!(message.contains("ranks [1] did not submit it"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
