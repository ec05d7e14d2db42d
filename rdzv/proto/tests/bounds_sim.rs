//! The native answers a job token can make large (hardening round 3, findings 7 and 8):
//! lookups of repeated ranks, and published configuration copied into every welcome.

mod sim;

use dt_rdzv_proto::native::{ClientMsg, JobSpec, RefusalCode, Role, ServerMsg};
use dt_rdzv_proto::rendezvous::MachineConfig;
use sim::{Sim, refusal};

#[test]
fn a_lookup_answers_each_rank_once_and_refuses_past_its_bound() {
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(4);
    for c in 0..4 {
        sim.join(c, "j", &spec, 2);
    }
    assert_eq!(sim.welcomes(0..4).len(), 4);
    // 100,000 copies of rank 1 (and some of rank 3): two peers, not 100,000.
    let mut ranks = vec![1u32; 100_000];
    ranks.extend([3, 1, 3, 99]);
    sim.send(0, ClientMsg::Lookup { ranks });
    let got = sim.take(0);
    let [ServerMsg::Peers(p)] = &got[..] else {
        panic!("{got:?}")
    };
    assert_eq!(p.iter().map(|p| p.rank).collect::<Vec<_>>(), vec![1, 3]);
    // More distinct ranks than the bound: refused, naming it; the member stays.
    let bound = MachineConfig::default().max_lookup_ranks as u32;
    sim.send(
        0,
        ClientMsg::Lookup {
            ranks: (0..=bound).collect(),
        },
    );
    let (code, msg) = refusal(&sim.take(0)).expect("refused");
    assert_eq!(code, RefusalCode::BadRequest);
    assert!(msg.contains("max_lookup_ranks"), "{msg}");
    assert!(!sim.closed.contains_key(&0));
}

#[test]
fn published_configuration_is_bounded_per_job_and_per_round_of_welcomes() {
    let mut sim = Sim::with(MachineConfig {
        max_welcome_config_bytes: 8 << 20,
        ..MachineConfig::default()
    });
    let spec = JobSpec::fixed(3);
    sim.join_as(0, "j", "main", "a", &spec, Role::Main);
    sim.join_as(1, "j", "w1", "a", &spec, Role::Worker);
    sim.join_as(2, "j", "w2", "a", &spec, Role::Worker);
    assert_eq!(sim.welcomes(0..3).len(), 3);
    let mib = vec![7u8; 1 << 20];
    let publish = |sim: &mut Sim, key: &str| {
        sim.send(
            0,
            ClientMsg::Publish {
                key: key.into(),
                value: mib.clone(),
            },
        );
        refusal(&sim.take(0))
    };
    // 2 MiB each in 3 welcomes: 6 MiB, within 8 MiB. A third: 9 MiB, refused.
    assert_eq!(publish(&mut sim, "a"), None);
    assert_eq!(publish(&mut sim, "b"), None);
    let (code, msg) = publish(&mut sim, "c").expect("refused");
    assert_eq!(code, RefusalCode::BadRequest);
    assert!(msg.contains("max_welcome_config_bytes"), "{msg}");
    // Replacing a value is not adding one.
    assert_eq!(publish(&mut sim, "a"), None);

    // Per job: 4 MiB by default, whatever the members.
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(1);
    sim.join_as(0, "k", "main", "a", &spec, Role::Main);
    assert_eq!(sim.welcomes(0..1).len(), 1);
    let mut refused = None;
    for i in 0..5 {
        sim.send(
            0,
            ClientMsg::Publish {
                key: format!("k{i}"),
                value: mib.clone(),
            },
        );
        if let Some(r) = refusal(&sim.take(0)) {
            refused = Some((i, r));
            break;
        }
    }
    let (i, (_, msg)) = refused.expect("a fifth MiB is refused");
    assert_eq!(i, 3, "three MiB plus keys fit, the fourth does not: {msg}");
    assert!(msg.contains("max_config_bytes"), "{msg}");
}

#[test]
fn welcomes_share_the_configuration_and_the_table_and_the_table_is_capped() {
    use dt_rdzv_proto::rendezvous::defaults::MAX_FULL_PEER_TABLE;
    use std::sync::Arc;

    // Published configuration, then a new round: every welcome holds the same copy.
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(3);
    sim.join_as(0, "j", "main", "a", &spec, Role::Main);
    sim.join_as(1, "j", "w1", "a", &spec, Role::Worker);
    sim.join_as(2, "j", "w2", "a", &spec, Role::Worker);
    let first = sim.welcomes(0..3);
    assert!(Arc::ptr_eq(&first[&0].peers, &first[&2].peers), "one table");
    sim.send(
        0,
        ClientMsg::Publish {
            key: "k".into(),
            value: vec![1; 1000],
        },
    );
    let configs: Vec<Arc<Vec<u8>>> = (0..3)
        .flat_map(|c| sim.take(c))
        .filter_map(|m| match m {
            ServerMsg::Config { value, .. } => Some(value),
            _ => None,
        })
        .collect();
    assert_eq!(configs.len(), 3);
    assert!(
        configs.iter().all(|v| Arc::ptr_eq(v, &configs[0])),
        "one value"
    );

    // A job asking for the whole table at any size gets it up to the server's cap only.
    let n = MAX_FULL_PEER_TABLE as u64 + 1;
    for (world, all) in [(MAX_FULL_PEER_TABLE as u64, true), (n, false)] {
        let mut sim = Sim::new();
        let spec = JobSpec {
            full_peer_table_max: u32::MAX,
            ..JobSpec::fixed(world as u32)
        };
        for c in 0..world {
            sim.join(c, "big", &spec, 8);
        }
        let w = sim.welcomes(0..world);
        assert_eq!(w.len() as u64, world);
        assert_eq!(w[&0].all_peers, all, "world {world}");
        assert!(w[&0].peers.len() as u64 <= if all { world } else { 64 });
    }
}

#[test]
fn published_configuration_is_counted_server_wide_and_refused_past_the_servers_room() {
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(1);
    for (c, job) in [(0, "a"), (1, "b")] {
        sim.join_as(c, job, "main", "h", &spec, Role::Main);
    }
    assert_eq!(sim.welcomes(0..2).len(), 2);
    let publish = |sim: &mut Sim, c, key: &str, n: usize| {
        sim.send(
            c,
            ClientMsg::Publish {
                key: key.into(),
                value: vec![1; n],
            },
        );
        refusal(&sim.take(c))
    };
    assert_eq!(publish(&mut sim, 0, "k", 1000), None);
    assert_eq!(publish(&mut sim, 1, "k", 500), None);
    assert_eq!(sim.m.config_bytes(), 1502);
    // Replacing counts the difference.
    assert_eq!(publish(&mut sim, 0, "k", 100), None);
    assert_eq!(sim.m.config_bytes(), 602);
    // The server's budget leaves 50 bytes: more is refused, naming it; a smaller
    // replacement still goes through.
    sim.m.set_config_room(Some(50));
    let (code, msg) = publish(&mut sim, 1, "l", 100).expect("refused");
    assert_eq!(code, RefusalCode::BadRequest);
    assert!(
        msg.contains("--max-memory-bytes") && msg.contains("50 bytes left"),
        "{msg}"
    );
    assert_eq!(publish(&mut sim, 1, "k", 10), None);
    assert_eq!(sim.m.config_bytes(), 112);
    sim.m.set_config_room(None);
    // A job that finishes and is forgotten takes its bytes with it.
    sim.send(0, ClientMsg::Finish);
    sim.advance_with_heartbeats(std::time::Duration::from_secs(3600), &[1]);
    assert_eq!(sim.m.config_bytes(), 11, "job b's one entry is left");
}

#[test]
fn one_token_holds_a_bounded_number_of_connections_that_are_not_members() {
    use dt_rdzv_proto::rendezvous::job_token;

    let mut sim = Sim::with(MachineConfig {
        token: Some(sim::TOKEN.into()),
        max_operator_connections: 3,
        ..MachineConfig::default()
    });
    let spec = JobSpec::fixed(2);
    // Members are not counted: two members of job j.
    sim.join(0, "j", &spec, 1);
    sim.join(1, "j", &spec, 1);
    let token = job_token(sim::TOKEN, "j");
    let status = |sim: &mut Sim, conn, token: &str| {
        sim.send(
            conn,
            ClientMsg::Status {
                token: token.into(),
                job: Some("j".into()),
            },
        );
        sim.take(conn)
    };
    for c in 10..13 {
        let got = status(&mut sim, c, &token);
        assert!(matches!(got[..], [ServerMsg::Status(_)]), "{got:?}");
    }
    // Asking again on a connection already counted is not another.
    assert!(matches!(
        status(&mut sim, 10, &token)[..],
        [ServerMsg::Status(_)]
    ));
    // A fourth connection on the job's token: refused and closed, naming the bound.
    let (code, msg) = refusal(&status(&mut sim, 13, &token)).expect("refused");
    assert_eq!(code, RefusalCode::BadRequest);
    assert!(msg.contains("max_operator_connections"), "{msg}");
    assert!(sim.closed.contains_key(&13));
    // The server's token is another token; a member asking is not counted.
    assert!(matches!(
        status(&mut sim, 20, sim::TOKEN)[..],
        [ServerMsg::Status(_)]
    ));
    assert!(matches!(
        status(&mut sim, 0, &token).last(),
        Some(ServerMsg::Status(_))
    ));
    // One closes: a newcomer takes its place.
    sim.close(11);
    assert!(matches!(
        status(&mut sim, 14, &token)[..],
        [ServerMsg::Status(_)]
    ));
    let (_, msg) = refusal(&status(&mut sim, 15, &token)).expect("full again");
    assert!(msg.contains("job \"j\"'s token holds 3"), "{msg}");
}
