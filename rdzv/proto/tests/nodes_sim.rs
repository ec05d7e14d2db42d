//! Node agents on a virtual clock: one agent's heartbeats keep its node's ranks alive, its loss
//! loses them all in one round end, one rank of a node goes alone, and what an agent may not do
//! is refused.

mod sim;

use std::time::Duration;

use dt_rdzv_proto::native::{
    ClientMsg, JobSpec, NodeHello, RefusalCode, Role, RoundCause, ServerMsg,
};
use dt_rdzv_proto::rendezvous::{ConnId, Event, Input, MachineConfig};
use sim::{Sim, TOKEN, join_msg, refusal};

const JOB: &str = "job";

/// Agent `agent` of node `node`, accepted.
fn agent(sim: &mut Sim, agent: ConnId, node: &str) {
    sim.input(Input::Connected {
        conn: agent,
        observed_ip: "10.1.0.1".into(),
    });
    sim.send(
        agent,
        ClientMsg::Node(NodeHello {
            job: JOB.into(),
            token: TOKEN.into(),
            node: node.into(),
        }),
    );
    let msgs = sim.take(agent);
    assert!(
        matches!(msgs.as_slice(), [ServerMsg::NodeAccepted { max_ranks, .. }] if *max_ranks > 0),
        "{msgs:?}"
    );
}

/// Rank `conn` of `node` joins on a stream of `agent`'s connection.
fn rank(sim: &mut Sim, agent: ConnId, conn: ConnId, node: &str, spec: &JobSpec) {
    sim.input(Input::Stream {
        conn,
        carrier: agent,
        observed_ip: "10.1.0.1".into(),
    });
    let join = join_msg(conn, JOB, &format!("m{conn}"), node, spec, Role::Worker);
    sim.send(conn, ClientMsg::Join(join));
}

/// Two nodes of four ranks (agents 100 and 200, ranks 101-104 and 201-204), one round formed.
fn two_nodes(sim: &mut Sim) -> Vec<ConnId> {
    let spec = JobSpec::elastic(2, 8);
    agent(sim, 100, "node-a");
    agent(sim, 200, "node-b");
    let ranks: Vec<ConnId> = (101..=104).chain(201..=204).collect();
    for &r in &ranks {
        let (a, node) = if r < 200 {
            (100, "node-a")
        } else {
            (200, "node-b")
        };
        rank(sim, a, r, node, &spec);
    }
    let ws = sim.welcomes(ranks.iter().copied());
    assert_eq!(ws.len(), 8, "every rank welcomed");
    assert!(ws.values().all(|w| w.world == 8 && w.local_world == 4));
    sim.clear();
    ranks
}

fn lost(sim: &Sim) -> Vec<String> {
    let mut v: Vec<String> = sim
        .events
        .iter()
        .filter_map(|e| match e {
            Event::MemberLost { member, .. } => Some(member.clone()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

fn round_ends(sim: &Sim) -> Vec<RoundCause> {
    sim.events
        .iter()
        .filter_map(|e| match e {
            Event::RoundEnded { cause, .. } => Some(cause.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_agents_heartbeats_keep_its_ranks_alive_and_its_silence_loses_them_all_in_one_round_end() {
    let mut sim = Sim::new();
    two_nodes(&mut sim);
    // Only the agents speak: 20 s, ten times the heartbeat timeout.
    sim.advance_with_heartbeats(Duration::from_secs(20), &[100, 200]);
    assert!(lost(&sim).is_empty(), "{:?}", sim.events);
    let beats = sim.m.stats().messages;
    // Node b's agent goes silent.
    sim.advance_with_heartbeats(Duration::from_secs(4), &[100]);
    assert_eq!(lost(&sim), ["m201", "m202", "m203", "m204"]);
    let ends = round_ends(&sim);
    assert_eq!(ends.len(), 1, "one round end: {ends:?}");
    let RoundCause::MemberLost { why, .. } = &ends[0] else {
        panic!("{ends:?}")
    };
    assert!(why.contains("its node agent sent nothing"), "{why}");
    for m in ["m201", "m202", "m203", "m204"] {
        assert!(why.contains(m), "{why} names {m}");
    }
    assert!(
        sim.closed.contains_key(&200),
        "the agent's connection is closed"
    );
    // What it sent before the close reached it is dropped, not refused (no warning per beat).
    sim.take(200);
    sim.take(201);
    let refusals = sim.m.stats().refusals;
    sim.send(200, ClientMsg::Heartbeat { seq: 9 });
    sim.send(201, ClientMsg::Heartbeat { seq: 9 });
    assert!(sim.take(200).is_empty() && sim.take(201).is_empty());
    assert_eq!(sim.m.stats().refusals, refusals);
    // Node a's ranks, silent themselves, are welcomed into the next round.
    let ws = sim.welcomes(101..=104);
    assert_eq!(ws.len(), 4);
    assert!(ws.values().all(|w| w.world == 4));
    // Once the driver reports the closes, nothing is kept of them.
    assert!(sim.m.pending_closes() >= 5, "the agent and its ranks");
    let closed: Vec<ConnId> = sim.closed.keys().copied().collect();
    for c in closed {
        sim.close(c);
    }
    assert_eq!(sim.m.pending_closes(), 0);
    assert!(
        beats < 200,
        "one heartbeat per node per interval, not per rank: {beats}"
    );
}

#[test]
fn a_closed_agent_connection_loses_every_rank_at_once_and_a_closed_rank_stream_only_its_rank() {
    let mut sim = Sim::new();
    two_nodes(&mut sim);
    sim.close(103);
    assert_eq!(lost(&sim), ["m103"]);
    assert_eq!(round_ends(&sim).len(), 1);
    sim.advance_with_heartbeats(Duration::from_millis(10), &[100, 200]);
    assert_eq!(
        sim.welcomes([101, 102, 104, 201]).len(),
        4,
        "the next round formed"
    );
    sim.clear();
    sim.close(200);
    assert_eq!(lost(&sim), ["m201", "m202", "m203", "m204"]);
    let ends = round_ends(&sim);
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert!(
        matches!(&ends[0], RoundCause::MemberLost { why, .. } if why.contains("node \"node-b\" lost every rank it spoke for (4:")),
        "{ends:?}"
    );
    assert!(
        sim.events
            .iter()
            .any(|e| matches!(e, Event::NodeLost { ranks: 4, .. }))
    );
    assert_eq!(sim.m.stats().nodes_lost, 1);
}

#[test]
fn an_agent_reports_one_rank_gone_and_only_that_rank_is_lost() {
    let mut sim = Sim::new();
    two_nodes(&mut sim);
    sim.send(
        100,
        ClientMsg::RankLost {
            member: "m102".into(),
            why: "process 4242 exited with status 1".into(),
        },
    );
    assert_eq!(lost(&sim), ["m102"]);
    let ends = round_ends(&sim);
    assert!(
        matches!(&ends[..], [RoundCause::MemberLost { member, why, .. }]
            if member == "m102" && why.contains("reports it gone: process 4242 exited")),
        "{ends:?}"
    );
    // A rank of another node, or one never joined, is not the agent's to report.
    sim.clear();
    sim.send(
        100,
        ClientMsg::RankLost {
            member: "m201".into(),
            why: "forged".into(),
        },
    );
    let (code, msg) = refusal(&sim.take(100)).expect("refused");
    assert_eq!(code, RefusalCode::BadRequest);
    assert!(
        msg.contains("not a rank that joined through the agent"),
        "{msg}"
    );
    assert!(lost(&sim).is_empty());
    assert!(!sim.closed.contains_key(&100), "the agent stays");
}

#[test]
fn what_an_agent_may_not_do_is_refused_with_the_reason() {
    let mut sim = Sim::with(MachineConfig {
        token: Some(TOKEN.into()),
        max_node_ranks: 2,
        ..MachineConfig::default()
    });
    let spec = JobSpec::elastic(1, 8);
    // A bad token: refused and closed.
    sim.input(Input::Connected {
        conn: 1,
        observed_ip: "10.1.0.9".into(),
    });
    sim.send(
        1,
        ClientMsg::Node(NodeHello {
            job: JOB.into(),
            token: "wrong".into(),
            node: "n".into(),
        }),
    );
    assert_eq!(refusal(&sim.take(1)).unwrap().0, RefusalCode::BadToken);
    assert!(sim.closed.contains_key(&1));
    // A second stream on a connection that is not an agent's.
    sim.join(2, JOB, &spec, 1);
    sim.input(Input::Stream {
        conn: 3,
        carrier: 2,
        observed_ip: "10.1.0.9".into(),
    });
    let (_, msg) = refusal(&sim.take(3)).unwrap();
    assert!(msg.contains("not a node agent's"), "{msg}");
    assert!(sim.closed.contains_key(&3));
    // A rank claiming another node.
    agent(&mut sim, 10, "node-a");
    rank(&mut sim, 10, 11, "node-b", &spec);
    let (_, msg) = refusal(&sim.take(11)).unwrap();
    assert!(msg.contains("but names node \"node-b\""), "{msg}");
    assert!(sim.closed.contains_key(&11));
    // More ranks than the limit (the refused stream above does not count).
    rank(&mut sim, 10, 12, "node-a", &spec);
    rank(&mut sim, 10, 13, "node-a", &spec);
    sim.input(Input::Stream {
        conn: 14,
        carrier: 10,
        observed_ip: "10.1.0.1".into(),
    });
    let (_, msg) = refusal(&sim.take(14)).unwrap();
    assert!(
        msg.contains("already speaks for 2 ranks (limit 2)"),
        "{msg}"
    );
    // A member request on the hello stream: refused, the agent stays.
    sim.send(
        10,
        ClientMsg::Publish {
            key: "k".into(),
            value: b"v".to_vec(),
        },
    );
    let (code, msg) = refusal(&sim.take(10)).unwrap();
    assert_eq!(code, RefusalCode::BadRequest);
    assert!(
        msg.contains("Publish belongs on a rank's own stream"),
        "{msg}"
    );
    assert!(!sim.closed.contains_key(&10));
    // A rank may not speak as an agent.
    sim.send(
        12,
        ClientMsg::RankLost {
            member: "m13".into(),
            why: "x".into(),
        },
    );
    assert_eq!(refusal(&sim.take(12)).unwrap().0, RefusalCode::BadRequest);
    // Status counts the ranks' last messages from their agent's.
    sim.advance_with_heartbeats(Duration::from_secs(3), &[10]);
    let st = sim.m.status(sim.now, Some(JOB)).unwrap();
    let m12 = st[0].members.iter().find(|m| m.member == "m12").unwrap();
    assert!(m12.last_seen_ms < 1_000, "{}", m12.last_seen_ms);
}
