//! Node agents: one connection that speaks for the ranks of one node, so that a job of
//! 100,000 ranks on 12,500 nodes sends 12,500 heartbeats per interval rather than 100,000.
//!
//! * The agent's first stream carries its hello ([`ClientMsg::Node`]: job, token, node) and,
//!   once accepted, its heartbeats; each local rank opens a stream of its own on the same
//!   connection ([`Input::Stream`]) and joins on it as any member does, naming the agent's job
//!   and node (another node or job is refused), at most `max_node_ranks` of them.
//! * Liveness is the agent's: its ranks have no heartbeat check of their own, any message on
//!   any of the connection's streams counts for the node, and when the agent goes silent or its
//!   connection closes every rank it spoke for is lost in one removal (one round end, every
//!   rank named in the cause).
//! * One rank of the node can go alone: its stream closes, or the agent reports it
//!   ([`ClientMsg::RankLost`], e.g. its process exited).
//!
//! [`ClientMsg::Node`]: crate::native::ClientMsg::Node
//! [`ClientMsg::RankLost`]: crate::native::ClientMsg::RankLost
//! [`Input::Stream`]: super::super::Input::Stream

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::super::ConnId;
use super::super::admission::{MAX_NAME_BYTES, clip};
use super::super::auth::Scope;
use super::super::effects::Event;
use super::super::error::Refusal;
use super::super::job::{self, Removal};
use super::super::probes;
use super::{Conn, RendezvousMachine};
use crate::native::{ClientMsg, JobStatus, MAX_DUMP_REASON_BYTES, NodeHello, ServerMsg};

/// Members named in a node's loss before "and N more".
const NAMED: usize = 16;

/// A node agent's hello stream, as the machine holds it.
#[derive(Debug)]
pub(crate) struct NodeConn {
    /// The job its ranks join.
    pub(super) job: String,
    /// The node it speaks for.
    pub(super) node: String,
    /// Its last message (on any stream of its connection).
    pub(super) last_seen: Instant,
    /// Its connection's other streams (one per local rank).
    pub(super) streams: BTreeSet<ConnId>,
}

impl RendezvousMachine {
    /// The hello streams of `job`'s node agents.
    pub(super) fn nodes_of(&self, job: &str) -> Vec<ConnId> {
        self.conns
            .iter()
            .filter(|(_, c)| c.node.as_ref().is_some_and(|n| n.job == job))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Forgets a connection; a rank's stream leaves its agent's set.
    pub(super) fn forget_conn(&mut self, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        if let Some(scope) = c.operator {
            self.operator_left(scope);
        }
        if let Some(carrier) = c.carrier
            && let Some(n) = self.agent_mut(carrier)
        {
            n.streams.remove(&conn);
        }
    }

    fn agent_mut(&mut self, conn: ConnId) -> Option<&mut NodeConn> {
        self.conns.get_mut(&conn).and_then(|c| c.node.as_mut())
    }

    /// The node agent whose connection `conn` is a stream of (or whose hello stream it is).
    pub(super) fn agent_of(&self, conn: ConnId) -> Option<(ConnId, &NodeConn)> {
        let c = self.conns.get(&conn)?;
        let carrier = c.carrier.unwrap_or(conn);
        let n = self.conns.get(&carrier)?.node.as_ref()?;
        Some((carrier, n))
    }

    /// A message on a stream of the agent whose hello stream is `carrier` shows it alive.
    pub(super) fn node_seen(&mut self, now: Instant, carrier: ConnId) {
        if let Some(n) = self.agent_mut(carrier) {
            n.last_seen = now;
        }
    }

    /// Another stream on a node agent's connection.
    pub(super) fn stream(&mut self, conn: ConnId, carrier: ConnId, observed_ip: String) {
        let max = self.config.max_node_ranks;
        let refusal = match self.conns.get(&carrier).and_then(|c| c.node.as_ref()) {
            None => Some(Refusal::BadRequest {
                job: String::new(),
                member: String::new(),
                why: "a second stream on a connection whose first is not a node agent's \
                      (each member connects on its own, or through its node's agent)"
                    .into(),
            }),
            Some(n) if n.streams.len() >= max => Some(Refusal::BadRequest {
                job: n.job.clone(),
                member: String::new(),
                why: format!(
                    "the agent of node {:?} already speaks for {} ranks (limit {max})",
                    n.node,
                    n.streams.len()
                ),
            }),
            Some(_) => None,
        };
        if let Some(r) = refusal {
            self.refuse_and_close(conn, r);
            return;
        }
        self.conns.insert(
            conn,
            Conn {
                observed_ip,
                carrier: Some(carrier),
                ..Conn::default()
            },
        );
        if let Some(n) = self.agent_mut(carrier) {
            n.streams.insert(conn);
        }
    }

    /// A node agent's hello: checked like a join's token and names, then accepted.
    pub(super) fn node_hello(&mut self, now: Instant, conn: ConnId, hello: NodeHello) {
        if !self.authorized(Scope::Job(&hello.job), &hello.token) {
            let job = clip(&hello.job);
            self.refuse_and_close(conn, Refusal::BadToken { job });
            return;
        }
        let bad = |why: String| Refusal::BadRequest {
            job: clip(&hello.job),
            member: String::new(),
            why,
        };
        let refusal = if hello.job.len() > MAX_NAME_BYTES || hello.node.len() > MAX_NAME_BYTES {
            Some(bad(format!(
                "a node agent's job or node name over {MAX_NAME_BYTES} bytes"
            )))
        } else if hello.node.is_empty() {
            Some(bad("a node agent must name its node".into()))
        } else if self.conns.get(&conn).is_some_and(|c| c.carrier.is_some()) {
            Some(bad("a node agent's hello on a rank's stream".into()))
        } else {
            None
        };
        if let Some(r) = refusal {
            self.refuse_and_close(conn, r);
            return;
        }
        let (job, node) = (hello.job, hello.node);
        self.conns.entry(conn).or_default().node = Some(NodeConn {
            job: job.clone(),
            node: node.clone(),
            last_seen: now,
            streams: BTreeSet::new(),
        });
        self.liveness
            .insert((now + self.config.waiting_heartbeat_timeout, conn));
        self.fx.send(
            conn,
            ServerMsg::NodeAccepted {
                job: job.clone(),
                heartbeat_interval_ms: job::ms(self.config.heartbeat_interval),
                heartbeat_timeout_ms: job::ms(self.config.heartbeat_timeout),
                max_ranks: self.config.max_node_ranks as u32,
            },
        );
        self.fx.event(Event::NodeAgent { job, node, conn });
    }

    /// A message on a node agent's hello stream: heartbeats, and reports of a rank gone.
    pub(super) fn on_agent_message(&mut self, now: Instant, conn: ConnId, msg: ClientMsg) {
        let Some(n) = self.agent_mut(conn) else {
            return;
        };
        n.last_seen = now;
        let (job, node) = (n.job.clone(), n.node.clone());
        self.fx.stats.messages += 1;
        match msg {
            ClientMsg::Heartbeat { .. } => {}
            ClientMsg::RankLost { member, why } => self.rank_lost(now, conn, member, why),
            other => {
                let why = format!(
                    "the agent of node {node:?} sends heartbeats and RankLost on its hello \
                     stream; {} belongs on a rank's own stream",
                    kind(&other)
                );
                let member = String::new();
                self.refuse(conn, Refusal::BadRequest { job, member, why });
            }
        }
    }

    /// The agent says one of its ranks is gone: only that rank is lost.
    fn rank_lost(&mut self, now: Instant, conn: ConnId, member: String, why: String) {
        let Some((_, n)) = self.agent_of(conn) else {
            return;
        };
        let (job, node) = (n.job.clone(), n.node.clone());
        let known = n
            .streams
            .iter()
            .any(|s| self.member_of(*s).is_some_and(|m| m.id == member));
        if !known {
            let why =
                format!("{member:?} is not a rank that joined through the agent of node {node:?}");
            let member = clip(&member);
            self.refuse(conn, Refusal::BadRequest { job, member, why });
            return;
        }
        let why = probes::truncate(why, MAX_DUMP_REASON_BYTES);
        let why = format!("its node agent (node {node:?}) reports it gone: {why}");
        if let Some(j) = self.jobs.get_mut(&job) {
            j.remove(
                now,
                vec![(member, Removal::Lost(why))],
                &self.config,
                &mut self.fx,
            );
        }
    }

    /// Whether the agent on `conn` went silent: `Some(why)` when it is lost, else its next
    /// check is scheduled.
    pub(super) fn agent_due(&mut self, now: Instant, conn: ConnId) -> Option<String> {
        let (_, n) = self.agent_of(conn)?;
        // Before any of its ranks was welcomed it is as generous as for a waiting member.
        let welcomed = n
            .streams
            .iter()
            .any(|s| self.member_of(*s).is_some_and(|m| m.rank.is_some()));
        let timeout = self.config.liveness_timeout(welcomed);
        let due = n.last_seen + timeout;
        if due > now {
            self.liveness
                .insert((due.min(now + self.config.heartbeat_timeout), conn));
            return None;
        }
        Some(format!(
            "its node agent sent nothing for {:.1} s (heartbeat timeout {:.1} s)",
            now.saturating_duration_since(n.last_seen).as_secs_f64(),
            timeout.as_secs_f64()
        ))
    }

    /// The agent on `conn` is gone: every rank it spoke for is lost at once, named in the why.
    pub(super) fn lose_node(&mut self, now: Instant, conn: ConnId, why: &str) {
        let Some(n) = self.conns.remove(&conn).and_then(|c| c.node) else {
            return;
        };
        let ids: Vec<String> = n
            .streams
            .iter()
            .filter_map(|s| self.member_of(*s).map(|m| m.id.clone()))
            .collect();
        let mut named: Vec<String> = ids.iter().take(NAMED).map(|i| format!("{i:?}")).collect();
        if ids.len() > NAMED {
            named.push(format!("and {} more", ids.len() - NAMED));
        }
        let why = format!(
            "{why}; node {:?} lost every rank it spoke for ({}: {})",
            n.node,
            ids.len(),
            named.join(", ")
        );
        if let Some(j) = self.jobs.get_mut(&n.job) {
            let gone = ids
                .iter()
                .map(|id| (id.clone(), Removal::Lost(why.clone())))
                .collect();
            j.remove(now, gone, &self.config, &mut self.fx);
        }
        for s in &n.streams {
            self.probes.forget(*s);
            self.conns.remove(s);
        }
        self.probes.forget(conn);
        self.fx.event(Event::NodeLost {
            job: n.job,
            node: n.node,
            ranks: ids.len() as u32,
            why: why.clone(),
        });
        self.fx.close(conn, why);
    }

    /// Members' last messages in `statuses` counted from their agents' (their ranks send
    /// no heartbeats of their own).
    pub(super) fn agents_last_seen(&self, now: Instant, statuses: &mut [JobStatus]) {
        let mut age: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for c in self.conns.values() {
            let Some(n) = &c.node else { continue };
            let ms = job::ms(now.saturating_duration_since(n.last_seen));
            for s in &n.streams {
                if let Some(m) = self.member_of(*s) {
                    age.insert((n.job.as_str(), m.id.as_str()), ms);
                }
            }
        }
        if age.is_empty() {
            return;
        }
        for st in statuses.iter_mut() {
            for m in st.members.iter_mut() {
                if let Some(a) = age.get(&(st.job.as_str(), m.member.as_str())) {
                    m.last_seen_ms = m.last_seen_ms.min(*a);
                }
            }
        }
    }
}

/// A client message's name, for refusals.
fn kind(msg: &ClientMsg) -> &'static str {
    match msg {
        ClientMsg::Join(_) => "Join",
        ClientMsg::Heartbeat { .. } => "Heartbeat",
        ClientMsg::Leave => "Leave",
        ClientMsg::Finish => "Finish",
        ClientMsg::Publish { .. } => "Publish",
        ClientMsg::NextRound => "NextRound",
        ClientMsg::Lookup { .. } => "Lookup",
        ClientMsg::Status { .. } => "Status",
        ClientMsg::Stop { .. } => "Stop",
        ClientMsg::Report { .. } => "Report",
        ClientMsg::Alive { .. } => "Alive",
        ClientMsg::Progress(_) => "Progress",
        ClientMsg::Dump { .. } => "Dump",
        ClientMsg::Node(_) => "Node",
        ClientMsg::RankLost { .. } => "RankLost",
        ClientMsg::Relay { .. } => "Relay",
    }
}
