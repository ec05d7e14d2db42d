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
