//! Fuzzes the rendezvous machine as a server drives it: up to 8 connections at once, three
//! job names (on a server that holds at most two jobs), a few member ids and nodes, and a
//! virtual clock. The input is a list of operations (connect, join, heartbeat, leave, finish,
//! publish, next round, lookup, status, stop, bad frames, close, time passing), decoded with
//! `arbitrary`. The driver is modelled on `rdzv/src/server`: connection ids are fresh per
//! connection unless an operation reuses the slot's last one, a connection the machine closes
//! gets its `Closed` when the fuzzer closes or reconnects the slot, and messages may still
//! arrive on it meanwhile only when an operation says so (the race of frames read in one chunk
//! with the one that got the connection closed).
//!
//! Checked after every operation, besides "no panic, no endless loop, bounded memory":
//!
//! * every `Welcome` is self-consistent: rank < world <= the job's `max_members`, local rank
//!   < local world, node rank < nodes, the member's own entry (its id, its rank) in `peers`,
//!   peers' ranks distinct and below world, the whole table when `all_peers`;
//! * the Welcomes of one round of one job (a job name again after it was forgotten is another
//!   job) all come in one step, as many as the round's `RoundComplete` world, with one world
//!   size and distinct members, and their ranks are exactly 0..world;
//! * a connection's Welcomes name the job it joined, a round not below the one its `Joined`
//!   named, and rounds that go up;
//! * nothing is sent to a connection the machine closed, or whose `Closed` the driver
//!   delivered, unless a message arrived on it afterwards (the race above) or its id was
//!   connected again;
//! * a running job's active members hold exactly the ranks 0..world (status), and every
//!   member holds a connection of its own that the driver still has open (or that raced past
//!   its close): a member left on a connection that is gone would never be noticed;
//! * after `handle_timeout(t)`, `poll_timeout()` is `None` or later than `t`;
//! * at the end, with every connection closed and a day passed, the machine holds no job and
//!   no deadline.
//!
//! Run: `scripts/fuzz.sh`, or `RUSTC_BOOTSTRAP=1 cargo fuzz run rendezvous_machine`.
#![no_main]

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use dt_rdzv_proto::native::{
    ClientMsg, CodecError, JobSpec, Join, LateJoin, Resume, Role, ServerMsg, Welcome,
};
use dt_rdzv_proto::rendezvous::{
    Action, ConnId, Event, Input, MachineConfig, RendezvousMachine, job_token,
};
use libfuzzer_sys::fuzz_target;

const SLOTS: usize = 8;
const JOBS: [&str; 3] = ["a", "b", "c"];
const MEMBERS: [&str; 5] = ["m0", "m1", "m2", "m3", "m4"];
const NODES: [&str; 3] = ["n0", "n1", "n2"];
const TOKEN: &str = "t";
const MAX_OPS: usize = 256;

/// A number: mostly small, sometimes anything.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Num {
    Small(u8),
    Big(u64),
}

impl Num {
    fn u64(self) -> u64 {
        match self {
            Num::Small(n) => u64::from(n % 8),
            Num::Big(n) => n,
        }
    }

    fn u32(self) -> u32 {
        match self {
            Num::Small(n) => u32::from(n % 8),
            Num::Big(n) => n as u32,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Token {
    Server,
    Job,
    OtherJob,
    Wrong,
}

/// A spec from a few shared presets (so that members of one job agree), or a custom one.
#[derive(Arbitrary, Debug, Clone)]
enum Spec {
    Pair,
    Elastic,
    OnRequest,
    Custom {
        min: Num,
        max: Num,
        spares: u8,
        last_call: Num,
        join_timeout: Num,
        max_rounds: u8,
        max_restarts: Option<u8>,
        on_request: bool,
        ephemeral: bool,
        ttl: Option<Num>,
        full_peer_table_max: u8,
    },
}

impl Spec {
    fn spec(&self) -> JobSpec {
        match self {
            Spec::Pair => JobSpec {
                max_spares: 1,
                last_call_ms: 0,
                ..JobSpec::elastic(1, 2)
            },
            Spec::Elastic => JobSpec {
                max_spares: 2,
                last_call_ms: 100,
                join_timeout_ms: 30_000,
                full_peer_table_max: 2,
                ..JobSpec::elastic(2, 4)
            },
            Spec::OnRequest => JobSpec {
                max_spares: 1,
                last_call_ms: 50,
                late_join: LateJoin::OnRequest,
                max_restarts: Some(3),
                ttl_ms: Some(120_000),
                ..JobSpec::elastic(2, 3)
            },
            Spec::Custom {
                min,
                max,
                spares,
                last_call,
                join_timeout,
                max_rounds,
                max_restarts,
                on_request,
                ephemeral,
                ttl,
                full_peer_table_max,
            } => JobSpec {
                min_members: min.u32(),
                max_members: max.u32(),
                max_spares: u32::from(spares % 4),
                last_call_ms: last_call.u64().saturating_mul(50),
                join_timeout_ms: join_timeout.u64().saturating_mul(1000),
                max_rounds: u32::from(max_rounds % 5),
                max_restarts: max_restarts.map(|r| u32::from(r % 4)),
                late_join: if *on_request {
                    LateJoin::OnRequest
                } else {
                    LateJoin::Immediate
                },
                ephemeral: *ephemeral,
                ttl_ms: ttl.map(|t| t.u64().saturating_mul(1000)),
                full_peer_table_max: u32::from(full_peer_table_max % 5),
            },
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
struct JoinOp {
    job: u8,
    member: u8,
    node: u8,
    main: bool,
    token: Token,
    spec: Spec,
    resume: Option<(Num, Num, Num, Num)>,
}

#[derive(Arbitrary, Debug, Clone)]
enum Msg {
    Join(JoinOp),
    Heartbeat,
    Leave,
    Finish,
    Publish { key: u8, len: u8 },
    NextRound,
    Lookup(Vec<Num>),
    Status { token: Token, job: Option<u8> },
    Stop { token: Token, job: u8 },
    /// A data-plane report about a rank of a round (often a bad one).
    Report { round: Num, rank: Num },
    /// An answer to a probe (nonces are rarely right: the machine must not care).
    Alive(Num),
}

#[derive(Arbitrary, Debug, Clone)]
enum Step {
    Millis(u8),
    Tenths(u8),
    Seconds(u16),
    Hours(u8),
}

#[derive(Arbitrary, Debug, Clone)]
enum Op {
    /// Connects the slot (ending its previous connection first), with a fresh id or its last.
    Connect { slot: u8, reuse: bool },
    /// A message on the slot's connection; `late`: even if the machine closed it already.
    Send { slot: u8, late: bool, msg: Msg },
    /// Undecodable bytes on the slot's connection.
    Malformed { slot: u8 },
    /// The slot's connection ends.
    Close { slot: u8 },
    /// Every open connection sends a heartbeat.
    HeartbeatAll,
    /// Time passes, running every deadline on the way.
    Advance(Step),
    /// An operator stops a job (HTTP door).
    OperatorStop { job: u8 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Idle,
    Open,
    /// The machine closed it; the driver has not delivered `Closed` yet.
    Closing,
}

/// A round of a job: (job name, incarnation, round number).
type RoundKey = (String, u64, u64);

/// The Welcomes of one round seen in one step.
struct RoundWelcomes {
    world: u32,
    ranks: Vec<u32>,
    members: HashSet<String>,
}

#[derive(Debug, Default)]
struct ConnCheck {
    /// The machine sent `Action::Close`.
    closed: bool,
    /// A message was delivered after the machine closed it.
    late: bool,
    /// The driver delivered `Closed` (and has not connected the id again).
    gone: bool,
    /// The job and round its last `Joined` named.
    joined: Option<(String, u64)>,
    /// The round of its last Welcome.
    last_round: Option<u64>,
}

struct Driver {
    m: RendezvousMachine,
    now: Instant,
    slots: [(SlotState, Option<ConnId>); SLOTS],
    next_id: ConnId,
    checks: HashMap<ConnId, ConnCheck>,
    /// Per job name: its incarnation (JobCreated events so far) and current spec.
    incarnation: HashMap<String, u64>,
    specs: HashMap<(String, u64), JobSpec>,
    /// Rounds whose Welcomes were seen, by (job, incarnation, round).
    rounds_seen: HashSet<RoundKey>,
}

impl Driver {
    fn new() -> Self {
        let config = MachineConfig {
            token: Some(TOKEN.into()),
            max_jobs: 2,
            max_config_value: 64,
            max_config_entries: 4,
            ..MachineConfig::default()
        };
        Self {
            m: RendezvousMachine::new(config),
            now: Instant::now(),
            slots: [(SlotState::Idle, None); SLOTS],
            next_id: 1,
            checks: HashMap::new(),
            incarnation: HashMap::new(),
            specs: HashMap::new(),
            rounds_seen: HashSet::new(),
        }
    }

    fn input(&mut self, input: Input) {
        self.m.handle(self.now, input);
        self.drain();
    }

    /// Carries out the machine's actions and checks them.
    fn drain(&mut self) {
        let mut rounds: HashMap<RoundKey, RoundWelcomes> = HashMap::new();
        while let Some(action) = self.m.poll_action() {
            match action {
                Action::Send { conn, msg } => {
                    let c = self.checks.entry(conn).or_default();
                    assert!(
                        !(c.closed || c.gone) || c.late,
                        "sent to connection {conn} after it was closed: {msg:?}"
                    );
                    match msg {
                        ServerMsg::Joined { job, round, .. } => {
                            c.joined = Some((job, round));
                            c.last_round = None;
                        }
                        ServerMsg::Welcome(w) => {
                            let inc = self.incarnation.get(&w.job).copied().unwrap_or(0);
                            let spec = self.specs.get(&(w.job.clone(), inc));
                            check_welcome(conn, &w, spec);
                            let c = self.checks.entry(conn).or_default();
                            let (job, joined_round) =
                                c.joined.clone().expect("a Welcome after a Joined");
                            assert_eq!(job, w.job, "conn {conn} welcomed into another job");
                            assert!(
                                w.round >= joined_round,
                                "conn {conn}: welcome round {} < joined round {joined_round}",
                                w.round
                            );
                            if let Some(last) = c.last_round {
                                assert!(
                                    w.round > last,
                                    "conn {conn}: round {} after round {last}",
                                    w.round
                                );
                            }
                            c.last_round = Some(w.round);
                            let me = w
                                .peers
                                .iter()
                                .find(|p| p.rank == w.rank)
                                .map(|p| p.member.clone())
                                .unwrap_or_default();
                            let r = rounds.entry((w.job.clone(), inc, w.round)).or_insert(
                                RoundWelcomes {
                                    world: w.world,
                                    ranks: Vec::new(),
                                    members: HashSet::new(),
                                },
                            );
                            assert_eq!(r.world, w.world, "one round, one world");
                            r.ranks.push(w.rank);
                            assert!(
                                r.members.insert(me),
                                "a member welcomed twice into one round"
                            );
                        }
                        _ => {}
                    }
                }
                Action::Close { conn, .. } => {
                    let c = self.checks.entry(conn).or_default();
                    c.closed = true;
                    for s in self.slots.iter_mut() {
                        if s.1 == Some(conn) && s.0 == SlotState::Open {
                            s.0 = SlotState::Closing;
                        }
                    }
                }
                Action::Event(e) => match e {
                    Event::JobCreated { job } => {
                        let inc = self.incarnation.entry(job.clone()).or_default();
                        *inc += 1;
                        let inc = *inc;
                        if let Ok(s) = self.m.status(self.now, Some(&job)) {
                            self.specs.insert((job, inc), s[0].spec.clone());
                        }
                    }
                    Event::RoundComplete {
                        job, round, world, ..
                    } => {
                        let inc = self.incarnation.get(&job).copied().unwrap_or(0);
                        let r = rounds.get(&(job.clone(), inc, round));
                        let got = r.map_or(0, |r| r.ranks.len());
                        assert_eq!(
                            got, world as usize,
                            "round {round} of job {job:?}: {got} welcomes for a world of {world}"
                        );
                    }
                    _ => {}
                },
            }
        }
        for (
            key,
            RoundWelcomes {
                world, mut ranks, ..
            },
        ) in rounds
        {
            ranks.sort_unstable();
            assert!(
                ranks.iter().copied().eq(0..world),
                "round {key:?}: ranks {ranks:?} for a world of {world}"
            );
            assert!(
                self.rounds_seen.insert(key.clone()),
                "round {key:?} welcomed again"
            );
        }
    }

    /// What the machine holds, against what the driver knows.
    fn check_state(&self) {
        let statuses = self.m.status(self.now, None).expect("status of all jobs");
        let mut members = 0;
        for s in &statuses {
            members += s.members.len();
            if s.state == "running" {
                let mut ranks: Vec<u32> = s
                    .members
                    .iter()
                    .filter(|m| m.state == "active")
                    .filter_map(|m| m.rank)
                    .collect();
                ranks.sort_unstable();
                assert!(
                    ranks.iter().copied().eq(0..s.world),
                    "running job {:?}: active ranks {ranks:?}, world {}",
                    s.job,
                    s.world
                );
                assert!(s.world <= s.spec.max_members);
            }
        }
        assert_eq!(self.m.sizes(), (statuses.len(), members));
        // Each member holds its own connection, one the driver has open (or that raced past
        // its close): a member left on a connection that is gone would never be noticed.
        let holders: HashSet<ConnId> = self
            .slots
            .iter()
            .filter(|s| {
                s.0 == SlotState::Open
                    || s.0 == SlotState::Closing
                        && s.1
                            .is_some_and(|c| self.checks.get(&c).is_some_and(|c| c.late))
            })
            .filter_map(|s| s.1)
            .collect();
        let mut held = HashSet::new();
        for s in &statuses {
            for m in &s.members {
                let conn = m
                    .addrs
                    .iter()
                    .find_map(|a| a.strip_prefix('c')?.parse::<ConnId>().ok())
                    .expect("the fuzzer's addresses name the connection");
                assert!(
                    holders.contains(&conn),
                    "member {:?} of job {:?} on connection {conn}, which is gone",
                    m.member,
                    s.job
                );
                assert!(held.insert(conn), "connection {conn} holds two members");
            }
        }
        assert_eq!(held.len(), members);
    }

    /// Fires every deadline up to `until`, as a driver's timer would.
    fn run_until(&mut self, until: Instant) {
        for _ in 0..100_000 {
            match self.m.poll_timeout() {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.m.handle_timeout(self.now);
                    self.drain();
                    if let Some(next) = self.m.poll_timeout() {
                        assert!(
                            next > self.now,
                            "a deadline {:?} not after handle_timeout({:?})",
                            next.saturating_duration_since(self.now),
                            self.now
                        );
                    }
                }
                _ => {
                    self.now = self.now.max(until);
                    return;
                }
            }
        }
        panic!("more than 100000 deadlines in one step");
    }

    fn slot(&self, s: u8) -> usize {
        usize::from(s) % SLOTS
    }

    /// Ends the slot's connection, if any, telling the machine.
    fn end_conn(&mut self, slot: usize) {
        let (state, id) = self.slots[slot];
        if let (SlotState::Open | SlotState::Closing, Some(id)) = (state, id) {
            self.input(Input::Closed {
                conn: id,
                why: "fuzz".into(),
            });
            self.checks.entry(id).or_default().gone = true;
            self.slots[slot].0 = SlotState::Idle;
        }
    }

    fn op(&mut self, op: Op) {
        match op {
            Op::Connect { slot, reuse } => {
                let slot = self.slot(slot);
                self.end_conn(slot);
                let id = match self.slots[slot].1 {
                    Some(id) if reuse => id,
                    _ => {
                        self.next_id += 1;
                        self.next_id
                    }
                };
                self.checks.insert(id, ConnCheck::default());
                self.slots[slot] = (SlotState::Open, Some(id));
                self.input(Input::Connected {
                    conn: id,
                    observed_ip: format!("10.0.0.{slot}"),
                });
            }
            Op::Send { slot, late, msg } => {
                let slot = self.slot(slot);
                let (state, Some(id)) = self.slots[slot] else {
                    return;
                };
                match state {
                    SlotState::Idle => return,
                    SlotState::Closing if !late => return,
                    SlotState::Closing => self.checks.entry(id).or_default().late = true,
                    SlotState::Open => {}
                }
                let msg = self.message(slot, id, msg);
                self.input(Input::Message { conn: id, msg });
            }
            Op::Malformed { slot } => {
                let slot = self.slot(slot);
                if let (SlotState::Open, Some(id)) = self.slots[slot] {
                    self.input(Input::Malformed {
                        conn: id,
                        error: CodecError::Flags(1),
                    });
                }
            }
            Op::Close { slot } => {
                let slot = self.slot(slot);
                self.end_conn(slot);
            }
            Op::HeartbeatAll => {
                for slot in 0..SLOTS {
                    if let (SlotState::Open, Some(id)) = self.slots[slot] {
                        self.input(Input::Message {
                            conn: id,
                            msg: ClientMsg::Heartbeat { seq: 0 },
                        });
                    }
                }
            }
            Op::Advance(step) => {
                let d = match step {
                    Step::Millis(n) => Duration::from_millis(u64::from(n)),
                    Step::Tenths(n) => Duration::from_millis(100 * u64::from(n)),
                    Step::Seconds(n) => Duration::from_secs(u64::from(n)),
                    Step::Hours(n) => Duration::from_secs(3600 * u64::from(n)),
                };
                let until = self.now + d;
                self.run_until(until);
            }
            Op::OperatorStop { job } => {
                let job = JOBS[usize::from(job) % JOBS.len()];
                let _ = self.m.stop(self.now, job, "operator".into());
                self.drain();
            }
        }
        // The driver's timer: whatever fell due now.
        self.run_until(self.now);
        self.check_state();
    }

    fn token(&self, t: Token, job: &str) -> String {
        match t {
            Token::Server => TOKEN.into(),
            Token::Job => job_token(TOKEN, job),
            Token::OtherJob => job_token(TOKEN, if job == "a" { "b" } else { "a" }),
            Token::Wrong => "wrong".into(),
        }
    }

    fn message(&self, slot: usize, id: ConnId, msg: Msg) -> ClientMsg {
        let job = |j: u8| JOBS[usize::from(j) % JOBS.len()];
        match msg {
            Msg::Join(j) => {
                let name = job(j.job);
                let node = NODES[usize::from(j.node) % NODES.len()];
                ClientMsg::Join(Join {
                    job: name.into(),
                    token: self.token(j.token, name),
                    member: MEMBERS[usize::from(j.member) % MEMBERS.len()].into(),
                    node: node.into(),
                    addrs: vec![format!("{node}:{}", 40000 + slot), format!("c{id}")],
                    host: vec![u8::from(j.node); 32],
                    role: if j.main { Role::Main } else { Role::Worker },
                    spec: j.spec.spec(),
                    resume: j.resume.map(|(round, rank, world, restarts)| Resume {
                        round: round.u64(),
                        rank: rank.u32(),
                        world: world.u32(),
                        restarts: restarts.u32(),
                    }),
                })
            }
            Msg::Heartbeat => ClientMsg::Heartbeat { seq: 1 },
            Msg::Leave => ClientMsg::Leave,
            Msg::Finish => ClientMsg::Finish,
            Msg::Publish { key, len } => ClientMsg::Publish {
                key: if key % 8 == 7 {
                    String::new()
                } else {
                    format!("k{}", key % 6)
                },
                value: vec![key; usize::from(len)],
            },
            Msg::NextRound => ClientMsg::NextRound,
            Msg::Lookup(ranks) => ClientMsg::Lookup {
                ranks: ranks.into_iter().take(16).map(Num::u32).collect(),
            },
            Msg::Status { token, job: j } => {
                let name = j.map(job);
                ClientMsg::Status {
                    token: self.token(token, name.unwrap_or("a")),
                    job: name.map(Into::into),
                }
            }
            Msg::Stop { token, job: j } => ClientMsg::Stop {
                token: self.token(token, job(j)),
                job: job(j).into(),
                reason: "fuzz".into(),
            },
            Msg::Report { round, rank } => ClientMsg::Report {
                round: round.u64(),
                rank: rank.u32(),
                evidence: "fuzz".into(),
            },
            Msg::Alive(n) => ClientMsg::Alive { nonce: n.u64() },
        }
    }
}

fn check_welcome(conn: ConnId, w: &Welcome, spec: Option<&JobSpec>) {
    assert!(w.rank < w.world, "conn {conn}: {w:?}");
    if let Some(spec) = spec {
        assert!(
            w.world <= spec.max_members,
            "conn {conn}: world above max: {w:?}"
        );
    }
    assert!(w.local_rank < w.local_world, "conn {conn}: {w:?}");
    assert!(w.local_world <= w.world, "conn {conn}: {w:?}");
    assert!(
        w.node_rank < w.nodes && w.nodes <= w.world,
        "conn {conn}: {w:?}"
    );
    let mut seen = HashSet::new();
    for p in &w.peers {
        assert!(p.rank < w.world, "conn {conn}: peer beyond world: {w:?}");
        assert!(seen.insert(p.rank), "conn {conn}: a peer twice: {w:?}");
    }
    let me = w
        .peers
        .iter()
        .find(|p| p.rank == w.rank)
        .unwrap_or_else(|| panic!("conn {conn}: own entry missing: {w:?}"));
    assert!(
        me.addrs.contains(&format!("c{conn}")),
        "conn {conn}: own entry is someone else's: {w:?}"
    );
    if w.all_peers {
        assert_eq!(w.peers.len(), w.world as usize, "conn {conn}: {w:?}");
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut d = Driver::new();
    for op in ops.into_iter().take(MAX_OPS) {
        d.op(op);
    }
    // Everyone goes; a day later nothing is left.
    for slot in 0..SLOTS {
        d.end_conn(slot);
    }
    let until = d.now + Duration::from_secs(24 * 3600);
    d.run_until(until);
    assert_eq!(d.m.sizes(), (0, 0), "jobs left after everyone went");
    assert_eq!(
        d.m.poll_timeout(),
        None,
        "deadlines left after everyone went"
    );
});
