//! A virtual-clock harness for the member machine against the real rendezvous machine:
//! members over in-memory links, servers that are up, down or redirect.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use dt_rdzv_proto::native::member::{Input as MIn, Loss, Member, Output as MOut};
use dt_rdzv_proto::native::{ClientMsg, JobSpec, Join, Role, RoundEnd, ServerMsg};
use dt_rdzv_proto::rendezvous::{Action, ConnId, Input as SIn, MachineConfig, RendezvousMachine};
use dt_rdzv_proto::sans_io::Core;

pub const TOKEN: &str = "s3cret";
pub const MS: Duration = Duration::from_millis(1);

/// A server of the endpoint list: the real machine, a stub that sends every joiner to
/// another server, or down.
pub enum Server {
    Up(Box<RendezvousMachine>),
    Redirects(String),
    Down,
}

/// One member: its machine, its link, and what it told the application.
pub struct Node {
    pub m: Member,
    /// The server its connection reaches (an index) and the connection's id there.
    pub link: Option<(usize, ConnId)>,
    pub delivered: Vec<ServerMsg>,
    pub ends: Vec<RoundEnd>,
    pub dumps: Vec<(u64, u32)>,
    pub ended: Option<String>,
    /// Every `Dial`: when, the redirect named, the first server and the deadline.
    pub dials: Vec<(Instant, Option<String>, usize, Duration)>,
    pub rejoins: Vec<Join>,
}

pub struct World {
    pub now: Instant,
    pub servers: Vec<Server>,
    pub nodes: Vec<Node>,
    pub next_conn: ConnId,
    /// Which member each server connection belongs to.
    pub owners: HashMap<(usize, ConnId), usize>,
    /// What the servers sent, on its way (a member reads it after its own writes are done).
    pub wire: VecDeque<(usize, ConnId, MIn)>,
    /// Dials that fail when their deadline passes (no server answered): when, whose.
    pub failing: Vec<(Instant, usize)>,
}

pub fn machine() -> RendezvousMachine {
    RendezvousMachine::new(MachineConfig {
        token: Some(TOKEN.into()),
        ..MachineConfig::default()
    })
}

pub fn join(i: usize, job: &str, spec: &JobSpec) -> Join {
    Join {
        job: job.into(),
        token: TOKEN.into(),
        member: format!("m{i}"),
        node: format!("n{i}"),
        addrs: vec![format!("n{i}:4000")],
        host: Vec::new(),
        role: Role::Worker,
        spec: spec.clone(),
        resume: None,
    }
}

impl World {
    pub fn new(servers: Vec<Server>) -> Self {
        Self {
            now: Instant::now(),
            servers,
            nodes: Vec::new(),
            next_conn: 1,
            owners: HashMap::new(),
            wire: VecDeque::new(),
            failing: Vec::new(),
        }
    }

    /// A member connected to server `server`, reconnecting within `window`.
    pub fn member(&mut self, server: usize, window: Option<Duration>) -> usize {
        let i = self.nodes.len();
        self.nodes.push(Node {
            m: Member::new(self.now, server, window),
            link: None,
            delivered: Vec::new(),
            ends: Vec::new(),
            dumps: Vec::new(),
            ended: None,
            dials: Vec::new(),
            rejoins: Vec::new(),
        });
        self.connect(i, server);
        i
    }

    pub fn connect(&mut self, i: usize, server: usize) {
        let conn = self.next_conn;
        self.next_conn += 1;
        self.nodes[i].link = Some((server, conn));
        self.owners.insert((server, conn), i);
        let observed_ip = format!("10.0.0.{i}");
        self.server_gets(server, SIn::Connected { conn, observed_ip });
    }

    pub fn server_gets(&mut self, server: usize, input: SIn) {
        let now = self.now;
        let mut redirect = None;
        match &mut self.servers[server] {
            Server::Up(m) => m.handle(now, input),
            Server::Redirects(to) => {
                if let SIn::Message {
                    conn,
                    msg: ClientMsg::Join(j),
                } = &input
                {
                    redirect = Some((*conn, j.job.clone(), to.clone()));
                }
            }
            Server::Down => {}
        }
        if let Some((conn, job, endpoint)) = redirect {
            let msg = ServerMsg::Redirect {
                job,
                endpoint,
                why: "s1 owns it".into(),
            };
            self.onto_wire(server, conn, MIn::Message(msg));
        }
        self.drain_server(server);
    }

    pub fn drain_server(&mut self, server: usize) {
        loop {
            let Server::Up(m) = &mut self.servers[server] else {
                return;
            };
            let Some(a) = m.poll_action() else { return };
            match a {
                Action::Send { conn, msg } => self.onto_wire(server, conn, MIn::Message(msg)),
                // As `dt-rdzv serve` closes a connection: what was queued, then the end of
                // the stream (the member reads it before the connection's close).
                Action::Close { conn, .. } => {
                    let lost = MIn::ConnectionLost {
                        why: "server closed the stream".into(),
                        loss: Loss::Stream,
                    };
                    self.onto_wire(server, conn, lost);
                }
                Action::Event(_) => {}
            }
        }
    }

    pub fn onto_wire(&mut self, server: usize, conn: ConnId, input: MIn) {
        self.wire.push_back((server, conn, input));
    }

    /// Delivers what is on the wire, until nothing is.
    pub fn pump(&mut self) {
        while let Some((server, conn, input)) = self.wire.pop_front() {
            self.arrive(server, conn, input);
        }
    }

    pub fn arrive(&mut self, server: usize, conn: ConnId, input: MIn) {
        let Some(&i) = self.owners.get(&(server, conn)) else {
            return;
        };
        if self.nodes[i].link != Some((server, conn)) {
            return;
        }
        self.feed(i, input);
    }

    /// What the application of member `i` sends.
    pub fn app_send(&mut self, i: usize, msg: ClientMsg) {
        self.feed(i, MIn::Outgoing(msg));
        self.pump();
    }

    pub fn feed(&mut self, i: usize, input: MIn) {
        self.nodes[i].m.handle(self.now, input);
        self.drain_member(i);
    }

    pub fn write(&mut self, i: usize, msg: ClientMsg) -> bool {
        let Some((server, conn)) = self.nodes[i].link else {
            return false;
        };
        self.server_gets(server, SIn::Message { conn, msg });
        true
    }

    pub fn drain_member(&mut self, i: usize) {
        while let Some(o) = self.nodes[i].m.poll_output() {
            match o {
                MOut::Send(msg) => {
                    if self.write(i, msg) {
                        self.nodes[i].m.handle(self.now, MIn::Sent);
                    }
                }
                MOut::Reply(msg) => {
                    self.write(i, msg);
                }
                MOut::Deliver(msg) => self.nodes[i].delivered.push(msg),
                MOut::EndThrough(e) | MOut::EndAll(e) => self.nodes[i].ends.push(e),
                MOut::Dump { round, rank, .. } => self.nodes[i].dumps.push((round, rank)),
                MOut::Redirected { .. } | MOut::Rejoined => {}
                MOut::Disconnect => self.drop_link(i),
                MOut::Ended(why) => {
                    self.drop_link(i);
                    self.nodes[i].ended = Some(why);
                }
                MOut::Dial {
                    redirect,
                    redirect_deadline,
                    start,
                    deadline,
                    ..
                } => self.dial(i, redirect, redirect_deadline, start, deadline),
                MOut::Rejoin(j) => {
                    self.nodes[i].rejoins.push(j.clone());
                    let input = if self.write(i, ClientMsg::Join(j)) {
                        MIn::RejoinSent
                    } else {
                        MIn::DialFailed {
                            why: "the new connection closed at once".into(),
                        }
                    };
                    self.nodes[i].m.handle(self.now, input);
                }
            }
        }
    }

    pub fn drop_link(&mut self, i: usize) {
        if let Some((server, conn)) = self.nodes[i].link.take() {
            self.server_gets(
                server,
                SIn::Closed {
                    conn,
                    why: "client went".into(),
                },
            );
        }
    }

    pub fn up(&self, s: usize) -> bool {
        !matches!(self.servers[s], Server::Down)
    }

    /// A dial: a server that is up answers at once; when none is, the dial fails once its
    /// deadline has passed (the named owner's, then the list's).
    pub fn dial(
        &mut self,
        i: usize,
        to: Option<String>,
        to_d: Duration,
        start: usize,
        d: Duration,
    ) {
        self.nodes[i].dials.push((self.now, to.clone(), start, d));
        let mut wait = d;
        if let Some(to) = to {
            let s: usize = to.trim_start_matches('s').parse().expect("sN");
            if self.up(s) {
                self.connect(i, s);
                return self.feed(i, MIn::Connected { server: start });
            }
            wait += to_d;
        }
        let n = self.servers.len();
        for k in 0..n {
            let s = (start + k) % n;
            if self.up(s) {
                self.connect(i, s);
                return self.feed(i, MIn::Connected { server: s });
            }
        }
        self.failing.push((self.now + wait, i));
    }

    /// Runs the clock to `until`, firing every timer of every member and server on the way.
    pub fn run_until(&mut self, until: Instant) {
        loop {
            // The earliest timer: a member's (or its failing dial's), or a server's.
            let members = self.nodes.iter().enumerate();
            let members = members.filter_map(|(i, n)| Some((n.m.poll_timeout()?, Some(i))));
            let dials = self.failing.iter().map(|&(t, i)| (t, Some(i)));
            let servers = self.servers.iter().filter_map(|s| match s {
                Server::Up(m) => Some((m.poll_timeout()?, None)),
                _ => None,
            });
            let next = members.chain(dials).chain(servers).min_by_key(|(t, _)| *t);
            match next {
                Some((t, who)) if t <= until => {
                    self.now = self.now.max(t);
                    match who {
                        Some(i) => {
                            let now = self.now;
                            if let Some(k) = self.failing.iter().position(|f| *f == (now, i)) {
                                self.failing.remove(k);
                                let why = "no handshake".to_string();
                                self.nodes[i].m.handle(now, MIn::DialFailed { why });
                            }
                            self.nodes[i].m.handle_timeout(self.now);
                            self.drain_member(i);
                            self.pump();
                        }
                        None => {
                            for s in 0..self.servers.len() {
                                if let Server::Up(m) = &mut self.servers[s] {
                                    m.handle_timeout(self.now);
                                }
                                self.drain_server(s);
                            }
                            self.pump();
                        }
                    }
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

    /// Server `s` goes away (a restart: every member's connection closes with "going away").
    pub fn stop(&mut self, s: usize, loss: Loss) {
        self.servers[s] = Server::Down;
        for i in 0..self.nodes.len() {
            if self.nodes[i].link.is_some_and(|(t, _)| t == s) {
                self.nodes[i].link = None;
                let why = "closed by peer: going away".to_string();
                self.feed(i, MIn::ConnectionLost { why, loss });
            }
        }
        self.pump();
    }

    pub fn welcome(&self, i: usize) -> Option<&dt_rdzv_proto::native::Welcome> {
        self.nodes[i].delivered.iter().rev().find_map(|m| match m {
            ServerMsg::Welcome(w) => Some(w),
            _ => None,
        })
    }
}

/// Two members on server 0 joined and welcomed into round 1.
pub fn formed(servers: Vec<Server>, window: Option<Duration>) -> World {
    let mut w = World::new(servers);
    let spec = JobSpec::fixed(2);
    for i in 0..2 {
        w.member(0, window);
        w.app_send(i, ClientMsg::Join(join(i, "job", &spec)));
    }
    w.advance(100 * MS);
    for i in 0..2 {
        assert!(
            matches!(w.nodes[i].delivered[0], ServerMsg::Joined { .. }),
            "{:?}",
            w.nodes[i].delivered
        );
        assert_eq!(w.welcome(i).map(|x| x.round), Some(1));
    }
    w
}
