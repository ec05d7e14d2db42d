//! Simulation: two servers sharing one in-memory storage, the owner vanishing at every step of
//! a job's life, the members resuming on the other server.
//!
//! Each server is a sans-IO [`RendezvousMachine`] with its [`Owners`] on a handle of one
//! [`MemoryStorage`]; one thread drives both on a virtual clock and plays the members the way
//! the native client's session behaves: a join goes to the first live server of the member's
//! endpoint list (or where a `Redirect` sends it), every welcome is remembered as the place to
//! resume, and a member whose server is gone joins the next one again with that place. The
//! server's own routing is replayed too: a join is fed to the machine only when
//! [`Owners::claim`] says the job is this server's, completed rounds are written as
//! [`Note::Round`]. The owner vanishing is a crash: its machine is dropped and its lease
//! revoked (what the lease's expiry does in etcd, without waiting for it).
//!
//! The script (a job of 2..=3 members): three members form round 1, it runs, one member leaves
//! (round 2 with two, at once), a late joiner arrives and waits for the last call (round 3 with
//! three), it runs. For every cut point
//! the owner vanishes there, and the job must end as it does without a fault: the same members
//! in one round with ranks 0..3, at most one round more than the fault-free run, and a round
//! that was running when the owner vanished comes back as it was (same round, ranks, peers).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dt_rdzv_proto::native::{
    ClientMsg, JobSpec, Join, Resume, Role, RoundCause, ServerMsg, Welcome,
};
use dt_rdzv_proto::rendezvous::{Action, ConnId, Event, Input, MachineConfig, RendezvousMachine};

use super::{Note, Owners, Verdict};
use crate::server::ha::storage::{MemoryStorage, Storage};

const JOB: &str = "sim";
const TOKEN: &str = "sim-token";
const PREFIX: &str = "/dt-rdzv/";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

struct Server {
    endpoint: String,
    owners: Arc<Owners>,
    machine: Option<RendezvousMachine>,
}

#[derive(Default)]
struct Member {
    name: String,
    /// Its endpoint list, as server indices.
    order: Vec<usize>,
    /// (server, connection) while connected.
    conn: Option<(usize, ConnId)>,
    /// Where it resumes (the session's `resume`).
    resume: Option<Resume>,
    /// Its welcomes, in order.
    welcomes: Vec<Welcome>,
    left: bool,
}

/// A member's place in its last round: (round, rank, world, peers as (rank, member)).
type Place = (u64, u32, u32, Vec<(u32, String)>);

struct Sim {
    rt: tokio::runtime::Runtime,
    storage: MemoryStorage,
    servers: Vec<Server>,
    members: Vec<Member>,
    spec: JobSpec,
    config: MachineConfig,
    now: Instant,
    next_conn: ConnId,
    /// Who holds each connection.
    conns: BTreeMap<ConnId, usize>,
    redirects: usize,
    /// (server, round, cause) of every completed round.
    rounds: Vec<(usize, u64, RoundCause)>,
}

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
    fn new() -> Self {
        let rt = rt();
        let storage = MemoryStorage::new();
        let config = MachineConfig {
            token: Some(TOKEN.into()),
            ..MachineConfig::default()
        };
        let servers = ["A", "B"]
            .into_iter()
            .map(|name| {
                let endpoint = format!("{name}:29401");
                let owners = rt
                    .block_on(Owners::start(
                        Arc::new(storage.handle()),
                        PREFIX.into(),
                        Duration::from_secs(3600),
                        endpoint.clone(),
                        format!("{name}:29400"),
                        format!("{name}:29510"),
                    ))
                    .expect("the lease");
                Server {
                    endpoint,
                    owners,
                    machine: Some(RendezvousMachine::new(config.clone())),
                }
            })
            .collect();
        // Members 1 and 3 reach B first (B sends them to the owner while it lives).
        let members = (0..4)
            .map(|i| Member {
                name: format!("m{i}"),
                order: if i % 2 == 1 { vec![1, 0] } else { vec![0, 1] },
                ..Member::default()
            })
            .collect();
        let spec = JobSpec {
            last_call_ms: 500,
            ..JobSpec::elastic(2, 3)
        };
        Self {
            rt,
            storage,
            servers,
            members,
            spec,
            config,
            now: Instant::now(),
            next_conn: 1,
            conns: BTreeMap::new(),
            redirects: 0,
            rounds: Vec::new(),
        }
    }

    /// Member `i` joins (again, with its resume if it has one), through its endpoint list.
    fn join(&mut self, i: usize) {
        let order = self.members[i].order.clone();
        let mut at = order
            .into_iter()
            .find(|&s| self.servers[s].machine.is_some());
        for _ in 0..4 {
            let Some(s) = at else {
                panic!("{}: no server is up", self.members[i].name);
            };
            let verdict = self.rt.block_on(self.servers[s].owners.claim(JOB));
            match verdict {
                Verdict::Mine => return self.connect(i, s),
                Verdict::Elsewhere { endpoint, .. } => {
                    self.redirects += 1;
                    at = self.servers.iter().position(|x| x.endpoint == endpoint);
                    assert!(
                        at.is_some_and(|s| self.servers[s].machine.is_some()),
                        "{} sent to {endpoint}, which is down: a dead owner's claim outlived \
                         its lease",
                        self.members[i].name
                    );
                }
                Verdict::Unknown(why) => panic!("the storage did not answer: {why}"),
            }
        }
        panic!("{}: redirected in a loop", self.members[i].name);
    }

    fn connect(&mut self, i: usize, s: usize) {
        let conn = self.next_conn;
        self.next_conn += 1;
        self.conns.insert(conn, i);
        let m = &mut self.members[i];
        m.conn = Some((s, conn));
        let join = Join {
            job: JOB.into(),
            token: TOKEN.into(),
            member: m.name.clone(),
            node: format!("node-{}", m.name),
            addrs: vec![format!("10.0.0.{i}:40000")],
            host: Vec::new(),
            role: Role::Worker,
            spec: self.spec.clone(),
            resume: m.resume,
        };
        self.input(
            s,
            Input::Connected {
                conn,
                observed_ip: format!("10.0.0.{i}"),
            },
        );
        self.input(
            s,
            Input::Message {
                conn,
                msg: ClientMsg::Join(join),
            },
        );
    }

    fn input(&mut self, s: usize, input: Input) {
        let now = self.now;
        if let Some(m) = self.servers[s].machine.as_mut() {
            m.handle(now, input);
        }
        self.drain(s);
    }

    /// Carries out server `s`'s actions: messages to the members, notes to the storage.
    fn drain(&mut self, s: usize) {
        loop {
            let Some(a) = self.servers[s]
                .machine
                .as_mut()
                .and_then(|m| m.poll_action())
            else {
                return;
            };
            match a {
                Action::Send { conn, msg } => self.deliver(conn, msg),
                Action::Close { conn, .. } => {
                    if let Some(i) = self.conns.remove(&conn) {
                        self.members[i].conn = None;
                    }
                }
                Action::Event(Event::RoundComplete {
                    job,
                    round,
                    world,
                    cause,
                    ..
                }) => {
                    self.rounds.push((s, round, cause));
                    let owners = self.servers[s].owners.clone();
                    self.rt
                        .block_on(owners.apply(Note::Round { job, round, world }));
                }
                Action::Event(_) => {}
            }
        }
    }

    fn deliver(&mut self, conn: ConnId, msg: ServerMsg) {
        let Some(&i) = self.conns.get(&conn) else {
            return;
        };
        let m = &mut self.members[i];
        if let ServerMsg::Welcome(w) = msg {
            m.resume = Some(Resume {
                round: w.round,
                rank: w.rank,
                world: w.world,
                restarts: w.restarts,
            });
            m.welcomes.push(w);
        }
    }

    fn leave(&mut self, i: usize) {
        let (s, conn) = self.members[i]
            .conn
            .expect("a member that leaves is connected");
        self.members[i].left = true;
        self.input(
            s,
            Input::Message {
                conn,
                msg: ClientMsg::Leave,
            },
        );
        self.input(
            s,
            Input::Closed {
                conn,
                why: "left".into(),
            },
        );
        self.conns.remove(&conn);
        self.members[i].conn = None;
    }

    /// Runs the clock `d` on, connected members sending heartbeats at the machine's rate.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        let step = self.config.heartbeat_interval;
        while self.now < end {
            for i in 0..self.members.len() {
                if let Some((s, conn)) = self.members[i].conn {
                    let msg = ClientMsg::Heartbeat { seq: 0 };
                    self.input(s, Input::Message { conn, msg });
                }
            }
            let next = (self.now + step).min(end);
            for s in 0..self.servers.len() {
                while let Some(t) = self.servers[s]
                    .machine
                    .as_ref()
                    .and_then(|m| m.poll_timeout())
                {
                    if t > next {
                        break;
                    }
                    self.now = self.now.max(t);
                    let now = self.now;
                    if let Some(m) = self.servers[s].machine.as_mut() {
                        m.handle_timeout(now);
                    }
                    self.drain(s);
                }
            }
            self.now = next;
        }
    }

    fn step(&mut self, step: Step) {
        match step {
            Step::Join(i) => self.join(i),
            Step::Leave(i) => self.leave(i),
            Step::Run(d) => self.run(d),
        }
    }

    /// Server `s` crashes: its machine is gone, its lease with it; its members notice and join
    /// the next server of their lists with the place they held.
    fn vanish(&mut self, s: usize) {
        self.servers[s].machine = None;
        let lease = self.servers[s].owners.lock().lease;
        self.rt
            .block_on(self.storage.revoke(lease))
            .expect("the in-memory storage answers");
        let lost: Vec<usize> = (0..self.members.len())
            .filter(|&i| matches!(self.members[i].conn, Some((x, _)) if x == s))
            .collect();
        for &i in &lost {
            if let Some((_, conn)) = self.members[i].conn.take() {
                self.conns.remove(&conn);
            }
        }
        for i in lost {
            self.join(i);
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
