//! Simulation: two servers sharing one in-memory storage, the owner vanishing at every step of
//! a job's life, the members resuming on the other server.
//!
//! Each server is a sans-IO [`RendezvousMachine`](dt_rdzv_proto::rendezvous::RendezvousMachine)
//! with its [`Owners`](super::Owners) on a handle of one
//! [`MemoryStorage`](crate::server::ha::storage::MemoryStorage); one thread drives both on a
//! virtual clock, and each member is the native client's own session machine
//! ([`dt_rdzv_proto::native::member::Member`], the rules the real client follows): a join goes
//! to the first live server of the member's endpoint list (or where a `Redirect` sends it),
//! the machine remembers every welcome as the place to resume, and a member whose server is
//! gone rejoins the next one with that place (see `world`). The server's own routing is
//! replayed too: a join is fed to the machine only when [`Owners::claim`](super::Owners::claim)
//! says the job is this server's, completed rounds are written as
//! [`Note::Round`](super::Note::Round). The owner vanishing is a crash: its machine is dropped
//! and its lease revoked (what the lease's expiry does in etcd, without waiting for it), and
//! its members' connections go silent.
//!
//! The script (a job of 2..=3 members): three members form round 1, it runs, one member leaves
//! (round 2 with two, at once), a late joiner arrives and waits for the last call (round 3 with
//! three), it runs. For every cut point
//! the owner vanishes there, and the job must end as it does without a fault: the same members
//! in one round with ranks 0..3, at most one round more than the fault-free run, and a round
//! that was running when the owner vanished comes back as it was (same round, ranks, peers).
//! No member's session ends, and every member's rounds (the machine's) are its last welcome's.

mod world;

use std::collections::BTreeMap;
use std::time::Duration;

use dt_rdzv_proto::native::RoundCause;

use world::{JOB, PREFIX, Sim};

/// A member's place in its last round: (round, rank, world, peers as (rank, member)).
type Place = (u64, u32, u32, Vec<(u32, String)>);

/// One step of the script.
#[derive(Debug, Clone, Copy)]
enum Step {
    Join(usize),
    Leave(usize),
    Run(Duration),
}

const SCRIPT: &[Step] = &[
    Step::Join(0),
    Step::Join(1),
    Step::Join(2),
    Step::Run(Duration::from_secs(1)),
    Step::Leave(1),
    Step::Run(Duration::from_secs(2)),
    Step::Join(3),
    Step::Run(Duration::from_secs(2)),
];

impl Sim {
    fn step(&mut self, step: Step) {
        match step {
            Step::Join(i) => self.join(i),
            Step::Leave(i) => self.leave(i),
            Step::Run(d) => self.run(d),
        }
    }

    /// The places of the members that have not left.
    fn places(&self) -> BTreeMap<String, Place> {
        self.members
            .iter()
            .filter(|m| !m.left)
            .filter_map(|m| {
                let w = m.welcomes.last()?;
                let peers = w.peers.iter().map(|p| (p.rank, p.member.clone())).collect();
                Some((m.name.clone(), (w.round, w.rank, w.world, peers)))
            })
            .collect()
    }

    fn owner(&self) -> Option<String> {
        let v = self.storage.peek(&format!("{PREFIX}owner/{JOB}"))?;
        let v: serde_json::Value = serde_json::from_slice(&v).ok()?;
        v["endpoint"].as_str().map(str::to_string)
    }

    fn record(&self) -> Option<serde_json::Value> {
        let v = self.storage.peek(&format!("{PREFIX}round/{JOB}"))?;
        serde_json::from_slice(&v).ok()
    }
}

/// The script with the owner vanishing before step `cut` (`None`: no fault), then long enough
/// for any rebuilding to settle.
/// Also whether a running round was cut (and came back as it was).
fn play(cut: Option<usize>) -> (Sim, bool) {
    let mut sim = Sim::new();
    let mut resumed = false;
    for (k, &step) in SCRIPT.iter().enumerate() {
        if cut == Some(k) {
            resumed = vanish_owner(&mut sim, k);
        }
        sim.step(step);
    }
    if cut == Some(SCRIPT.len()) {
        resumed = vanish_owner(&mut sim, SCRIPT.len());
    }
    let settle = sim.config.resume_window + Duration::from_secs(2);
    sim.run(settle);
    (sim, resumed)
}

/// The owner vanishes; a round that was running comes back as it was, at once (then true).
fn vanish_owner(sim: &mut Sim, k: usize) -> bool {
    let owner = sim.owner();
    let s = match &owner {
        Some(e) => sim.servers.iter().position(|x| &x.endpoint == e).unwrap(),
        None => 0, // Before any join: the first server of most lists goes.
    };
    let before = sim.places();
    let running = before.values().next().map(|p| (p.0, p.2));
    let all_in = running.is_some_and(|(round, world)| {
        before.len() == world as usize && before.values().all(|p| (p.0, p.2) == (round, world))
    });
    let completed = sim.rounds.len();
    sim.vanish(s);
    if owner.is_some() {
        assert_ne!(
            sim.owner(),
            owner,
            "cut {k}: the dead server still owns the job"
        );
    }
    if all_in {
        assert_eq!(
            sim.places(),
            before,
            "cut {k}: the running round came back with other places"
        );
        let (_, _, cause) = sim.rounds.last().expect("the round completed again");
        assert!(
            sim.rounds.len() == completed + 1 && matches!(cause, RoundCause::Resumed { .. }),
            "cut {k}: the round was rebuilt from the members' resumes"
        );
    }
    all_in
}

/// Ranks 0..n, one round, the same peer table everywhere; returns the round.
fn check_final(sim: &Sim, k: Option<usize>) -> u64 {
    let places = sim.places();
    let names: Vec<&str> = places.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["m0", "m2", "m3"],
        "cut {k:?}: who is in the last round"
    );
    let (round, _, world, peers) = places["m0"].clone();
    assert_eq!(world, 3, "cut {k:?}");
    let mut ranks: Vec<u32> = places.values().map(|p| p.1).collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2], "cut {k:?}: ranks");
    for (name, (r, rank, w, p)) in &places {
        assert_eq!((*r, *w, p), (round, world, &peers), "cut {k:?}: {name}");
        assert!(
            p.contains(&(*rank, name.clone())),
            "cut {k:?}: {name}'s own entry"
        );
    }
    for m in sim.members.iter().filter(|m| !m.left) {
        assert_eq!(m.ended, None, "cut {k:?}: {}'s session ended", m.name);
        let rounds = m.m.as_ref().expect("joined").rounds();
        let taken = rounds.welcome().map(|w| (w.round, w.rank, w.world));
        let (r, rank, w, _) = &places[&m.name];
        assert_eq!(
            taken,
            Some((*r, *rank, *w)),
            "cut {k:?}: {}'s rounds",
            m.name
        );
        assert!(
            !rounds.changed() && rounds.stop().is_none(),
            "cut {k:?}: {}'s rounds: {rounds:?}",
            m.name
        );
    }
    let record = sim.record().expect("the round record");
    assert_eq!(
        record["round"], round,
        "cut {k:?}: the record is the last round"
    );
    assert_eq!(
        record["endpoint"].as_str(),
        sim.owner().as_deref(),
        "cut {k:?}: written by the owner"
    );
    round
}

#[test]
fn the_owner_vanishing_at_every_step_costs_at_most_one_round() {
    let (clean, _) = play(None);
    let clean_round = check_final(&clean, None);
    assert!(
        clean.redirects > 0,
        "members reaching B first are sent to A"
    );
    assert!(
        clean.rounds.iter().all(|r| r.0 == 0),
        "A owns the job throughout"
    );
    let mut resumed = Vec::new();
    for cut in 0..=SCRIPT.len() {
        let (sim, r) = play(Some(cut));
        if r {
            resumed.push(cut);
        }
        let round = check_final(&sim, Some(cut));
        eprintln!(
            "cut {cut}: rounds {:?}",
            sim.rounds.iter().map(|r| (r.1, &r.2)).collect::<Vec<_>>()
        );
        assert!(
            round <= clean_round + 1,
            "cut {cut}: round {round}, against {clean_round} without the fault"
        );
        assert!(
            sim.members
                .iter()
                .all(|m| m.conn.is_none_or(|(s, _)| s == 1)),
            "cut {cut}: every member is on the survivor"
        );
        assert_eq!(sim.owner().as_deref(), Some("B:29401"), "cut {cut}");
    }
    // Cut while round 1 runs (before and after a second), round 2 runs (it forms at once when
    // m1 leaves; cut before and after a second, and with the late joiner waiting), and round 3
    // runs. Cuts 0-2 find the first round forming: its members join the survivor afresh.
    assert_eq!(
        resumed,
        [3, 4, 5, 6, 7, 8],
        "the cuts that found a running round"
    );
}
