//! The simulation's world: two servers on one storage, the members played by the native
//! client's own session machine ([`Machine`]), one thread, a virtual clock.
//!
//! What the session's driver does with QUIC, this does in memory: what a member's machine
//! asks to send is written to its server at once (a join routed as the server routes it,
//! through [`Owners::claim`]: fed to the machine when the job is this server's, else answered
//! with a `Redirect` and the connection closed), what a server sends is read by the member
//! after the write that caused it is done, and the connections a machine asks for are opened
//! to the first live server (the named owner first). Each member's application takes every
//! round it is welcomed into.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dt_rdzv_proto::native::member::{Input as MIn, Loss, Member as Machine, Output as MOut};
use dt_rdzv_proto::native::{ClientMsg, JobSpec, Join, Role, RoundCause, ServerMsg, Welcome};
use dt_rdzv_proto::rendezvous::{Action, ConnId, Event, Input, MachineConfig, RendezvousMachine};
use dt_rdzv_proto::sans_io::Core;

use super::super::{Note, Owners, Verdict};
use crate::server::ha::storage::{MemoryStorage, Storage};

pub(super) const JOB: &str = "sim";
const TOKEN: &str = "sim-token";
pub(super) const PREFIX: &str = "/dt-rdzv/";
/// The client's reconnect window (`ClientConfig`'s default).
const RECONNECT: Duration = Duration::from_secs(60);
/// How many redirects in a row a member follows before the sim calls it a loop.
const HOPS: usize = 4;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

pub(super) struct Server {
    pub(super) endpoint: String,
    pub(super) owners: Arc<Owners>,
    pub(super) machine: Option<RendezvousMachine>,
}

pub(super) struct Member {
    pub(super) name: String,
    /// Its endpoint list, as server indices.
    order: Vec<usize>,
    /// Its session's rules and rounds (from its first join).
    pub(super) m: Option<Machine>,
    /// (server, connection) while connected.
    pub(super) conn: Option<(usize, ConnId)>,
    /// Its welcomes, in order (every one the session handed on, resumed ones too).
    pub(super) welcomes: Vec<Welcome>,
    /// Why its session ended, if it did.
    pub(super) ended: Option<String>,
    /// Redirects followed since it last reached the job's owner.
    hops: usize,
    pub(super) left: bool,
}

/// What runs next on the clock.
#[derive(Clone, Copy)]
enum Who {
    Member(usize),
    Server(usize),
}

pub(super) struct Sim {
    rt: tokio::runtime::Runtime,
    pub(super) storage: MemoryStorage,
    pub(super) servers: Vec<Server>,
    pub(super) members: Vec<Member>,
    spec: JobSpec,
    pub(super) config: MachineConfig,
    now: Instant,
    next_conn: ConnId,
    /// Who holds each connection.
    conns: BTreeMap<ConnId, usize>,
    /// What the servers sent (or did to a connection), on its way to the members.
    wire: VecDeque<(usize, ConnId, MIn)>,
    pub(super) redirects: usize,
    /// (server, round, cause) of every completed round.
    pub(super) rounds: Vec<(usize, u64, RoundCause)>,
}

impl Sim {
    pub(super) fn new() -> Self {
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
                m: None,
                conn: None,
                welcomes: Vec::new(),
                ended: None,
                hops: 0,
                left: false,
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
            wire: VecDeque::new(),
            redirects: 0,
            rounds: Vec::new(),
        }
    }

    fn up(&self, s: usize) -> bool {
        self.servers[s].machine.is_some()
    }

    /// Member `i` connects to the first live server of its list and joins.
    pub(super) fn join(&mut self, i: usize) {
        let order = self.members[i].order.clone();
        let Some(k) = order.iter().position(|&s| self.up(s)) else {
            panic!("{}: no server is up", self.members[i].name);
        };
        self.members[i].m = Some(Machine::new(self.now, k, Some(RECONNECT)));
        self.connect(i, order[k]);
        let m = &self.members[i];
        let join = Join {
            job: JOB.into(),
            token: TOKEN.into(),
            member: m.name.clone(),
            node: format!("node-{}", m.name),
            addrs: vec![format!("10.0.0.{i}:40000")],
            host: Vec::new(),
            role: Role::Worker,
            spec: self.spec.clone(),
            resume: None,
        };
        self.feed(i, MIn::Outgoing(ClientMsg::Join(join)));
        self.settle();
    }

    /// Member `i` leaves for good, and its client closes the connection.
    pub(super) fn leave(&mut self, i: usize) {
        assert!(
            self.members[i].conn.is_some(),
            "a member that leaves is connected"
        );
        self.feed(i, MIn::Outgoing(ClientMsg::Leave));
        self.members[i].left = true;
        self.drop_link(i, "left");
        self.settle();
    }

    /// Delivers what is on the wire and fires the timers due now (a redirected member's
    /// session dials the owner at once).
    fn settle(&mut self) {
        self.pump();
        self.run_until(self.now);
    }

    fn connect(&mut self, i: usize, s: usize) {
        let conn = self.next_conn;
        self.next_conn += 1;
        self.conns.insert(conn, i);
        self.members[i].conn = Some((s, conn));
        let observed_ip = format!("10.0.0.{i}");
        self.input(s, Input::Connected { conn, observed_ip });
    }

    /// The member's side closes its connection (the server hears it).
    fn drop_link(&mut self, i: usize, why: &str) {
        if let Some((s, conn)) = self.members[i].conn.take() {
            self.conns.remove(&conn);
            let why = why.into();
            self.input(s, Input::Closed { conn, why });
        }
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
                Action::Send { conn, msg } => self.wire.push_back((s, conn, MIn::Message(msg))),
                Action::Close { conn, reason } => {
                    let lost = MIn::ConnectionLost {
                        why: reason,
                        loss: Loss::Closed,
                    };
                    self.wire.push_back((s, conn, lost));
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

    /// Member `i` writes `msg` on its connection (false: it has none). A join goes where the
    /// server's routing says.
    fn write(&mut self, i: usize, msg: ClientMsg) -> bool {
        let Some((s, conn)) = self.members[i].conn else {
            return false;
        };
        if let ClientMsg::Join(j) = &msg {
            let verdict = self.rt.block_on(self.servers[s].owners.claim(&j.job));
            match verdict {
                Verdict::Mine => self.members[i].hops = 0,
                Verdict::Elsewhere {
                    endpoint, server, ..
                } => {
                    self.redirects += 1;
                    let m = &mut self.members[i];
                    m.hops += 1;
                    assert!(m.hops <= HOPS, "{}: redirected in a loop", m.name);
                    let to = self.servers.iter().position(|x| x.endpoint == endpoint);
                    assert!(
                        to.is_some_and(|t| self.up(t)),
                        "{} sent to {endpoint}, which is down: a dead owner's claim outlived \
                         its lease",
                        self.members[i].name
                    );
                    let why = format!("job {:?} is owned by server {server} at {endpoint}", j.job);
                    let redirect = ServerMsg::Redirect {
                        job: j.job.clone(),
                        endpoint,
                        why: why.clone(),
                    };
                    self.wire.push_back((s, conn, MIn::Message(redirect)));
                    let lost = MIn::ConnectionLost {
                        why,
                        loss: Loss::Closed,
                    };
                    self.wire.push_back((s, conn, lost));
                    return true;
                }
                Verdict::Unknown(why) => panic!("the storage did not answer: {why}"),
            }
        }
        self.input(s, Input::Message { conn, msg });
        true
    }

    fn machine(&mut self, i: usize) -> &mut Machine {
        self.members[i].m.as_mut().expect("a member's machine")
    }

    fn feed(&mut self, i: usize, input: MIn) {
        let now = self.now;
        self.machine(i).handle(now, input);
        self.drain_member(i);
    }

    /// Carries out member `i`'s outputs, as the session's driver does.
    fn drain_member(&mut self, i: usize) {
        let now = self.now;
        while let Some(o) = self.machine(i).poll_output() {
            match o {
                MOut::Send(msg) => {
                    if self.write(i, msg) {
                        self.machine(i).handle(now, MIn::Sent);
                    }
                }
                MOut::Reply(msg) => {
                    self.write(i, msg);
                }
                MOut::Deliver(msg) => {
                    if let ServerMsg::Welcome(w) = msg {
                        self.members[i].welcomes.push(w);
                    }
                    // The application takes every round it is welcomed into.
                    self.machine(i).rounds_mut().advance();
                }
                MOut::EndThrough(_)
                | MOut::EndAll(_)
                | MOut::Dump { .. }
                | MOut::Redirected { .. }
                | MOut::Rejoined => {}
                MOut::Disconnect => self.drop_link(i, "lost"),
                MOut::Ended(why) => {
                    self.drop_link(i, "ended");
                    self.members[i].ended = Some(why);
                }
                MOut::Dial {
                    redirect, start, ..
                } => self.dial(i, redirect, start),
                MOut::Rejoin(j) => {
                    let input = if self.write(i, ClientMsg::Join(j)) {
                        MIn::RejoinSent
                    } else {
                        MIn::DialFailed {
                            why: "the new connection closed at once".into(),
                        }
                    };
                    self.machine(i).handle(now, input);
                }
            }
        }
    }

    /// A dial: the named owner if it is up, else the first live server of the member's list
    /// from `start` (answered at once; none up is the sim's failure).
    fn dial(&mut self, i: usize, redirect: Option<String>, start: usize) {
        let to = redirect.and_then(|e| self.servers.iter().position(|x| x.endpoint == e));
        if let Some(s) = to.filter(|&s| self.up(s)) {
            self.connect(i, s);
            return self.feed(i, MIn::Connected { server: start });
        }
        let order = self.members[i].order.clone();
        let n = order.len();
        let Some(k) = (0..n).map(|k| (start + k) % n).find(|&k| self.up(order[k])) else {
            panic!("{}: no server is up", self.members[i].name);
        };
        self.connect(i, order[k]);
        self.feed(i, MIn::Connected { server: k });
    }

    /// Members read what is on the wire (from the connection it came on), until nothing is.
    fn pump(&mut self) {
        while let Some((s, conn, input)) = self.wire.pop_front() {
            let Some(&i) = self.conns.get(&conn) else {
                continue;
            };
            if self.members[i].conn == Some((s, conn)) && !self.members[i].left {
                self.feed(i, input);
            }
        }
    }

    /// Runs the clock `d` on, firing every member's and server's timer on the way.
    pub(super) fn run(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    /// Fires the timers due by `until`, in order.
    fn run_until(&mut self, until: Instant) {
        loop {
            let members = self.members.iter().enumerate().filter(|(_, m)| !m.left);
            let members = members.filter_map(|(i, m)| {
                let t = m.m.as_ref()?.poll_timeout()?;
                Some((t, Who::Member(i)))
            });
            let servers = self.servers.iter().enumerate().filter_map(|(s, x)| {
                let t = x.machine.as_ref()?.poll_timeout()?;
                Some((t, Who::Server(s)))
            });
            let next = members.chain(servers).min_by_key(|(t, _)| *t);
            let Some((t, who)) = next.filter(|(t, _)| *t <= until) else {
                break;
            };
            self.now = self.now.max(t);
            let now = self.now;
            match who {
                Who::Member(i) => {
                    self.machine(i).handle_timeout(now);
                    self.drain_member(i);
                }
                Who::Server(s) => {
                    if let Some(m) = self.servers[s].machine.as_mut() {
                        m.handle_timeout(now);
                    }
                    self.drain(s);
                }
            }
            self.pump();
        }
        self.now = self.now.max(until);
    }

    /// Server `s` crashes: its machine is gone, its lease with it; its members' connections
    /// go silent (told at once: the idle timeout is not waited for), and their sessions
    /// rejoin the next server of their lists with the place they held.
    pub(super) fn vanish(&mut self, s: usize) {
        self.servers[s].machine = None;
        let lease = self.servers[s].owners.lock().lease;
        self.rt
            .block_on(self.storage.revoke(lease))
            .expect("the in-memory storage answers");
        let lost: Vec<usize> = (0..self.members.len())
            .filter(|&i| matches!(self.members[i].conn, Some((x, _)) if x == s))
            .collect();
        for i in lost {
            if let Some((_, conn)) = self.members[i].conn.take() {
                self.conns.remove(&conn);
            }
            let why = "timed out".to_string();
            let loss = Loss::Silent;
            self.feed(i, MIn::ConnectionLost { why, loss });
        }
        self.settle();
    }
}
