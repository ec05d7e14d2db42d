//! Simulation tests of the member machine (the native client's session rules) against the
//! real rendezvous machine, over in-memory links with a virtual clock: joining, a server
//! restart and the resume of each member's place, a redirect to the job's owner, fail-over to
//! the next server after one went silent, the reconnect window running out, and a member's
//! own silence.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use dt_rdzv_proto::native::member::{Input as MIn, Loss, Member, Output as MOut};
use dt_rdzv_proto::native::{ClientMsg, JobSpec, Join, Role, RoundCause, RoundEnd, ServerMsg};
use dt_rdzv_proto::rendezvous::{Action, ConnId, Input as SIn, MachineConfig, RendezvousMachine};
use dt_rdzv_proto::sans_io::Core;

const TOKEN: &str = "s3cret";
const MS: Duration = Duration::from_millis(1);

/// A server of the endpoint list: the real machine, a stub that sends every joiner to
/// another server, or down.
enum Server {
    Up(Box<RendezvousMachine>),
    Redirects(String),
    Down,
}

/// One member: its machine, its link, and what it told the application.
struct Node {
    m: Member,
    /// The server its connection reaches (an index) and the connection's id there.
    link: Option<(usize, ConnId)>,
    delivered: Vec<ServerMsg>,
    ends: Vec<RoundEnd>,
    dumps: Vec<(u64, u32)>,
    ended: Option<String>,
    /// Every `Dial`: when, the redirect named, the first server and the deadline.
    dials: Vec<(Instant, Option<String>, usize, Duration)>,
    rejoins: Vec<Join>,
}

struct World {
    now: Instant,
    servers: Vec<Server>,
    nodes: Vec<Node>,
    next_conn: ConnId,
    /// Which member each server connection belongs to.
    owners: HashMap<(usize, ConnId), usize>,
    /// What the servers sent, on its way (a member reads it after its own writes are done).
    wire: VecDeque<(usize, ConnId, MIn)>,
    /// Dials that fail when their deadline passes (no server answered): when, whose.
    failing: Vec<(Instant, usize)>,
}

fn machine() -> RendezvousMachine {
    RendezvousMachine::new(MachineConfig {
        token: Some(TOKEN.into()),
        ..MachineConfig::default()
    })
}

fn join(i: usize, job: &str, spec: &JobSpec) -> Join {
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
    fn new(servers: Vec<Server>) -> Self {
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
    fn member(&mut self, server: usize, window: Option<Duration>) -> usize {
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

    fn connect(&mut self, i: usize, server: usize) {
        let conn = self.next_conn;
        self.next_conn += 1;
        self.nodes[i].link = Some((server, conn));
        self.owners.insert((server, conn), i);
        let observed_ip = format!("10.0.0.{i}");
        self.server_gets(server, SIn::Connected { conn, observed_ip });
    }

    fn server_gets(&mut self, server: usize, input: SIn) {
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

    fn drain_server(&mut self, server: usize) {
        loop {
            let Server::Up(m) = &mut self.servers[server] else {
                return;
            };
            let Some(a) = m.poll_action() else { return };
            match a {
                Action::Send { conn, msg } => self.onto_wire(server, conn, MIn::Message(msg)),
                Action::Close { conn, reason } => {
                    let lost = MIn::ConnectionLost {
                        why: reason,
                        loss: Loss::Closed,
                    };
                    self.onto_wire(server, conn, lost);
                }
                Action::Event(_) => {}
            }
        }
    }

    fn onto_wire(&mut self, server: usize, conn: ConnId, input: MIn) {
        self.wire.push_back((server, conn, input));
    }

    /// Delivers what is on the wire, until nothing is.
    fn pump(&mut self) {
        while let Some((server, conn, input)) = self.wire.pop_front() {
            self.arrive(server, conn, input);
        }
    }

    fn arrive(&mut self, server: usize, conn: ConnId, input: MIn) {
        let Some(&i) = self.owners.get(&(server, conn)) else {
            return;
        };
        if self.nodes[i].link != Some((server, conn)) {
            return;
        }
        self.feed(i, input);
    }

    /// What the application of member `i` sends.
    fn app_send(&mut self, i: usize, msg: ClientMsg) {
        self.feed(i, MIn::Outgoing(msg));
        self.pump();
    }

    fn feed(&mut self, i: usize, input: MIn) {
        self.nodes[i].m.handle(self.now, input);
        self.drain_member(i);
    }

    fn write(&mut self, i: usize, msg: ClientMsg) -> bool {
        let Some((server, conn)) = self.nodes[i].link else {
            return false;
        };
        self.server_gets(server, SIn::Message { conn, msg });
        true
    }

    fn drain_member(&mut self, i: usize) {
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

    fn drop_link(&mut self, i: usize) {
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

    fn up(&self, s: usize) -> bool {
        !matches!(self.servers[s], Server::Down)
    }

    /// A dial: a server that is up answers at once; when none is, the dial fails once its
    /// deadline has passed (the named owner's, then the list's).
    fn dial(&mut self, i: usize, to: Option<String>, to_d: Duration, start: usize, d: Duration) {
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
    fn run_until(&mut self, until: Instant) {
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

    fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    /// Server `s` goes away (a restart: every member's connection closes with "going away").
    fn stop(&mut self, s: usize, loss: Loss) {
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

    fn welcome(&self, i: usize) -> Option<&dt_rdzv_proto::native::Welcome> {
        self.nodes[i].delivered.iter().rev().find_map(|m| match m {
            ServerMsg::Welcome(w) => Some(w),
            _ => None,
        })
    }
}

/// Two members on server 0 joined and welcomed into round 1.
fn formed(servers: Vec<Server>, window: Option<Duration>) -> World {
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

#[test]
fn members_heartbeat_and_stay_in_their_round() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    w.advance(Duration::from_secs(30));
    for n in &w.nodes {
        assert!(n.ended.is_none());
        assert!(n.ends.is_empty(), "{:?}", n.ends);
        assert!(n.dials.is_empty());
    }
}

#[test]
fn an_ask_to_dump_reaches_the_other_members_session_not_its_application() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    let delivered = w.nodes[1].delivered.len();
    w.app_send(
        0,
        ClientMsg::Dump {
            round: 1,
            why: "all_reduce timed out".into(),
        },
    );
    w.advance(10 * MS);
    let rank0 = w.welcome(0).map(|x| x.rank).unwrap();
    assert_eq!(w.nodes[1].dumps, vec![(1, rank0)]);
    assert!(w.nodes[0].dumps.is_empty(), "not back to the asker");
    assert_eq!(
        w.nodes[1].delivered.len(),
        delivered,
        "not the application's business"
    );
}

#[test]
fn a_server_restart_is_resumed_with_every_member_in_its_place() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    let before: Vec<u32> = (0..2).map(|i| w.welcome(i).unwrap().rank).collect();
    let lost_at = w.now;
    w.stop(0, Loss::ServerGone);
    w.advance(Duration::from_secs(5));
    // Down: each attempt waits 2 s for a handshake, then 50 ms, 100 ms... before the next.
    let d = &w.nodes[0].dials;
    assert_eq!(d.len(), 3, "{d:?}");
    assert_eq!(d[0].0, lost_at, "the first attempt at once");
    assert_eq!(
        d[0].3,
        Duration::from_secs(2),
        "an attempt waits 2 s at most"
    );
    assert_eq!(d[1].0 - d[0].0, Duration::from_millis(2050));
    assert_eq!(d[2].0 - d[1].0, Duration::from_millis(2100));
    w.servers[0] = Server::Up(Box::new(machine()));
    w.advance(Duration::from_secs(3));
    for (i, &rank) in before.iter().enumerate() {
        let n = &w.nodes[i];
        assert!(n.ended.is_none(), "{:?}", n.ended);
        let j = n.rejoins.last().expect("rejoined");
        assert_eq!(j.resume.map(|r| (r.round, r.rank)), Some((1, rank)));
        let again = w.welcome(i).unwrap();
        assert_eq!((again.round, again.rank), (1, rank));
        assert!(
            matches!(again.cause, RoundCause::Resumed { .. }),
            "{:?}",
            again.cause
        );
        assert!(n.ends.is_empty(), "a restart ends no round: {:?}", n.ends);
    }
}

#[test]
fn a_redirect_sends_the_member_to_the_jobs_owner() {
    let mut w = World::new(vec![
        Server::Redirects("s1".into()),
        Server::Up(Box::new(machine())),
    ]);
    let m = w.member(0, Some(Duration::from_secs(60)));
    w.app_send(m, ClientMsg::Join(join(m, "job", &JobSpec::fixed(1))));
    w.advance(100 * MS);
    let n = &w.nodes[m];
    assert_eq!(n.dials.len(), 1);
    assert_eq!(n.dials[0].1.as_deref(), Some("s1"));
    assert_eq!(n.dials[0].3, Duration::from_secs(2));
    assert_eq!(n.link.map(|l| l.0), Some(1));
    assert!(
        !n.delivered
            .iter()
            .any(|x| matches!(x, ServerMsg::Redirect { .. })),
        "a redirect is not the application's business"
    );
    assert!(matches!(n.delivered[0], ServerMsg::Joined { .. }));
    assert_eq!(w.welcome(m).map(|x| x.round), Some(1));
}

#[test]
fn a_silent_server_is_left_for_the_next_of_the_list() {
    let mut w = formed(
        vec![
            Server::Up(Box::new(machine())),
            Server::Up(Box::new(machine())),
        ],
        Some(Duration::from_secs(60)),
    );
    w.stop(0, Loss::Silent);
    w.advance(Duration::from_secs(3));
    for i in 0..2 {
        let n = &w.nodes[i];
        assert_eq!(n.dials[0].2, 1, "the next server first");
        assert_eq!(n.link.map(|l| l.0), Some(1));
        assert!(n.ended.is_none());
        assert_eq!(w.welcome(i).map(|x| x.round), Some(1));
    }
}

#[test]
fn a_loss_past_the_reconnect_window_ends_the_session_naming_why() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(3)),
    );
    let lost_at = w.now;
    w.stop(0, Loss::ServerGone);
    w.advance(Duration::from_secs(10));
    let n = &w.nodes[0];
    let why = n.ended.as_deref().expect("ended");
    assert_eq!(
        why,
        "lost the connection to dt-rdzv (closed by peer: going away) and could not rejoin \
         within the reconnect window: no handshake"
    );
    // Every attempt within the window, each waiting at most what is left of it.
    for (at, _, _, d) in &n.dials {
        assert!(*at < lost_at + Duration::from_secs(3));
        assert!(*at + *d <= lost_at + Duration::from_secs(3));
    }
    assert!(
        n.ends.is_empty(),
        "the member's round is not the server's word"
    );
}

#[test]
fn without_a_reconnect_window_a_loss_ends_the_session_at_once() {
    let mut w = formed(vec![Server::Up(Box::new(machine()))], None);
    w.stop(0, Loss::ServerGone);
    assert_eq!(
        w.nodes[0].ended.as_deref(),
        Some("closed by peer: going away")
    );
    assert!(w.nodes[0].dials.is_empty());
}

#[test]
fn a_member_the_server_declared_lost_hears_why_and_does_not_rejoin() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    w.nodes[0].m.set_silent(true);
    w.advance(Duration::from_secs(5));
    let n = &w.nodes[0];
    let why = n.ended.as_deref().expect("ended");
    assert!(why.contains("heartbeat timeout"), "{why}");
    assert!(n.dials.is_empty(), "no rejoin");
    let end = n.ends.iter().find(|e| e.removed).expect("removed");
    assert!(
        end.why
            .starts_with("dt-rdzv removed this member from job \"job\": "),
        "{end:?}"
    );
    // Its peer heard the round end and stays.
    assert!(w.nodes[1].ended.is_none());
    assert!(w.nodes[1].ends.iter().any(|e| e.round == 1 && !e.removed));
}

#[test]
fn a_member_stopped_past_its_heartbeat_timeout_does_not_rejoin() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    // Its process is stopped for 3 s (no timer runs), then sees its connection timed out.
    w.now += Duration::from_secs(3);
    let why = "timed out".to_string();
    w.feed(
        0,
        MIn::ConnectionLost {
            why,
            loss: Loss::Silent,
        },
    );
    removed_for_its_silence(&w, "timed out");
}

/// Node 0 ended as removed from round 1 for its 3 s of silence, the connection's loss named,
/// and did not rejoin.
fn removed_for_its_silence(w: &World, loss: &str) {
    let n = &w.nodes[0];
    let why = n.ended.as_deref().expect("ended");
    assert!(
        why.starts_with("this member sent nothing for 3.")
            && why.ends_with(&format!("(the connection: {loss})")),
        "{why}"
    );
    assert!(n.dials.is_empty(), "no rejoin");
    assert!(
        n.ends.iter().any(|e| e.removed && e.round == 1),
        "{:?}",
        n.ends
    );
}

#[test]
fn a_member_stopped_past_its_timeout_that_heartbeats_on_waking_still_does_not_rejoin() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    // Stopped for 3 s; on waking its heartbeat timer runs first (a heartbeat is written), and
    // only then does it read that the server reset its connection.
    w.now += Duration::from_secs(3);
    let now = w.now;
    w.nodes[0].m.handle_timeout(now);
    w.drain_member(0);
    w.now += Duration::from_millis(1);
    let why = "reset by peer".to_string();
    w.feed(
        0,
        MIn::ConnectionLost {
            why,
            loss: Loss::ServerGone,
        },
    );
    removed_for_its_silence(&w, "reset by peer");
}
