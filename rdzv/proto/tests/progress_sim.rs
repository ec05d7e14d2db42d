//! Members' summaries of their calls (`ClientMsg::Progress`) in the rendezvous machine: kept
//! per member for status and the hang diagnosis; out of bounds, refused with the reason.

mod sim;

use dt_rdzv_proto::native::hang::{FindingKind, HangOptions, diagnose};
use dt_rdzv_proto::native::progress::{CallState, GroupProgress, PendingCall, Progress};
use dt_rdzv_proto::native::{ClientMsg, JobSpec, RefusalCode, ServerMsg};
use sim::Sim;

fn pending(seq: u64) -> PendingCall {
    PendingCall {
        group: 0,
        group_size: 2,
        seq,
        op: "all_reduce".into(),
        state: CallState::Started,
        age_ms: 5_000,
        peer: None,
        waiting_for: vec![],
    }
}

#[test]
fn summaries_are_kept_and_oversized_ones_refused_with_the_reason() {
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(2);
    sim.join(0, "j", &spec, 1);
    sim.join(1, "j", &spec, 1);
    let ws = sim.welcomes([0, 1]);
    let rank = |c| ws[&c].rank;
    let round = ws[&0].round;

    // A thousand groups and a sequence number of 2^64 - 1.
    let huge = Progress {
        rank: rank(0),
        round,
        pending: vec![pending(u64::MAX)],
        groups: (0..1000)
            .map(|g| GroupProgress {
                group: g,
                group_size: 2,
                completed_seq: u64::MAX,
                completed_op: "x".into(),
                completed_age_ms: 0,
            })
            .collect(),
        idle_ms: None,
        calls: u64::MAX,
    };
    sim.send(0, ClientMsg::Progress(huge));
    let refused = sim.take(0);
    match &refused[..] {
        [ServerMsg::Refused { code, message }] => {
            assert_eq!(*code, RefusalCode::BadRequest);
            assert!(message.contains("1000 groups (at most 64)"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        sim.closed.is_empty(),
        "a refused summary does not cost the member its place"
    );

    // Member 0 waits in all_reduce seq 8; member 1 completed seq 7 and sleeps.
    let waiting = Progress {
        rank: rank(0),
        round,
        pending: vec![pending(8)],
        ..Progress::default()
    };
    let sleeping = Progress {
        rank: rank(1),
        round,
        groups: vec![GroupProgress {
            group: 0,
            group_size: 2,
            completed_seq: 7,
            completed_op: "all_reduce".into(),
            completed_age_ms: 5_000,
        }],
        idle_ms: Some(5_000),
        ..Progress::default()
    };
    sim.send(0, ClientMsg::Progress(waiting.clone()));
    sim.send(1, ClientMsg::Progress(sleeping));
    let status = sim.m.status(sim.now, Some("j")).expect("the job");
    let m0 = status[0].members.iter().find(|m| m.member == "m00000");
    assert_eq!(m0.and_then(|m| m.progress.clone()), Some(waiting));
    let report = diagnose(&status[0], &HangOptions::default());
    assert_eq!(report.findings[0].kind, FindingKind::Waiting);
    assert_eq!(report.findings[0].culprits, vec![rank(1)]);
}

/// `dtrun`'s agents are the job's members; their workers meet through a store and publish
/// their summaries there; the agents relay them (`ClientMsg::Relay`) and the diagnosis is of
/// the workers: ranks 0-2 wait in all_reduce seq 8 for rank 3, which sleeps.
#[test]
fn relayed_workers_are_diagnosed_and_bad_relays_refused() {
    use dt_rdzv_proto::native::{MAX_RELAYED, Relayed};

    let mut sim = Sim::new();
    let spec = JobSpec::fixed(2);
    sim.join(0, "j", &spec, 1);
    sim.join(1, "j", &spec, 1);
    let ws = sim.welcomes([0, 1]);
    let worker = |rank: u32, waiting: bool| Relayed {
        progress: Progress {
            rank,
            // The workers' own round numbering, whatever it is: read as the workers' world.
            round: 3,
            pending: if waiting {
                vec![PendingCall {
                    group_size: 4,
                    ..pending(8)
                }]
            } else {
                vec![]
            },
            groups: vec![GroupProgress {
                group: 0,
                group_size: 4,
                completed_seq: 7,
                completed_op: "all_reduce".into(),
                completed_age_ms: 5_000,
            }],
            idle_ms: (!waiting).then_some(5_000),
            ..Progress::default()
        },
        age_ms: 300,
    };
    // Node 0's agent relays ranks 0 and 1, node 1's ranks 2 and 3.
    let node = |c: u64| if ws[&c].rank == 0 { [0, 1] } else { [2, 3] };
    for c in [0, 1] {
        let workers = node(c).map(|r| worker(r, r != 3)).to_vec();
        sim.send(c, ClientMsg::Relay { world: 4, workers });
        assert!(sim.take(c).is_empty(), "taken without a word");
    }
    let status = sim.m.status(sim.now, Some("j")).expect("the job");
    assert_eq!(status[0].workers.len(), 4);
    assert_eq!(status[0].workers_world, 4);
    assert_eq!(status[0].members.len(), 2, "the agents stay the members");
    let report = diagnose(&status[0], &HangOptions::default());
    assert_eq!(report.findings[0].kind, FindingKind::Waiting);
    assert_eq!(report.findings[0].culprits, vec![3]);
    assert_eq!(report.findings[0].waiters, vec![0, 1, 2]);
    assert!(
        report.findings[0].words.contains("rank 3"),
        "{}",
        report.findings[0].words
    );
    // The timeline's sampler sees the workers too, as of their world (round 0).
    let views = sim.m.progress();
    let mut ranks: Vec<u32> = views[0].ranks.iter().map(|(r, _)| *r).collect();
    ranks.sort_unstable();
    assert_eq!(
        (views[0].round, views[0].world, ranks),
        (0, 4, vec![0, 1, 2, 3])
    );
    assert!(
        views[0]
            .ranks
            .iter()
            .all(|(_, p)| p.is_some_and(|p| p.round == 0))
    );

    // Out of bounds: refused with the reason, the member keeps its place and its last relay.
    for (workers, why) in [
        (vec![worker(4, true)], "rank 4 in a world of 4"),
        (vec![worker(0, true), worker(0, true)], "rank 0 twice"),
        (
            (0..=MAX_RELAYED as u32).map(|r| worker(r, true)).collect(),
            "257 workers (at most 256)",
        ),
    ] {
        sim.send(0, ClientMsg::Relay { world: 4, workers });
        match &sim.take(0)[..] {
            [ServerMsg::Refused { code, message }] => {
                assert_eq!(*code, RefusalCode::BadRequest);
                assert!(message.contains(why), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(sim.closed.is_empty());
    let status = sim.m.status(sim.now, Some("j")).expect("the job");
    assert_eq!(status[0].workers.len(), 4);
    // A relay from a connection that has not joined is refused and closed.
    sim.send(
        9,
        ClientMsg::Relay {
            world: 4,
            workers: vec![],
        },
    );
    assert!(sim.closed.contains_key(&9));
}
