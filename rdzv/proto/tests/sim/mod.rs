//! A virtual-clock harness for the rendezvous machine: one thread, no sockets.

#![allow(dead_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dt_rdzv_proto::native::{
    ClientMsg, JobEnd, JobSpec, Join, RefusalCode, Resume, Role, ServerMsg, Welcome,
};
use dt_rdzv_proto::rendezvous::{Action, ConnId, Event, Input, MachineConfig, RendezvousMachine};

pub const TOKEN: &str = "s3cret";

/// The first refusal among `msgs`: its code and message.
pub fn refusal(msgs: &[ServerMsg]) -> Option<(RefusalCode, String)> {
    msgs.iter().find_map(|m| match m {
        ServerMsg::Refused { code, message } => Some((*code, message.clone())),
        _ => None,
    })
}

/// The job's end among `msgs`, if one is there.
pub fn job_end(msgs: &[ServerMsg]) -> Option<JobEnd> {
    msgs.iter().find_map(|m| match m {
        ServerMsg::JobEnded { end, .. } => Some(end.clone()),
        _ => None,
    })
}

pub struct Sim {
    pub m: RendezvousMachine,
    pub now: Instant,
    pub inbox: HashMap<ConnId, Vec<ServerMsg>>,
    pub closed: HashMap<ConnId, String>,
    pub events: Vec<Event>,
    /// Every action, in the order the machine gave them.
    pub log: Vec<String>,
}

impl Sim {
    pub fn new() -> Self {
        Self::with(MachineConfig {
            token: Some(TOKEN.into()),
            ..MachineConfig::default()
        })
    }

    pub fn with(config: MachineConfig) -> Self {
        Self {
            m: RendezvousMachine::new(config),
            now: Instant::now(),
            inbox: HashMap::new(),
            closed: HashMap::new(),
            events: Vec::new(),
            log: Vec::new(),
        }
    }

    fn drain(&mut self) {
        while let Some(a) = self.m.poll_action() {
            self.log.push(format!("{a:?}"));
            match a {
                Action::Send { conn, msg } => self.inbox.entry(conn).or_default().push(msg),
                Action::Close { conn, reason } => {
                    self.closed.insert(conn, reason);
                }
                Action::Event(e) => self.events.push(e),
            }
        }
    }

    pub fn input(&mut self, input: Input) {
        self.m.handle(self.now, input);
        self.drain();
    }

    pub fn send(&mut self, conn: ConnId, msg: ClientMsg) {
        self.input(Input::Message { conn, msg });
    }

    pub fn join_as(
        &mut self,
        conn: ConnId,
        job: &str,
        member: &str,
        node: &str,
        spec: &JobSpec,
        role: Role,
    ) {
        self.join_msg(conn, join_msg(conn, job, member, node, spec, role));
    }

    /// Connects `conn` and sends `join`.
    pub fn join_msg(&mut self, conn: ConnId, join: Join) {
        self.input(Input::Connected {
            conn,
            observed_ip: format!("10.0.{}.{}", conn / 256, conn % 256),
        });
        self.send(conn, ClientMsg::Join(join));
    }

    /// Member `conn` named `m<conn>` on node `n<conn / per_node>`.
    pub fn join(&mut self, conn: ConnId, job: &str, spec: &JobSpec, per_node: u64) {
        let (member, node) = (format!("m{conn:05}"), format!("n{:04}", conn / per_node));
        self.join_as(conn, job, &member, &node, spec, Role::Worker);
    }

    /// Member `conn` (named as by [`Sim::join`]) asking for its place in `resume` back.
    pub fn join_resumed(
        &mut self,
        conn: ConnId,
        job: &str,
        spec: &JobSpec,
        per_node: u64,
        resume: Resume,
    ) {
        let (member, node) = (format!("m{conn:05}"), format!("n{:04}", conn / per_node));
        let join = join_msg(conn, job, &member, &node, spec, Role::Worker);
        self.join_msg(
            conn,
            Join {
                resume: Some(resume),
                ..join
            },
        );
    }

    pub fn close(&mut self, conn: ConnId) {
        self.input(Input::Closed {
            conn,
            why: "peer vanished".into(),
        });
    }

    /// Runs the clock forward to `until`, firing every timer on the way.
    pub fn run_until(&mut self, until: Instant) {
        for _ in 0..1_000_000 {
            match self.m.poll_timeout() {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.m.handle_timeout(self.now);
                    self.drain();
                }
                _ => break,
            }
        }
        self.now = self.now.max(until);
    }

    pub fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    /// Advances by `d` in heartbeat-interval steps; `alive` members send heartbeats.
    pub fn advance_with_heartbeats(&mut self, d: Duration, alive: &[ConnId]) {
        let step = self.m.config().heartbeat_interval;
        let end = self.now + d;
        while self.now < end {
            for &c in alive {
                if !self.closed.contains_key(&c) {
                    self.send(c, ClientMsg::Heartbeat { seq: 0 });
                }
            }
            let next = (self.now + step).min(end);
            self.run_until(next);
        }
    }

    pub fn take(&mut self, conn: ConnId) -> Vec<ServerMsg> {
        self.inbox.remove(&conn).unwrap_or_default()
    }

    /// The last Welcome `conn` received (and clears its inbox).
    pub fn welcome(&mut self, conn: ConnId) -> Option<Welcome> {
        self.take(conn).into_iter().rev().find_map(|m| match m {
            ServerMsg::Welcome(w) => Some(w),
            _ => None,
        })
    }

    pub fn welcomes(
        &mut self,
        conns: impl IntoIterator<Item = ConnId>,
    ) -> HashMap<ConnId, Welcome> {
        conns
            .into_iter()
            .filter_map(|c| self.welcome(c).map(|w| (c, w)))
            .collect()
    }

    pub fn clear(&mut self) {
        self.inbox.clear();
        self.events.clear();
    }
}

/// Checks the ranks of a round: a permutation of 0..world, one round number, local ranks per
/// node consistent.
pub fn check_round(ws: &HashMap<ConnId, Welcome>, world: u32) -> u64 {
    assert_eq!(ws.len(), world as usize, "every member has a welcome");
    let mut seen = vec![false; world as usize];
    let round = ws.values().next().unwrap().round;
    let mut per_node: HashMap<u32, Vec<u32>> = HashMap::new();
    for w in ws.values() {
        assert_eq!(w.world, world);
        assert_eq!(w.round, round);
        assert!(!seen[w.rank as usize], "rank {} twice", w.rank);
        seen[w.rank as usize] = true;
        per_node.entry(w.node_rank).or_default().push(w.local_rank);
        assert!(w.local_rank < w.local_world);
        assert!(w.peers.iter().any(|p| p.rank == w.rank), "own entry");
    }
    for (_, mut locals) in per_node {
        locals.sort();
        assert_eq!(locals, (0..locals.len() as u32).collect::<Vec<_>>());
    }
    round
}

/// The join a simulated member sends (no resume).
pub fn join_msg(
    conn: ConnId,
    job: &str,
    member: &str,
    node: &str,
    spec: &JobSpec,
    role: Role,
) -> Join {
    Join {
        job: job.into(),
        token: TOKEN.into(),
        member: member.into(),
        node: node.into(),
        addrs: vec![format!("{node}:{}", 40000 + conn)],
        host: Vec::new(),
        role,
        spec: spec.clone(),
        resume: None,
    }
}
