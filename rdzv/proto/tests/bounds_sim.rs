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
