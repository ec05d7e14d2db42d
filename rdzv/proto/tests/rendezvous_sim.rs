//! Simulation tests of the rendezvous machine with a virtual clock: forming at scale, losses,
//! gains, spares, timeouts, stable ranks, lifecycle and bad input.

mod sim;

use std::collections::HashMap;
use std::time::Duration;

use dt_rdzv_proto::native::{
    ClientMsg, JobEnd, JobSpec, LateJoin, RefusalCode, Role, RoundCause, ServerMsg,
};
use dt_rdzv_proto::rendezvous::{Event, Input, MachineConfig};
use sim::{Sim, check_round, job_end, refusal};

const S: Duration = Duration::from_secs(1);

fn ranks_by_conn(ws: &HashMap<u64, dt_rdzv_proto::native::Welcome>) -> HashMap<u64, u32> {
    ws.iter().map(|(c, w)| (*c, w.rank)).collect()
}

#[test]
fn forms_4096_members_with_ranks_local_ranks_and_peers() {
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(4096);
    let conns: Vec<u64> = (0..4096).collect();
    // Arrive in a scrambled order: ranks must not depend on it.
    for i in 0..4096u64 {
        let c = (i * 2654435761) % 4096;
        sim.join(c, "big", &spec, 8);
    }
    let ws = sim.welcomes(conns.iter().copied());
    assert_eq!(check_round(&ws, 4096), 1);
    for (c, w) in &ws {
        // sorted by node then member id: member m<c> on node n<c/8> gets rank c
        assert_eq!(u64::from(w.rank), *c);
        assert_eq!((w.local_rank, w.local_world), ((*c % 8) as u32, 8));
        assert_eq!((w.node_rank, w.nodes), ((*c / 8) as u32, 512));
        assert!(!w.all_peers, "4096 members get neighbours, not the table");
        let ranks: Vec<u32> = w.peers.iter().map(|p| p.rank).collect();
        assert!(ranks.contains(&0));
        assert!(ranks.contains(&((w.rank + 1) % 4096)));
        assert!(ranks.contains(&((w.rank + 4095) % 4096)));
        assert!(w.peers.len() <= 16, "{} peers", w.peers.len());
        let me = w.peers.iter().find(|p| p.rank == w.rank).unwrap();
        assert_eq!(me.member, format!("m{c:05}"));
        assert_eq!(me.addrs, vec![format!("n{:04}:{}", c / 8, 40000 + c)]);
        assert!(!me.observed_ip.is_empty());
    }
    assert!(
        sim.events
            .iter()
            .any(|e| matches!(e, Event::RoundComplete { world: 4096, .. }))
    );
    // Lookup answers for ranks not in the welcome.
    sim.send(
        5,
        ClientMsg::Lookup {
            ranks: vec![4000, 9999],
        },
    );
    let got = sim.take(5);
    assert!(matches!(&got[..], [ServerMsg::Peers(p)] if p.len() == 1 && p[0].member == "m04000"));
}

#[test]
fn losing_members_of_4096_ends_the_round_once_and_survivors_keep_their_ranks() {
    let mut sim = Sim::new();
    let spec = JobSpec::elastic(1024, 4096);
    let all: Vec<u64> = (0..4096).collect();
    for &c in &all {
        sim.join(c, "big", &spec, 8);
    }
    let before = ranks_by_conn(&sim.welcomes(all.iter().copied()));
    // One host (8 members) goes silent at once.
    let dead: Vec<u64> = (800..808).collect();
    let alive: Vec<u64> = all.iter().copied().filter(|c| !dead.contains(c)).collect();
    sim.clear();
    sim.advance_with_heartbeats(5 * S, &alive);
    let rounds_ended = sim
        .events
        .iter()
        .filter(|e| matches!(e, Event::RoundEnded { .. }))
        .count();
    assert_eq!(rounds_ended, 1, "the lost host ends one round, not eight");
    for c in &dead {
        assert!(sim.closed.contains_key(c));
    }
    let msgs = sim.take(alive[0]);
    assert!(
        msgs.iter().any(|m| matches!(
            m,
            ServerMsg::RoundEnded {
                round: 1,
                cause: RoundCause::MemberLost { rank: 800, .. },
                ..
            }
        )),
        "{msgs:?}"
    );
    let w = msgs
        .iter()
        .rev()
        .find_map(|m| match m {
            ServerMsg::Welcome(w) => Some(w.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!((w.round, w.world, w.restarts), (2, 4088, 1));
    let ws = sim.welcomes(alive.iter().copied());
    let mut ws = ws;
    ws.insert(alive[0], w);
    check_round(&ws, 4088);
    let mut moved = 0;
    for (c, w) in &ws {
        let old = before[c];
        if old < 4088 {
            assert_eq!(w.rank, old, "survivor {c} kept its rank");
        } else {
            moved += 1;
            assert!((800..808).contains(&w.rank), "top ranks fill the holes");
        }
    }
    assert_eq!(moved, 8);
}

#[test]
fn a_closed_connection_is_a_loss_noticed_at_once_with_the_reason() {
    let mut sim = Sim::new();
    let spec = JobSpec::elastic(2, 4);
    for c in 0..4 {
        sim.join(c, "j", &spec, 1);
    }
    let before = ranks_by_conn(&sim.welcomes(0..4));
    sim.close(1);
    for c in [0, 2, 3] {
        let msgs = sim.take(c);
        match &msgs[..] {
            [
                ServerMsg::RoundEnded {
                    cause: RoundCause::MemberLost { member, rank, why },
                    ..
                },
                ServerMsg::Welcome(w),
            ] => {
                assert_eq!((member.as_str(), *rank), ("m00001", before[&1]));
                assert!(why.contains("peer vanished"), "{why}");
                assert_eq!((w.round, w.world), (2, 3));
                assert!(matches!(w.cause, RoundCause::MemberLost { .. }));
            }
            other => panic!("member {c}: {other:?}"),
        }
    }
}

#[test]
fn late_joiners_start_a_new_round_after_the_last_call_and_ranks_stay() {
    let mut sim = Sim::new();
    let spec = JobSpec::elastic(2, 16);
    for c in 0..8 {
        sim.join(c, "j", &spec, 1);
    }
    assert!(sim.welcome(0).is_none(), "waits for the last call");
    sim.advance_with_heartbeats(4 * S, &(0..8).collect::<Vec<_>>());
    let r1 = ranks_by_conn(&sim.welcomes(0..8));
    assert_eq!(r1.len(), 8);
    sim.join(8, "j", &spec, 1);
    let msgs = sim.take(3);
    assert!(
        matches!(
            &msgs[..],
            [ServerMsg::Pending {
                waiting: 1,
                round: 1,
                ..
            }]
        ),
        "{msgs:?}"
    );
    sim.join(9, "j", &spec, 1);
    sim.advance_with_heartbeats(4 * S, &(0..10).collect::<Vec<_>>());
    let ws = sim.welcomes(0..10);
    check_round(&ws, 10);
    for c in 0..8 {
        assert_eq!(ws[&c].rank, r1[&c]);
        assert_eq!(ws[&c].cause, RoundCause::NewMembers { count: 2 });
    }
    assert_eq!((ws[&8].rank, ws[&9].rank), (8, 9));
}

#[test]
fn late_joiners_wait_for_a_request_with_the_on_request_policy() {
    let mut sim = Sim::new();
    let spec = JobSpec {
        late_join: LateJoin::OnRequest,
        last_call_ms: 0,
        ..JobSpec::elastic(2, 8)
    };
    for c in 0..2 {
        sim.join(c, "j", &spec, 1);
    }
    assert_eq!(sim.welcomes(0..2).len(), 2, "last call 0: complete at min");
    sim.join(2, "j", &spec, 1);
    sim.advance_with_heartbeats(30 * S, &[0, 1, 2]);
    assert!(sim.welcome(2).is_none(), "no new round until asked");
    sim.send(1, ClientMsg::NextRound);
    let ws = sim.welcomes(0..3);
    check_round(&ws, 3);
    assert_eq!(
        ws[&0].cause,
        RoundCause::Requested {
            by: "m00001".into()
        }
    );
}

#[test]
fn spares_wait_beyond_max_and_take_a_freed_slot() {
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(4);
    for c in 0..6 {
        sim.join(c, "j", &spec, 1);
    }
    let spare_flags: Vec<bool> = (0..6)
        .map(|c| {
            sim.inbox[&c]
                .iter()
                .any(|m| matches!(m, ServerMsg::Joined { spare: true, .. }))
        })
        .collect();
    assert_eq!(spare_flags, [false, false, false, false, true, true]);
    let r1 = ranks_by_conn(&sim.welcomes(0..6));
    assert_eq!(r1.len(), 4, "spares get no welcome");
    sim.close(2);
    let ws = sim.welcomes(0..6);
    check_round(&ws, 4);
    assert!(
        ws.contains_key(&4) && !ws.contains_key(&5),
        "the first spare is promoted"
    );
    assert_eq!(ws[&4].rank, r1[&2], "into the freed rank");
    for c in [0, 1, 3] {
        assert_eq!(ws[&c].rank, r1[&c]);
    }
    // The job keeps `max_spares` spares and refuses more.
    let full = JobSpec {
        max_spares: 1,
        ..JobSpec::fixed(1)
    };
    sim.join(10, "k", &full, 1);
    sim.join(11, "k", &full, 1);
    sim.join(12, "k", &full, 1);
    let (code, msg) = refusal(&sim.take(12)).unwrap();
    assert_eq!(code, RefusalCode::JobFull);
    assert!(msg.contains("\"k\"") && msg.contains("m00012"), "{msg}");
    assert!(sim.closed.contains_key(&12));
}

#[test]
fn join_timeout_names_who_is_missing() {
    let mut sim = Sim::new();
    let spec = JobSpec {
        join_timeout_ms: 60_000,
        ..JobSpec::fixed(4)
    };
    for c in 0..4 {
        sim.join(c, "j", &spec, 1);
    }
    assert_eq!(sim.welcomes(0..4).len(), 4);
    sim.close(3);
    sim.advance_with_heartbeats(59 * S, &[0, 1, 2]);
    assert!(
        job_end(&sim.take(0)).is_none(),
        "still waiting for a replacement"
    );
    sim.advance_with_heartbeats(2 * S, &[0, 1, 2]);
    let end = job_end(&sim.take(0)).expect("job ended");
    match &end {
        JobEnd::JoinTimeout {
            round,
            have,
            min,
            missing,
            ..
        } => {
            assert_eq!((*round, *have, *min), (2, 3, 4));
            assert_eq!(missing, &vec!["m00003".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    assert!(end.to_string().contains("missing m00003"), "{end}");
    // The first round: nobody to name, but the count is given.
    sim.join(10, "first", &spec, 1);
    sim.advance_with_heartbeats(61 * S, &[10]);
    let end = job_end(&sim.take(10)).unwrap();
    assert!(
        end.to_string().contains("1 of at least 4")
            && end.to_string().contains("3 more never joined"),
        "{end}"
    );
}

#[test]
fn survivors_below_min_wait_and_complete_when_a_replacement_joins() {
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(3);
    for c in 0..3 {
        sim.join(c, "j", &spec, 1);
    }
    let r1 = ranks_by_conn(&sim.welcomes(0..3));
    sim.close(0);
    assert!(sim.welcome(1).is_none());
    sim.advance_with_heartbeats(10 * S, &[1, 2]);
    sim.join_as(7, "j", "replacement", "n9", &spec, Role::Worker);
    let ws = sim.welcomes([1, 2, 7]);
    check_round(&ws, 3);
    assert_eq!(ws[&1].rank, r1[&1]);
    assert_eq!(ws[&2].rank, r1[&2]);
    assert_eq!(ws[&7].rank, r1[&0]);
}

#[test]
fn ranks_stay_stable_for_survivors_through_random_churn() {
    let mut sim = Sim::with(MachineConfig::default());
    let spec = JobSpec {
        last_call_ms: 0,
        ..JobSpec::elastic(1, 1000)
    };
    let mut next = 0u64;
    let mut live: Vec<u64> = Vec::new();
    for _ in 0..32 {
        sim.join(next, "churn", &spec, 4);
        live.push(next);
        next += 1;
    }
    let mut ranks = ranks_by_conn(&sim.welcomes(live.iter().copied()));
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut rnd = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for _ in 0..200 {
        if rnd(2) == 0 && live.len() > 2 {
            let victim = live.remove(rnd(live.len() as u64) as usize);
            sim.close(victim);
        } else {
            sim.join(next, "churn", &spec, 4);
            live.push(next);
            next += 1;
            // a late joiner waits for the batching window (last call 0: the next timer)
            sim.advance(Duration::from_millis(1));
        }
        let ws = sim.welcomes(live.iter().copied());
        let world = live.len() as u32;
        if ws.is_empty() {
            continue;
        }
        check_round(&ws, world);
        for (c, w) in &ws {
            if let Some(&old) = ranks.get(c)
                && old < world
            {
                assert_eq!(w.rank, old, "member {c} keeps rank {old}");
            }
        }
        ranks = ranks_by_conn(&ws);
    }
}

#[test]
fn main_member_is_rank_zero_publishes_config_and_ends_an_ephemeral_job() {
    let mut sim = Sim::new();
    let spec = JobSpec {
        ephemeral: true,
        ..JobSpec::fixed(3)
    };
    sim.join_as(0, "oci", "worker-b", "b", &spec, Role::Worker);
    sim.join_as(1, "oci", "worker-a", "a", &spec, Role::Worker);
    sim.join_as(2, "oci", "main", "z", &spec, Role::Main);
    let ws = sim.welcomes(0..3);
    assert_eq!((ws[&2].rank, ws[&1].rank, ws[&0].rank), (0, 1, 2));
    sim.send(
        1,
        ClientMsg::Publish {
            key: "MAIN_config".into(),
            value: b"{}".to_vec(),
        },
    );
    let (code, msg) = refusal(&sim.take(1)).unwrap();
    assert_eq!(code, RefusalCode::NotMain);
    assert!(msg.contains("worker-a"), "{msg}");
    assert!(
        !sim.closed.contains_key(&1),
        "a refused request leaves the member in"
    );
    sim.send(
        2,
        ClientMsg::Publish {
            key: "MAIN_config".into(),
            value: b"{\"ip\":1}".to_vec(),
        },
    );
    for c in 0..3 {
        assert!(
            matches!(&sim.take(c)[..], [ServerMsg::Config { key, .. }] if key == "MAIN_config")
        );
    }
    // The main member leaves: its entry point finished, so the ephemeral job ends.
    sim.send(2, ClientMsg::Leave);
    for c in 0..2 {
        assert_eq!(
            job_end(&sim.take(c)),
            Some(JobEnd::Finished { by: "main".into() })
        );
    }
    assert_eq!(
        sim.m.sizes().0,
        0,
        "ephemeral jobs are forgotten when they end"
    );
    // A new run with the same name starts afresh.
    sim.join_as(5, "oci", "main", "z", &spec, Role::Main);
    assert!(matches!(
        &sim.take(5)[..],
        [ServerMsg::Joined { round: 1, .. }]
    ));
    // The config is in the welcome of a later round.
    sim.send(
        5,
        ClientMsg::Publish {
            key: "k".into(),
            value: b"v".to_vec(),
        },
    );
    sim.join_as(6, "oci", "w1", "a", &spec, Role::Worker);
    sim.join_as(7, "oci", "w2", "a", &spec, Role::Worker);
    let w = sim.welcome(6).unwrap();
    assert_eq!(*w.config, vec![("k".to_string(), b"v".to_vec())]);
}

#[test]
fn leaving_finishing_and_stopping_are_distinct() {
    let mut sim = Sim::new();
    let spec = JobSpec {
        last_call_ms: 0,
        ..JobSpec::elastic(1, 4)
    };
    for c in 0..3 {
        sim.join(c, "j", &spec, 1);
        sim.advance(Duration::from_millis(1));
    }
    sim.welcomes(0..3);
    sim.send(2, ClientMsg::Leave);
    let msgs = sim.take(0);
    assert!(
        matches!(
            &msgs[0],
            ServerMsg::RoundEnded {
                cause: RoundCause::MemberLeft { .. },
                ..
            }
        ),
        "{msgs:?}"
    );
    let ServerMsg::Welcome(w) = &msgs[1] else {
        panic!("{msgs:?}")
    };
    assert_eq!((w.world, w.restarts), (2, 0), "leaving is no restart");
    sim.send(1, ClientMsg::Finish);
    assert_eq!(
        job_end(&sim.take(0)),
        Some(JobEnd::Finished {
            by: "m00001".into()
        })
    );
    sim.join(9, "j", &spec, 1);
    let (code, msg) = refusal(&sim.take(9)).unwrap();
    assert_eq!(code, RefusalCode::JobEnded);
    assert!(msg.contains("finished"), "{msg}");
    // Stopped by an operator.
    sim.join(20, "s", &spec, 1);
    sim.send(
        30,
        ClientMsg::Stop {
            token: sim::TOKEN.into(),
            job: "s".into(),
            reason: "dt-rdzv stop by ops".into(),
        },
    );
    assert!(matches!(&sim.take(30)[..], [ServerMsg::Stopped { .. }]));
    assert_eq!(
        job_end(&sim.take(20)),
        Some(JobEnd::Stopped {
            reason: "dt-rdzv stop by ops".into()
        })
    );
    sim.join(21, "s", &spec, 1);
    assert!(refusal(&sim.take(21)).unwrap().1.contains("stopped"));
    // Ended jobs are forgotten after the retention time.
    sim.advance(Duration::from_secs(61));
    assert_eq!(sim.m.sizes().0, 0);
}

#[test]
fn restart_and_round_limits_end_the_job() {
    let mut sim = Sim::new();
    let spec = JobSpec {
        max_restarts: Some(1),
        ..JobSpec::elastic(1, 3)
    };
    for c in 0..3 {
        sim.join(c, "j", &spec, 1);
    }
    sim.close(0);
    assert!(sim.welcome(1).is_some());
    sim.close(1);
    assert_eq!(
        job_end(&sim.take(2)),
        Some(JobEnd::RestartLimit { restarts: 1 })
    );
    let spec = JobSpec {
        max_rounds: 1,
        ..JobSpec::elastic(1, 2)
    };
    sim.join(10, "r", &spec, 1);
    sim.join(11, "r", &spec, 1);
    sim.send(10, ClientMsg::Leave);
    assert_eq!(
        job_end(&sim.take(11)),
        Some(JobEnd::RoundLimit { rounds: 1 })
    );
}

#[test]
fn ttl_expires_a_long_lived_job() {
    let mut sim = Sim::new();
    let spec = JobSpec {
        ttl_ms: Some(3_600_000),
        ..JobSpec::fixed(1)
    };
    sim.join(0, "long", &spec, 1);
    sim.advance_with_heartbeats(Duration::from_secs(3599), &[0]);
    assert!(job_end(&sim.take(0)).is_none());
    sim.advance_with_heartbeats(Duration::from_secs(2), &[0]);
    assert_eq!(
        job_end(&sim.take(0)),
        Some(JobEnd::Expired { ttl_ms: 3_600_000 })
    );
}

#[test]
fn bad_input_is_refused_to_that_client_only() {
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(2);
    sim.join(0, "j", &spec, 1);
    sim.clear();
    // wrong token
    sim.input(Input::Connected {
        conn: 50,
        observed_ip: "1.2.3.4".into(),
    });
    sim.send(
        50,
        ClientMsg::Join(dt_rdzv_proto::native::Join {
            job: "j".into(),
            token: "guess".into(),
            member: "x".into(),
            node: "x".into(),
            addrs: vec![],
            host: Vec::new(),
            role: Role::Worker,
            spec: spec.clone(),
            resume: None,
        }),
    );
    assert_eq!(refusal(&sim.take(50)).unwrap().0, RefusalCode::BadToken);
    assert!(sim.closed.contains_key(&50));
    // status without the token: nothing
    sim.send(
        51,
        ClientMsg::Status {
            token: String::new(),
            job: None,
        },
    );
    let msgs = sim.take(51);
    assert_eq!(msgs.len(), 1);
    assert_eq!(refusal(&msgs).unwrap().0, RefusalCode::BadToken);
    // joining twice on one connection
    sim.join(0, "j", &spec, 1);
    assert_eq!(refusal(&sim.take(0)).unwrap().0, RefusalCode::AlreadyJoined);
    assert!(!sim.closed.contains_key(&0));
    // another connection claiming member 0's id
    sim.join_as(52, "j", "m00000", "elsewhere", &spec, Role::Worker);
    let (code, msg) = refusal(&sim.take(52)).unwrap();
    assert_eq!(code, RefusalCode::MemberTaken);
    assert!(msg.contains("m00000"));
    // a different spec
    sim.join(53, "j", &JobSpec::fixed(3), 1);
    let (code, msg) = refusal(&sim.take(53)).unwrap();
    assert_eq!(code, RefusalCode::SpecMismatch);
    assert!(msg.contains("min_members: 2 vs 3"), "{msg}");
    // an invalid spec
    sim.join(54, "new", &JobSpec::elastic(5, 2), 1);
    assert_eq!(refusal(&sim.take(54)).unwrap().0, RefusalCode::InvalidSpec);
    // garbage from a non-member
    sim.input(Input::Malformed {
        conn: 55,
        error: dt_rdzv_proto::native::CodecError::BadMagic(*b"GET "),
    });
    assert_eq!(refusal(&sim.take(55)).unwrap().0, RefusalCode::Malformed);
    assert!(sim.closed.contains_key(&55));
    // a second main
    sim.join_as(56, "m", "main1", "a", &JobSpec::fixed(3), Role::Main);
    sim.join_as(57, "m", "main2", "b", &JobSpec::fixed(3), Role::Main);
    assert_eq!(refusal(&sim.take(57)).unwrap().0, RefusalCode::MainTaken);
    // member requests before joining
    sim.send(
        58,
        ClientMsg::Publish {
            key: "k".into(),
            value: vec![],
        },
    );
    assert_eq!(refusal(&sim.take(58)).unwrap().0, RefusalCode::NotJoined);
    // Nothing reached member 0, which still forms a round with the next good joiner.
    assert!(sim.take(0).is_empty());
    sim.join(1, "j", &spec, 1);
    check_round(&sim.welcomes(0..2), 2);
    let refused = sim
        .events
        .iter()
        .filter(|e| matches!(e, Event::Refused { .. }))
        .count();
    assert_eq!(refused as u64, sim.m.stats().refusals);
    assert!(refused >= 9);
}

#[test]
fn a_flood_of_jobs_stops_at_the_limit() {
    let mut sim = Sim::with(MachineConfig {
        token: Some(sim::TOKEN.into()),
        max_jobs: 10,
        ..MachineConfig::default()
    });
    for c in 0..12 {
        sim.join(c, &format!("job{c}"), &JobSpec::fixed(2), 1);
    }
    assert_eq!(sim.m.sizes().0, 10);
    assert_eq!(refusal(&sim.take(11)).unwrap().0, RefusalCode::TooManyJobs);
}

#[test]
fn status_names_members_ranks_and_who_is_missing() {
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(3);
    for c in 0..3 {
        sim.join(c, "j", &spec, 2);
    }
    sim.close(1);
    sim.advance(Duration::from_millis(1500));
    sim.send(
        9,
        ClientMsg::Status {
            token: sim::TOKEN.into(),
            job: Some("j".into()),
        },
    );
    let msgs = sim.take(9);
    let [ServerMsg::Status(jobs)] = &msgs[..] else {
        panic!("{msgs:?}")
    };
    let j = &jobs[0];
    assert_eq!((j.state.as_str(), j.round, j.world), ("forming", 1, 0));
    assert_eq!(j.missing, vec!["m00001".to_string()]);
    assert_eq!(j.members.len(), 2);
    assert_eq!(j.members[0].last_seen_ms, 1500);
    assert_eq!(j.members[0].rank, Some(0));
    sim.send(
        9,
        ClientMsg::Status {
            token: sim::TOKEN.into(),
            job: Some("nope".into()),
        },
    );
    assert_eq!(refusal(&sim.take(9)).unwrap().0, RefusalCode::UnknownJob);
}

#[test]
fn malformed_frames_from_a_member_lose_only_that_member() {
    let mut sim = Sim::new();
    let spec = JobSpec::elastic(1, 3);
    for c in 0..3 {
        sim.join(c, "j", &spec, 1);
    }
    sim.welcomes(0..3);
    sim.input(Input::Malformed {
        conn: 1,
        error: dt_rdzv_proto::native::CodecError::Version { got: 9, ours: 1 },
    });
    assert_eq!(
        refusal(&sim.take(1)).unwrap().0,
        RefusalCode::VersionMismatch
    );
    let ws = sim.welcomes([0, 2]);
    check_round(&ws, 2);
}

#[test]
fn members_gathering_for_their_first_round_get_the_waiting_heartbeat_rate_and_timeout() {
    let mut sim = Sim::new();
    let cfg = sim.m.config().clone();
    let spec = JobSpec::fixed(3);
    sim.join(0, "slow", &spec, 1);
    sim.join(1, "slow", &spec, 1);
    for c in [0, 1] {
        match &sim.take(c)[..] {
            [
                ServerMsg::Joined {
                    heartbeat_interval_ms,
                    ..
                },
            ] => {
                assert_eq!(
                    *heartbeat_interval_ms,
                    cfg.waiting_heartbeat_interval.as_millis() as u64
                )
            }
            other => panic!("{other:?}"),
        }
    }
    // Silent for longer than a round's timeout (a gathering member starved of CPU): still in.
    sim.advance(cfg.heartbeat_timeout * 3);
    assert!(sim.closed.is_empty(), "{:?}", sim.closed);
    // Member 1 heartbeats at the waiting rate; member 0 stays silent past the waiting timeout.
    let end = sim.now + cfg.waiting_heartbeat_timeout;
    while sim.now < end {
        sim.send(1, ClientMsg::Heartbeat { seq: 0 });
        sim.advance(cfg.waiting_heartbeat_interval);
    }
    let why = sim
        .closed
        .get(&0)
        .expect("the silent waiting member is lost");
    assert!(why.contains("before its first round"), "{why}");
    assert!(!sim.closed.contains_key(&1));
    // The round forms; from its welcome on, member 1 has the round's timeout.
    sim.join(2, "slow", &spec, 1);
    sim.join(3, "slow", &spec, 1);
    let ws = sim.welcomes([1, 2, 3]);
    let w = &ws[&1];
    assert_eq!(
        (w.world, w.heartbeat_interval_ms, w.heartbeat_timeout_ms),
        (
            3,
            cfg.heartbeat_interval.as_millis() as u64,
            cfg.heartbeat_timeout.as_millis() as u64
        )
    );
    // A welcome counts as heard from: nobody is lost at once, though member 1's last
    // heartbeat is older than the round's timeout allows.
    sim.advance(cfg.heartbeat_timeout / 2);
    assert_eq!(sim.closed.len(), 1, "{:?}", sim.closed);
    sim.advance_with_heartbeats(cfg.heartbeat_timeout * 2, &[2, 3]);
    let why = sim
        .closed
        .get(&1)
        .expect("silent in a round: lost after the round's timeout");
    // Silent since its welcome: the round's timeout and one waiting interval (its next beat
    // at the waiting rate may have been that far off when the welcome came).
    assert!(
        why.contains("heartbeat timeout 4.0 s, silent since its first welcome"),
        "{why}"
    );
}

/// Found by the `rendezvous_machine` fuzz target: a member whose connection sent a status or
/// stop request with a wrong token had its connection closed while it stayed a member, with
/// the connection forgotten: neither the connection's end nor the heartbeat timeout could
/// find it any more, so it held its id and its rank for good and the job never went idle.
#[test]
fn a_member_asking_with_a_wrong_token_is_refused_and_stays_a_member() {
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(2);
    sim.join(0, "j", &spec, 1);
    sim.join(1, "j", &spec, 1);
    check_round(&sim.welcomes(0..2), 2);
    let wrong = [
        ClientMsg::Status {
            token: "guess".into(),
            job: None,
        },
        ClientMsg::Status {
            token: "guess".into(),
            job: Some("j".into()),
        },
        ClientMsg::Stop {
            token: dt_rdzv_proto::rendezvous::job_token(sim::TOKEN, "other"),
            job: "j".into(),
            reason: "guess".into(),
        },
    ];
    for msg in wrong {
        sim.send(0, msg);
        let msgs = sim.take(0);
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert_eq!(refusal(&msgs).unwrap().0, RefusalCode::BadToken);
        assert!(!sim.closed.contains_key(&0), "a member's connection stays");
    }
    assert!(sim.take(1).is_empty(), "the round goes on");
    // Still a member: its connection's end is noticed, ends the round, and frees its id.
    sim.close(0);
    let msgs = sim.take(1);
    assert!(
        matches!(
            &msgs[0],
            ServerMsg::RoundEnded {
                cause: RoundCause::MemberLost { .. },
                ..
            }
        ),
        "{msgs:?}"
    );
    assert_eq!(sim.m.sizes(), (1, 1));
    sim.join(0, "j", &spec, 1);
    check_round(&sim.welcomes(0..2), 2);
    // Everyone goes: the job is forgotten once idle.
    sim.close(0);
    sim.close(1);
    sim.advance(Duration::from_secs(301));
    assert_eq!(sim.m.sizes(), (0, 0));
    assert_eq!(sim.m.poll_timeout(), None);
}

/// Found by the `rendezvous_machine` fuzz target: a member stopping its own job got the
/// machine's `Stopped` answer after the `Close` of its connection, so a driver (which forgets
/// a connection at its close) never delivered it.
#[test]
fn a_member_stopping_its_own_job_gets_the_answer_before_its_connection_closes() {
    let mut sim = Sim::new();
    let spec = JobSpec::elastic(2, 2);
    sim.join(0, "j", &spec, 1);
    sim.m.handle(
        sim.now,
        Input::Message {
            conn: 0,
            msg: ClientMsg::Stop {
                token: dt_rdzv_proto::rendezvous::job_token(sim::TOKEN, "j"),
                job: "j".into(),
                reason: "done here".into(),
            },
        },
    );
    let mut to_0 = Vec::new();
    while let Some(a) = sim.m.poll_action() {
        match a {
            dt_rdzv_proto::rendezvous::Action::Send { conn: 0, msg } => to_0.push(Some(msg)),
            dt_rdzv_proto::rendezvous::Action::Close { conn: 0, .. } => to_0.push(None),
            _ => {}
        }
    }
    assert!(
        matches!(
            &to_0[..],
            [
                Some(ServerMsg::Stopped { .. }),
                Some(ServerMsg::JobEnded {
                    end: JobEnd::Stopped { .. },
                    ..
                }),
                None,
            ]
        ),
        "{to_0:?}"
    );
}

/// Replicated state must replay the same way everywhere: two machines fed the same inputs give
/// the same actions in the same order (ordered maps, no hash-order iteration), through joins
/// over several jobs and nodes, losses, heartbeat timeouts and status requests.
#[test]
fn the_same_inputs_give_the_same_actions_in_the_same_order() {
    fn script() -> Vec<String> {
        let mut sim = Sim::new();
        let start = sim.now;
        for job in ["a", "b", "c", "d", "e", "f", "g", "h"] {
            let spec = JobSpec::elastic(4, 12);
            for i in 0..12u64 {
                let c = (i * 7919) % 12 + 100 * u64::from(job.as_bytes()[0]);
                sim.join(c, job, &spec, 3);
            }
        }
        sim.advance(2 * S);
        for c in [100 * 97 + 3, 100 * 98 + 5, 100 * 99] {
            sim.close(c);
        }
        let alive: Vec<u64> = (0..12u64)
            .map(|i| 100 * 97 + i)
            .filter(|c| *c != 100 * 97 + 3)
            .collect();
        sim.advance_with_heartbeats(5 * S, &alive);
        sim.now = start + 10 * S;
        sim.advance(S);
        sim.log.clone()
    }
    let (a, b) = (script(), script());
    assert!(a.len() > 100, "{} actions", a.len());
    assert_eq!(a, b);
}
