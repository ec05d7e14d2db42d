//! Simulation tests of the rendezvous machine across a server restart, with a virtual clock:
//! a round rebuilt from its members' resumes, a rank that does not come back, a joiner while a
//! round is rebuilt, impossible resumes and restart counts (`rendezvous_sim.rs` has the rest).

mod sim;

use std::time::Duration;

use dt_rdzv_proto::native::{JobSpec, RefusalCode, Resume, RoundCause, ServerMsg};
use dt_rdzv_proto::rendezvous::Event;
use sim::{Sim, check_round, refusal};

const S: Duration = Duration::from_secs(1);

/// A server with 4096 members in round 7 restarts: a fresh machine gets their joins with
/// resumes. Round 7 comes back as it was, ranks and all, and no member's round changes.
#[test]
fn after_a_server_restart_4096_members_get_their_round_back_as_it_was() {
    let mut old = Sim::new();
    let spec = JobSpec::elastic(1024, 4096);
    let all: Vec<u64> = (0..4096).collect();
    for &c in &all {
        old.join(c, "big", &spec, 8);
    }
    let before = old.welcomes(all.iter().copied());
    // The new server process: nothing in memory.
    let mut sim = Sim::new();
    let cfg = sim.m.config().clone();
    for &c in all.iter().rev() {
        let w = &before[&c];
        let resume = Resume {
            round: w.round + 6,
            rank: w.rank,
            world: w.world,
            restarts: 2,
        };
        sim.join_resumed(c, "big", &spec, 8, resume);
        if c == 4095 {
            match &sim.take(c)[..] {
                [
                    ServerMsg::Joined {
                        round,
                        heartbeat_interval_ms,
                        ..
                    },
                ] => {
                    assert_eq!(*round, 7, "waits for round 7 again");
                    assert_eq!(
                        *heartbeat_interval_ms,
                        cfg.heartbeat_interval.as_millis() as u64
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }
    let after = sim.welcomes(all.iter().copied());
    check_round(&after, 4096);
    for c in &all {
        let (b, a) = (&before[c], &after[c]);
        assert_eq!(
            (a.round, a.rank, a.world, a.restarts),
            (7, b.rank, b.world, 2)
        );
        assert_eq!((a.local_rank, a.node_rank), (b.local_rank, b.node_rank));
        assert!(matches!(a.cause, RoundCause::Resumed { members: 4096 }));
    }
    // Nothing else happens: no round ends while members heartbeat.
    sim.clear();
    sim.advance_with_heartbeats(cfg.resume_window * 2, &all);
    assert!(sim.closed.is_empty());
    assert!(
        !sim.events
            .iter()
            .any(|e| matches!(e, Event::RoundEnded { .. }))
    );
}

#[test]
fn a_rank_that_does_not_come_back_after_a_restart_is_replaced_by_the_usual_rules() {
    let mut sim = Sim::new();
    let cfg = sim.m.config().clone();
    let spec = JobSpec::elastic(2, 8);
    let resume = |rank| Resume {
        round: 3,
        rank,
        world: 8,
        restarts: 0,
    };
    // Ranks 0..7 come back, rank 7 (conn 7) does not; a newcomer arrives meanwhile.
    for c in 0..7u64 {
        sim.join_resumed(c, "j", &spec, 1, resume(c as u32));
    }
    sim.join(100, "j", &spec, 1);
    let status = sim.m.status(sim.now, Some("j")).unwrap();
    assert!(
        status[0].missing.iter().any(|m| m.contains("rank 7")),
        "{:?}",
        status[0].missing
    );
    sim.advance_with_heartbeats(
        cfg.resume_window - S,
        &(0..7).chain([100]).collect::<Vec<_>>(),
    );
    assert!(
        sim.welcomes(0..7).is_empty(),
        "waits for rank 7 within the window"
    );
    sim.advance_with_heartbeats(2 * S, &(0..7).chain([100]).collect::<Vec<_>>());
    let ws = sim.welcomes((0..7).chain([100]));
    check_round(&ws, 8);
    for c in 0..7u64 {
        assert_eq!((ws[&c].round, ws[&c].rank), (4, c as u32), "kept its rank");
    }
    assert_eq!(ws[&100].rank, 7, "the newcomer fills the hole");
}

#[test]
fn a_member_joining_afresh_while_a_round_is_rebuilt_is_a_late_joiner_of_it() {
    let mut sim = Sim::new();
    let spec = JobSpec {
        last_call_ms: 1000,
        ..JobSpec::elastic(1, 4)
    };
    let resume = |rank| Resume {
        round: 5,
        rank,
        world: 2,
        restarts: 1,
    };
    sim.join_resumed(0, "j", &spec, 1, resume(0));
    sim.join(9, "j", &spec, 1);
    sim.join_resumed(1, "j", &spec, 1, resume(1));
    let ws = sim.welcomes([0, 1]);
    assert_eq!((ws[&0].round, ws[&0].world, ws[&1].rank), (5, 2, 1));
    // ... and then, after the last call, a round with the late joiner.
    sim.advance_with_heartbeats(2 * S, &[0, 1, 9]);
    let ws = sim.welcomes([0, 1, 9]);
    check_round(&ws, 3);
    assert_eq!((ws[&0].round, ws[&0].rank, ws[&1].rank), (6, 0, 1));
    assert!(matches!(ws[&9].cause, RoundCause::NewMembers { count: 1 }));
}

/// Found by `fuzz/native_decode`: a resume is the client's word, and a job was rebuilt for
/// whatever round it named. A round of 84 million members (in a job of at most 2) had the
/// machine allocate a seat and a missing-rank name for each before anyone came back (out of
/// memory), and a round number near `u64::MAX` overflowed the round counter. Such resumes are
/// refused to that client, and no job is created.
#[test]
fn a_resume_naming_an_impossible_round_is_refused_without_building_it() {
    let mut sim = Sim::new();
    let resume = |round, rank, world| Resume {
        round,
        rank,
        world,
        restarts: 0,
    };
    let cases = [
        // The fuzzer's join, as it decoded.
        (
            JobSpec::elastic(1, 2),
            Resume {
                round: 361_700_864_190_383_365,
                rank: 84_215_045,
                world: 84_215_045,
                restarts: 84_215_045,
            },
            "a round of 84215045 members (1..=2 for this job)",
        ),
        (
            JobSpec::elastic(1, u32::MAX),
            resume(1, 0, u32::MAX),
            "a round of 4294967295 members (1..=65536 for this job)",
        ),
        (
            JobSpec::elastic(1, 8),
            resume(1, 0, 0),
            "a round of 0 members",
        ),
        (
            JobSpec::elastic(1, 8),
            resume(1, 2, 2),
            "rank 2 of a round of 2",
        ),
        (
            JobSpec::elastic(1, 8),
            resume(0, 0, 1),
            "round 0 (1..=4294967295)",
        ),
        (
            JobSpec::elastic(1, 8),
            resume(u64::MAX, 0, 1),
            "round 18446744073709551615",
        ),
    ];
    for (conn, (spec, r, why)) in cases.into_iter().enumerate() {
        let conn = conn as u64;
        sim.join_resumed(conn, "j", &spec, 1, r);
        let (code, message) = refusal(&sim.take(conn)).expect("refused");
        assert_eq!(code, RefusalCode::BadRequest);
        assert!(message.contains(why), "{message}");
        assert!(sim.closed.contains_key(&conn));
        assert_eq!(sim.m.sizes(), (0, 0), "no job was created");
    }
    // The largest round that may be rebuilt is, and so is the highest round number.
    let spec = JobSpec::elastic(1, 65_536);
    sim.join_resumed(
        100,
        "big",
        &spec,
        1,
        resume(u64::from(u32::MAX), 65_535, 65_536),
    );
    assert!(matches!(
        &sim.take(100)[..],
        [ServerMsg::Joined { round, .. }] if *round == u64::from(u32::MAX)
    ));
}

/// A resume's restart count is the client's word too: a loss in a round rebuilt with
/// `u32::MAX` restarts saturates the count instead of overflowing it.
#[test]
fn restarts_brought_by_a_resume_saturate() {
    let mut sim = Sim::new();
    let spec = JobSpec::elastic(1, 2);
    let resume = |rank| Resume {
        round: 4,
        rank,
        world: 2,
        restarts: u32::MAX,
    };
    sim.join_resumed(0, "j", &spec, 1, resume(0));
    sim.join_resumed(1, "j", &spec, 1, resume(1));
    let ws = sim.welcomes([0, 1]);
    assert_eq!((ws[&0].round, ws[&0].restarts), (4, u32::MAX));
    sim.close(1);
    let w = sim.welcome(0).expect("a new round with the survivor");
    assert_eq!((w.round, w.world, w.restarts), (5, 1, u32::MAX));
}
