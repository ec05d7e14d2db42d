//! Data-plane reports on a virtual clock: a report about a member that does not answer the
//! probe ends the round well before the heartbeat timeout; a report about a member that answers
//! evicts nobody; floods, self-reports, stale rounds and strangers are bounded or refused.

mod sim;

use std::time::Duration;

use dt_rdzv_proto::native::{ClientMsg, JobSpec, RefusalCode, RoundCause, ServerMsg};
use dt_rdzv_proto::rendezvous::{Event, ReportVerdict};
use sim::{Sim, check_round};

const MS: Duration = Duration::from_millis(1);

/// Three members of job "j" (2 to 3 members) in round 1 (conn c has rank c).
fn running() -> Sim {
    let mut sim = Sim::new();
    let spec = JobSpec::elastic(2, 3);
    for c in 0..3 {
        sim.join(c, "j", &spec, 1);
    }
    let ws = sim.welcomes(0..3);
    assert_eq!(check_round(&ws, 3), 1);
    sim.clear();
    sim
}

fn report(sim: &mut Sim, from: u64, round: u64, rank: u32) {
    sim.send(
        from,
        ClientMsg::Report {
            round,
            rank,
            evidence: format!("rank {from}: connection reset by rank {rank}"),
        },
    );
}

fn probe_nonce(msgs: &[ServerMsg]) -> Option<u64> {
    msgs.iter().find_map(|m| match m {
        ServerMsg::Probe { nonce } => Some(*nonce),
        _ => None,
    })
}

fn verdicts(sim: &Sim) -> Vec<ReportVerdict> {
    sim.events
        .iter()
        .filter_map(|e| match e {
            Event::Reported { verdict, .. } => Some(*verdict),
            _ => None,
        })
        .collect()
}

#[test]
fn a_reported_member_that_does_not_answer_is_lost_after_the_probe_timeout() {
    let mut sim = running();
    report(&mut sim, 0, 1, 2);
    assert!(probe_nonce(&sim.take(2)).is_some(), "the suspect is probed");
    sim.advance_with_heartbeats(299 * MS, &[0, 1]);
    assert!(!sim.closed.contains_key(&2), "not before the probe timeout");
    sim.advance_with_heartbeats(2 * MS, &[0, 1]);
    let why = sim.closed.get(&2).expect("lost at the probe timeout");
    assert!(
        why.contains("liveness probe") && why.contains("m00000"),
        "{why}"
    );
    let ended = sim.take(0);
    let cause = ended.iter().find_map(|m| match m {
        ServerMsg::RoundEnded {
            round: 1, cause, ..
        } => Some(cause.clone()),
        _ => None,
    });
    assert!(
        matches!(&cause, Some(RoundCause::MemberLost { rank: 2, why, .. }) if why.contains("reset")),
        "{cause:?}"
    );
    // The next round forms from the survivors at once.
    let w = ended.iter().find_map(|m| match m {
        ServerMsg::Welcome(w) => Some(w.clone()),
        _ => None,
    });
    assert!(matches!(w, Some(w) if w.round == 2 && w.world == 2));
    assert_eq!(
        verdicts(&sim),
        [ReportVerdict::Probing, ReportVerdict::Confirmed]
    );
    assert_eq!(sim.m.stats().probes_confirmed, 1);
}

#[test]
fn a_false_report_evicts_nobody() {
    let mut sim = running();
    report(&mut sim, 0, 1, 2);
    let nonce = probe_nonce(&sim.take(2)).unwrap();
    // A wrong nonce is no answer.
    sim.send(2, ClientMsg::Alive { nonce: nonce ^ 1 });
    sim.advance(100 * MS);
    sim.send(2, ClientMsg::Alive { nonce });
    sim.advance_with_heartbeats(Duration::from_secs(5), &[0, 1, 2]);
    assert!(sim.closed.is_empty(), "{:?}", sim.closed);
    assert!(
        !sim.take(0)
            .iter()
            .any(|m| matches!(m, ServerMsg::RoundEnded { .. })),
        "the round goes on"
    );
    assert_eq!(
        verdicts(&sim),
        [ReportVerdict::Probing, ReportVerdict::Dismissed]
    );
    assert_eq!(sim.m.stats().probes_dismissed, 1);
}

#[test]
fn a_flood_of_reports_sends_one_probe_and_then_none_for_a_while() {
    let mut sim = running();
    for _ in 0..10_000 {
        report(&mut sim, 0, 1, 2);
        report(&mut sim, 1, 1, 2);
    }
    let msgs = sim.take(2);
    assert_eq!(msgs.len(), 1, "one probe for 20000 reports");
    let nonce = probe_nonce(&msgs).unwrap();
    sim.send(2, ClientMsg::Alive { nonce });
    for _ in 0..1000 {
        report(&mut sim, 0, 1, 2);
    }
    assert!(
        sim.take(2).is_empty(),
        "no probe while the suspect is quiet-listed"
    );
    // After the heartbeat timeout it may be probed again.
    sim.advance_with_heartbeats(Duration::from_secs(3), &[0, 1, 2]);
    report(&mut sim, 0, 1, 2);
    assert!(probe_nonce(&sim.take(2)).is_some());
    assert!(sim.closed.is_empty());
}

#[test]
fn self_reports_strangers_bad_ranks_and_stale_rounds_are_refused_or_ignored() {
    let mut sim = running();
    report(&mut sim, 1, 1, 1);
    let r = sim.take(1);
    assert!(
        matches!(&r[..], [ServerMsg::Refused { code: RefusalCode::BadRequest, message }] if message.contains("itself")),
        "{r:?}"
    );
    report(&mut sim, 1, 1, 7);
    assert!(
        matches!(&sim.take(1)[..], [ServerMsg::Refused { message, .. }] if message.contains("3 ranks"))
    );
    report(&mut sim, 1, 0, 2);
    report(&mut sim, 1, 9, 2);
    assert!(
        sim.take(2).is_empty() && sim.take(1).is_empty(),
        "stale rounds: nothing"
    );
    // A connection that never joined is refused and closed.
    sim.input(dt_rdzv_proto::rendezvous::Input::Connected {
        conn: 50,
        observed_ip: "10.9.9.9".into(),
    });
    report(&mut sim, 50, 1, 2);
    assert!(sim.closed.contains_key(&50));
    assert!(sim.take(2).is_empty(), "a stranger's report probes nobody");
    // Nobody was evicted by any of it.
    sim.advance_with_heartbeats(Duration::from_secs(3), &[0, 1, 2]);
    assert!(![0, 1, 2].iter().any(|c| sim.closed.contains_key(c)));
}

#[test]
fn a_report_arriving_after_the_loss_is_stale() {
    let mut sim = running();
    sim.close(2);
    sim.clear();
    report(&mut sim, 0, 1, 2);
    assert_eq!(verdicts(&sim), [ReportVerdict::Stale]);
}

fn dumps(msgs: &[ServerMsg]) -> Vec<(u64, u32, String)> {
    msgs.iter()
        .filter_map(|m| match m {
            ServerMsg::Dump {
                round, rank, why, ..
            } => Some((*round, *rank, why.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn an_ask_to_dump_reaches_every_other_member_of_the_round_once() {
    let mut sim = running();
    let why = |r: u64| format!("rank {r}: all_reduce(seq 6) timed out after 3 s");
    sim.send(
        0,
        ClientMsg::Dump {
            round: 1,
            why: why(0),
        },
    );
    assert!(dumps(&sim.take(0)).is_empty(), "not back to the asker");
    for c in [1, 2] {
        assert_eq!(dumps(&sim.take(c)), vec![(1, 0, why(0))], "member {c}");
    }
    // Rank 1 timed out too: the round was told already.
    sim.send(
        1,
        ClientMsg::Dump {
            round: 1,
            why: why(1),
        },
    );
    for c in 0..3 {
        assert!(dumps(&sim.take(c)).is_empty(), "told once per round");
    }
    // An ask about another round is late news; a long reason is cut.
    sim.send(
        2,
        ClientMsg::Dump {
            round: 7,
            why: why(2),
        },
    );
    assert!((0..3).all(|c| dumps(&sim.take(c)).is_empty()));
    assert!(
        sim.closed.is_empty(),
        "nobody refused or closed: {:?}",
        sim.closed
    );
}

#[test]
fn an_ask_to_dump_is_cut_to_its_bound_and_a_stranger_is_refused() {
    let mut sim = running();
    sim.send(
        1,
        ClientMsg::Dump {
            round: 1,
            why: "x".repeat(100_000),
        },
    );
    let got = dumps(&sim.take(0));
    assert_eq!(got.len(), 1);
    assert_eq!(dumps(&sim.take(2)).len(), 1);
    assert!(
        got[0].2.len() <= dt_rdzv_proto::native::MAX_DUMP_REASON_BYTES + 16,
        "{}",
        got[0].2.len()
    );
    // A connection that never joined.
    sim.send(
        9,
        ClientMsg::Dump {
            round: 1,
            why: "hi".into(),
        },
    );
    let refused = sim.take(9);
    assert!(
        matches!(
            refused.as_slice(),
            [ServerMsg::Refused {
                code: RefusalCode::NotJoined,
                ..
            }]
        ),
        "{refused:?}"
    );
    assert!(sim.closed.contains_key(&9));
    assert!((0..3).all(|c| dumps(&sim.take(c)).is_empty()));
}
