//! The flight recorder (`dtcomm::flight`) over real calls of in-memory communicators: what it
//! records of collectives, point to point, asynchronous calls and subsets; a hang seen live in
//! the summary (the waiters name the rank they wait for, which says it is idle); the dump in
//! Flight Recorder's format. One test: the recorder is the process's, shared by all threads.

use std::time::{Duration, Instant};

use dtcomm::flight::{self, CallState, WORLD_GROUP};
use dtcomm::{Communicator, Options, ReduceOp};

fn group(world: usize, opts: Options, body: impl Fn(usize, &Communicator) + Sync) {
    let comms = Communicator::in_memory(world, opts).unwrap();
    std::thread::scope(|s| {
        for (rank, comm) in comms.into_iter().enumerate() {
            let body = &body;
            s.spawn(move || body(rank, &comm));
        }
    });
}

fn of_rank(rank: u32) -> Vec<flight::Entry> {
    flight::entries()
        .into_iter()
        .filter(|e| e.info.rank == rank)
        .collect()
}

#[test]
fn calls_are_recorded_and_a_hang_is_seen_live() {
    assert!(flight::enabled());
    assert_eq!(flight::capacity(), 2000);
    group(3, Options::default(), |rank, c| {
        let mut v = [1.0f32; 4];
        for _ in 0..3 {
            c.all_reduce(&mut v, ReduceOp::Sum).unwrap();
        }
        if rank < 2 {
            let mut b = [0u8; 8];
            if rank == 0 {
                c.send(&b, 1).unwrap();
            } else {
                c.recv(&mut b, 0).unwrap();
            }
        }
        c.all_reduce_async(vec![0i64; 3], ReduceOp::Sum)
            .wait()
            .unwrap();
        let sub = c.subset(&[2, 0], "evens").unwrap();
        if let Some(s) = sub {
            assert_ne!(s.flight_group(), WORLD_GROUP);
            assert_eq!(s.global_rank(0), 2);
            s.barrier().unwrap();
            s.shutdown();
        }
    });
    let e0 = of_rank(0);
    let colls: Vec<_> = e0
        .iter()
        .filter(|e| e.info.group == WORLD_GROUP && !e.info.p2p)
        .collect();
    // 3 all_reduce, the async one, the subset's two all_gathers.
    assert_eq!(colls.len(), 6, "{colls:#?}");
    let seqs: Vec<u64> = colls.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6]);
    assert!(colls.iter().all(|e| e.state == CallState::Completed));
    assert_eq!(colls[0].info.op, "all_reduce");
    assert_eq!((colls[0].info.in_count, colls[0].info.group_size), (4, 3));
    assert_eq!(colls[3].info.dtype, dtcomm::DType::I64);
    assert!(colls[3].time_started_ns.unwrap() >= colls[3].time_queued_ns);
    let send = e0.iter().find(|e| e.info.op == "send").unwrap();
    assert_eq!(
        (send.info.peer, send.seq, send.info.p2p),
        (Some(1), 1, true)
    );
    let recv = of_rank(1)
        .into_iter()
        .find(|e| e.info.op == "recv")
        .unwrap();
    assert_eq!((recv.info.peer, recv.seq), (Some(0), 1));
    let barrier = |r: u32| {
        of_rank(r)
            .into_iter()
            .find(|e| e.info.op == "barrier")
            .unwrap()
    };
    let (b0, b2) = (barrier(0), barrier(2));
    assert_eq!(
        b0.info.group, b2.info.group,
        "the subgroup's id is the same on its members"
    );
    assert_eq!((b0.info.group_rank, b2.info.group_rank), (1, 0));
    assert!(of_rank(1).iter().all(|e| e.info.op != "barrier"));
    let p = flight::summary(0, 1);
    assert!(p.pending.is_empty());
    assert!(p.idle_ms.is_some());
    assert_eq!(p.groups.len(), 2);
    assert_eq!(p.groups[0].group, WORLD_GROUP);
    assert_eq!(p.groups[0].completed_seq, 6);

    // A hang: ranks 0 and 1 wait in all_reduce, rank 2 makes no call.
    let opts = Options {
        timeout: Some(Duration::from_secs(3)),
        ..Options::default()
    };
    let before = flight::summary(2, 1).calls;
    group(3, opts, |rank, c| {
        let mut v = [1.0f32; 2];
        c.all_reduce(&mut v, ReduceOp::Sum).unwrap();
        if rank == 2 {
            // Watch the others wait, as heartbeats would tell the server: each names the peers
            // its current step waits for (rank 0 may wait for rank 1, which waits for this
            // one), and this rank says it is in no call, one collective behind.
            let start = Instant::now();
            loop {
                let waiters: Vec<_> = (0..2).map(|r| flight::summary(r, 1)).collect();
                if waiters.iter().all(|p| {
                    p.pending
                        .first()
                        .is_some_and(|c| c.seq == 2 && !c.waiting_for.is_empty())
                }) && waiters
                    .iter()
                    .any(|p| p.pending[0].waiting_for.contains(&2))
                {
                    let mine = flight::summary(2, 1);
                    assert!(mine.pending.is_empty());
                    assert!(mine.idle_ms.is_some());
                    assert_eq!(mine.groups[0].completed_seq, 1);
                    assert_eq!(waiters[0].pending[0].op, "all_reduce");
                    assert_eq!(waiters[0].pending[0].state, CallState::Started);
                    break;
                }
                assert!(start.elapsed() < Duration::from_secs(2), "{waiters:#?}");
                std::thread::sleep(Duration::from_millis(20));
            }
        } else {
            c.all_reduce(&mut v, ReduceOp::Sum).unwrap_err();
        }
    });
    assert_eq!(flight::summary(2, 1).calls, before + 1);
    let failed = of_rank(0)
        .into_iter()
        .rfind(|e| e.info.op == "all_reduce")
        .unwrap();
    assert_eq!((failed.state, failed.seq), (CallState::Failed, 2));
    assert!(!failed.waiting_for.is_empty());
    let (bytes, n) = flight::dump_bytes(Some(0));
    assert_eq!(n, of_rank(0).len());
    assert!(bytes.starts_with(b"\x80\x02}") && bytes.ends_with(b"."));
}
