//! Errors, not hangs: mismatched calls, deadlines naming the missing rank, a peer that left,
//! and the failed state, over the in-memory transport and over TCP between threads.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::on_ranks;
use dt_rdzv::store::MemoryStore;
use dtcomm::{CommError, Communicator, LinkKind, OpKind, Options, ReduceOp};

fn opts(timeout_ms: u64) -> Options {
    Options {
        timeout: Some(Duration::from_millis(timeout_ms)),
        spin_us: Some(20),
        ..Options::default()
    }
}

/// Threads of one process are ranks of one host: TCP links only when asked for.
fn tcp_group(world: usize, o: Options) -> Vec<Communicator> {
    let store = Arc::new(MemoryStore::new());
    let o = Options {
        socket_ifname: Some("lo".into()),
        transport: Some(LinkKind::Tcp),
        ..o
    };
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let (store, o) = (store.clone(), o.clone());
                s.spawn(move || Communicator::new(store, r, world, o).unwrap())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Every rank of a mismatched allreduce (rank 1 passes 101 elements, the others 100) fails
/// with the mismatch's code, and the message names both calls.
fn mismatched_counts(comms: Vec<Communicator>) {
    let start = Instant::now();
    let errs = on_ranks(&comms, |c| {
        let mut v = vec![1f32; 100 + usize::from(c.rank() == 1)];
        let e = c.all_reduce(&mut v, ReduceOp::Sum).unwrap_err();
        // A failed communicator answers every later call with the original error, at once.
        let later = c.barrier().unwrap_err();
        match &later {
            CommError::Failed(inner) => assert_eq!(inner.to_string(), e.to_string()),
            other => panic!("later call: {other}"),
        }
        e
    });
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "mismatch must fail fast, not at the deadline"
    );
    for e in &errs {
        let text = e.to_string();
        assert!(
            text.contains("all_reduce(seq 0, float x 100, sum)")
                && text.contains("all_reduce(seq 0, float x 101, sum)"),
            "error must name both calls: {text}"
        );
        assert!(
            matches!(e, CommError::Mismatch { .. } | CommError::Aborted { .. }),
            "{e:?}"
        );
        // Bystanders (told by a peer) carry the mismatch's code too, not a lost peer's.
        assert_eq!(e.code(), dtcomm::ErrorCode::Mismatch, "{e}");
    }
    assert!(errs.iter().any(|e| matches!(e, CommError::Mismatch { .. })));
}

#[test]
fn mismatched_calls_fail_fast_mem() {
    mismatched_counts(Communicator::in_memory(2, opts(60_000)).unwrap());
}

/// Shared memory between the ranks (the threads of one process share a segment).
fn shm_group(world: usize, o: Options) -> Vec<Communicator> {
    let o = Options {
        transport: Some(LinkKind::Shm),
        ..o
    };
    Communicator::in_memory(world, o).unwrap()
}

#[test]
fn mismatched_calls_fail_fast_shm() {
    mismatched_counts(shm_group(2, opts(60_000)));
    mismatched_counts(shm_group(4, opts(60_000)));
}

#[test]
fn mismatched_calls_fail_fast_tcp() {
    mismatched_counts(tcp_group(2, opts(60_000)));
}

#[test]
fn bystanders_of_a_mismatch_get_the_mismatch_not_a_lost_peer() {
    mismatched_counts(tcp_group(4, opts(60_000)));
}

#[test]
fn mismatched_ops_name_both_ranks_and_calls() {
    let comms = tcp_group(3, opts(60_000));
    let errs = on_ranks(&comms, |c| {
        let mut v = vec![1i64; 8];
        if c.rank() == 1 {
            c.broadcast(&mut v, 1)
                .and_then(|_| c.barrier())
                .unwrap_err()
        } else {
            c.all_reduce(&mut v, ReduceOp::Max)
                .and_then(|_| c.barrier())
                .unwrap_err()
        }
    });
    let mismatch = errs
        .iter()
        .find_map(|e| match e.root_cause() {
            CommError::Mismatch {
                rank,
                peer,
                ours,
                theirs,
            } => Some((*rank, *peer, *ours, *theirs)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("someone saw the mismatch: {errs:#?}"));
    let ops = [mismatch.2.op, mismatch.3.op];
    assert!(
        ops.contains(&OpKind::Broadcast) && ops.contains(&OpKind::AllReduce),
        "{mismatch:?}"
    );
    assert_ne!(mismatch.0, mismatch.1);
    // The broadcasting rank only sends, so its broadcast may complete; then its next call is
    // the one that mismatches (one call ahead, which the sequence numbers show).
    let all: String = errs
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        all.contains("broadcast(seq 0, int64 x 8, root 1)") || all.contains("barrier(seq 1"),
        "{all}"
    );
    for e in &errs {
        assert!(
            matches!(
                e.root_cause(),
                CommError::Mismatch { .. } | CommError::Aborted { .. }
            ),
            "{e}"
        );
    }
}

#[test]
fn deadline_names_the_rank_not_heard_from() {
    for comms in [
        Communicator::in_memory(3, opts(1500)).unwrap(),
        tcp_group(3, opts(1500)),
        shm_group(3, opts(1500)),
    ] {
        let start = Instant::now();
        let errs = on_ranks(&comms[..2], |c| {
            let mut v = vec![1f32; 1000];
            c.all_reduce(&mut v, ReduceOp::Sum).unwrap_err()
        });
        assert!(start.elapsed() < Duration::from_secs(30));
        for e in &errs {
            let named = match e {
                CommError::Timeout {
                    waiting_for,
                    suspects,
                    call,
                    ..
                } => {
                    assert_eq!(call.op, OpKind::AllReduce);
                    waiting_for.contains(&2) || **suspects == [2]
                }
                CommError::Aborted { reason, .. } => {
                    reason.contains("not heard from ranks [2]")
                        || reason.contains("ranks [2] appear not to have entered")
                }
                other => panic!("unexpected {other}"),
            };
            assert!(named, "error must name rank 2: {e}");
        }
        drop(comms);
    }
}

#[test]
fn a_peer_that_left_is_named() {
    for mut comms in [
        Communicator::in_memory(2, opts(60_000)).unwrap(),
        tcp_group(2, opts(60_000)),
        shm_group(2, opts(60_000)),
    ] {
        drop(comms.pop());
        let c = &comms[0];
        let mut v = vec![1f32; 100_000];
        let e = c.all_reduce(&mut v, ReduceOp::Sum).unwrap_err();
        match &e {
            CommError::PeerLost {
                peer, call, detail, ..
            } => {
                assert_eq!(*peer, 1);
                assert_eq!(call.seq, 0);
                assert!(
                    detail.contains("goodbye") || detail.contains("closed"),
                    "{detail}"
                );
            }
            other => panic!("unexpected {other}"),
        }
    }
}

#[test]
fn setup_deadline_names_missing_ranks() {
    let store = Arc::new(MemoryStore::new());
    let o = Options {
        socket_ifname: Some("lo".into()),
        ..opts(800)
    };
    let e = Communicator::new(store, 0, 3, o).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("[\"1\", \"2\"]"), "{text}");
}

/// Ranks 0 and 1 wait in an allreduce that rank 2 never enters (a frozen host: no reset, no
/// goodbye); the membership service's word through their round fences fails it within the
/// fence's poll, long before the 60 s deadline, naming the lost rank and the round; the next
/// call fails at once. A fence that ended before a call fails that call before it sends.
fn fence_ends_a_stuck_call(comms: Vec<Communicator>) {
    let fences: Vec<_> = comms.iter().map(|c| c.fence()).collect();
    for f in &fences {
        f.arm();
    }
    let ended = std::thread::scope(|s| {
        let hs: Vec<_> = comms[..2]
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let mut v = vec![1f32; 1000];
                    let t = Instant::now();
                    let e = c.all_reduce(&mut v, ReduceOp::Sum).unwrap_err();
                    (e, t.elapsed(), c.barrier().unwrap_err())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        for f in &fences[..2] {
            f.end(dtcomm::RoundEnd {
                round: 7,
                lost: Some(2),
                why: "member \"m2\" (rank 2) lost: no message for 2.0 s".into(),
                removed: false,
            });
        }
        let at = Instant::now();
        let out: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        (out, at.elapsed())
    });
    let (out, after_end) = ended;
    assert!(after_end < Duration::from_secs(10), "{after_end:?}");
    for (r, (e, took, again)) in out.into_iter().enumerate() {
        match &e {
            CommError::RoundEnded {
                rank,
                round: 7,
                lost: Some(2),
                call,
                removed: false,
                ..
            } => {
                assert_eq!((*rank, call.op, call.seq), (r, OpKind::AllReduce, 0));
            }
            // A rank may hear the other's abort first: it still names the lost rank.
            CommError::Aborted { lost: Some(2), .. } => {}
            other => panic!("rank {r}: unexpected {other}"),
        }
        let text = e.to_string();
        assert!(
            text.contains("rank 2") || text.contains("lost rank 2"),
            "{text}"
        );
        assert!(took >= Duration::from_millis(250), "{took:?}");
        assert!(matches!(again, CommError::Failed(_)), "{again}");
        assert_eq!(
            e.code(),
            if matches!(e, CommError::RoundEnded { .. }) {
                dtcomm::ErrorCode::RoundEnded
            } else {
                dtcomm::ErrorCode::Aborted
            }
        );
    }
    // Rank 2, told before it calls: fails at once, sending nothing.
    fences[2].end(dtcomm::RoundEnd {
        round: 7,
        lost: None,
        why: "job \"j\" ended: stopped".into(),
        removed: true,
    });
    let t = Instant::now();
    let e = comms[2].barrier().unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(1));
    assert!(
        matches!(&e, CommError::RoundEnded { removed: true, .. })
            && e.to_string().contains("removed from round 7"),
        "{e}"
    );
}

#[test]
fn the_round_fence_ends_a_stuck_call_mem() {
    fence_ends_a_stuck_call(Communicator::in_memory(3, opts(60_000)).unwrap());
}

#[test]
fn the_round_fence_ends_a_stuck_call_shm() {
    fence_ends_a_stuck_call(shm_group(3, opts(60_000)));
}

#[test]
fn the_round_fence_ends_a_stuck_call_tcp() {
    fence_ends_a_stuck_call(tcp_group(3, opts(60_000)));
}
