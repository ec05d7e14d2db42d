//! [`RendezvousMachine`]: every job on a server, the connections that belong to them, and the
//! liveness of their members. Sans IO, in the shape of every core of this crate
//! ([`crate::sans_io::Core`]): the driver feeds [`Input`]s with the time, carries out
//! [`Action`]s, and calls [`RendezvousMachine::handle_timeout`] at
//! [`RendezvousMachine::poll_timeout`].
//!
//! This file holds the machine's state, its connections and the operator's requests; the
//! rest is by concept:
//!
//! * `messages`: what each member or operator message does;
//! * `joins`: a join, from the token check to the member's place in its job;
//! * `nodes`: node agents, which speak for the ranks of a node on one connection;
//! * `reports`: a member's data-plane report, and the probe it may start;
//! * `timeouts`: the deadlines (heartbeats, probes, last calls, join timeouts, retention).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::ConnId;
use super::auth::{Scope, authorized};
use super::config::MachineConfig;
use super::effects::{Action, Effects, Event, RendezvousStats};
use super::error::Refusal;
use super::input::Input;
use super::job::{self, Job, Removal};
use super::probes::Probes;
use super::progress_view::JobProgress;
use crate::native::{JobEnd, JobStatus, ServerMsg};

mod dumps;
mod joins;
mod messages;
mod nodes;
mod operators;
mod reports;
mod timeouts;

/// One connection.
#[derive(Debug, Default)]
struct Conn {
    /// The client's source IP address, as the driver saw it.
    observed_ip: String,
    /// (job, member) once joined.
    member: Option<(String, String)>,
    /// A node agent's hello stream: the node it speaks for.
    node: Option<nodes::NodeConn>,
    /// A stream of a node agent's connection: the agent's hello stream.
    carrier: Option<ConnId>,
    /// Not a member: the token scope its status or stop requests were let in for (the job,
    /// or `None` for the server's), counted in [`RendezvousMachine::operators`].
    operator: Option<Option<String>>,
}

/// The rendezvous state machine of one server. See the module docs.
#[derive(Debug, Default)]
pub struct RendezvousMachine {
    config: MachineConfig,
    jobs: BTreeMap<String, Job>,
    conns: BTreeMap<ConnId, Conn>,
    /// (check at, connection): a member's (or a node agent's) heartbeat is checked at these
    /// times.
    liveness: BTreeSet<(Instant, ConnId)>,
    /// Liveness probes started by data-plane reports.
    probes: Probes,
    /// Connections this machine let go of (closed or handed off) that the driver has not yet
    /// reported closed: what they still send was in flight and is dropped, not refused.
    closing: BTreeSet<ConnId>,
    fx: Effects,
    /// Bytes of published configuration over every job.
    config_bytes: u64,
    /// Connections that are not members open per token scope (a job, or `None` for the
    /// server's token): status and stop requests.
    operators: BTreeMap<Option<String>, usize>,
    /// What the server's memory budget leaves for more configuration
    /// ([`RendezvousMachine::set_config_room`]).
    config_room: Option<u64>,
}

impl RendezvousMachine {
    /// A machine with no jobs.
    pub fn new(config: MachineConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// Bytes of published configuration (keys and values) over every job.
    pub fn config_bytes(&self) -> u64 {
        self.config_bytes
    }

    /// What the server's memory budget leaves now for more published configuration (`None`:
    /// no budget): a publish that would add more is refused, naming the budget. The driver
    /// sets it before each input.
    pub fn set_config_room(&mut self, room: Option<u64>) {
        self.config_room = room;
    }

    /// Its settings.
    pub fn config(&self) -> &MachineConfig {
        &self.config
    }

    /// Whether `token` opens `scope` (for drivers that serve other doors, e.g. HTTP).
    pub fn authorized(&self, scope: Scope<'_>, token: &str) -> bool {
        authorized(self.config.token.as_deref(), scope, token)
    }

    /// The next thing the driver must do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.fx.actions.pop_front()
    }

    /// Counters.
    pub fn stats(&self) -> &RendezvousStats {
        &self.fx.stats
    }

    /// (jobs, members) now.
    pub fn sizes(&self) -> (usize, usize) {
        (
            self.jobs.len(),
            self.jobs.values().map(|j| j.members.len()).sum(),
        )
    }

    /// Connections this machine let go of whose close the driver has not reported yet
    /// ([`Input::Closed`]); what they still send is dropped.
    pub fn pending_closes(&self) -> usize {
        self.closing.len()
    }

    /// When [`RendezvousMachine::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let jobs = self
            .jobs
            .values()
            .filter_map(|j| j.next_deadline(&self.config))
            .min();
        let live = self.liveness.first().map(|(t, _)| *t);
        [jobs, live, self.probes.next_due()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Feeds one input.
    pub fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Connected { conn, observed_ip } => {
                // A repeated Connected keeps what the connection already is.
                self.conns.entry(conn).or_default().observed_ip = observed_ip;
            }
            Input::Stream {
                conn,
                carrier,
                observed_ip,
            } => self.stream(conn, carrier, observed_ip),
            Input::Message { conn, msg } => self.on_message(now, conn, msg),
            Input::Malformed { conn, error } => {
                let r = Refusal::Codec(error);
                let why = r.to_string();
                self.refuse(conn, r);
                self.drop_conn(now, conn, format!("sent a bad frame: {why}"), true);
            }
            Input::Closed { conn, why } => {
                self.drop_conn(now, conn, format!("connection closed: {why}"), false);
                self.settle();
                // Gone for good: nothing more comes from it (and its id may come back).
                self.closing.remove(&conn);
                return;
            }
        }
        self.settle();
    }

    /// Stops a job as an operator (the driver has authenticated the caller).
    pub fn stop(&mut self, now: Instant, job: &str, reason: String) -> Result<(), Refusal> {
        let r = self.stoppable(job);
        if r.is_ok()
            && let Some(j) = self.jobs.get_mut(job)
        {
            j.end(now, JobEnd::Stopped { reason }, &mut self.fx);
        }
        self.settle();
        r
    }

    /// Lets go of `job` without a word to its members, because another server of the group
    /// now owns it (dt-rdzv's `--backend`): the job is forgotten here and its members'
    /// connections are returned, for the driver to hand off (close them so that the members
    /// reconnect and resume their round with the owner). Empty if the job is unknown.
    pub fn release(&mut self, job: &str) -> Vec<ConnId> {
        let Some(j) = self.jobs.remove(job) else {
            return Vec::new();
        };
        self.config_bytes -= j.config.bytes() as u64;
        let mut conns: Vec<ConnId> = j.members.values().map(|m| m.conn).collect();
        // Its node agents go too (their members follow them to the owner).
        conns.extend(self.nodes_of(job));
        self.fx.detached.extend(conns.iter().copied());
        self.fx.event(Event::JobForgotten { job: job.into() });
        self.settle();
        conns
    }

    /// The jobs this machine holds, by name.
    pub fn job_names(&self) -> Vec<String> {
        self.jobs.keys().cloned().collect()
    }

    /// Whether `job` can be stopped: it exists and has not ended.
    fn stoppable(&self, job: &str) -> Result<(), Refusal> {
        match self.jobs.get(job).map(Job::ended) {
            None => Err(Refusal::UnknownJob { job: job.into() }),
            Some(Some(end)) => Err(Refusal::JobEnded {
                job: job.into(),
                end: end.to_string(),
            }),
            Some(None) => Ok(()),
        }
    }

    /// Status of one job or all (the driver has authenticated the caller).
    pub fn status(&self, now: Instant, job: Option<&str>) -> Result<Vec<JobStatus>, Refusal> {
        let mut all = self.statuses(now, job)?;
        self.agents_last_seen(now, &mut all);
        Ok(all)
    }

    fn statuses(&self, now: Instant, job: Option<&str>) -> Result<Vec<JobStatus>, Refusal> {
        match job {
            Some(name) => self
                .jobs
                .get(name)
                .map(|j| vec![j.status(now)])
                .ok_or_else(|| Refusal::UnknownJob { job: name.into() }),
            None => {
                let mut all: Vec<JobStatus> = self.jobs.values().map(|j| j.status(now)).collect();
                all.sort_by(|a, b| a.job.cmp(&b.job));
                Ok(all)
            }
        }
    }

    /// Every job's ranks and latest summaries, borrowed (see [`JobProgress`]), by job name.
    pub fn progress(&self) -> Vec<JobProgress<'_>> {
        let mut all: Vec<JobProgress<'_>> = self.jobs.values().map(Job::progress).collect();
        all.sort_by(|a, b| a.job.cmp(b.job));
        all
    }

    fn forget(&mut self, name: &str) {
        if let Some(j) = self.jobs.remove(name) {
            self.config_bytes -= j.config.bytes() as u64;
            for m in j.members.values() {
                self.fx.close(m.conn, format!("job {name:?} forgotten"));
            }
            for agent in self.nodes_of(name) {
                self.fx.close(agent, format!("job {name:?} forgotten"));
            }
            self.fx.event(Event::JobForgotten { job: name.into() });
        }
    }

    /// Housekeeping after every call: forget connections the jobs let go of, and ephemeral
    /// jobs that ended.
    fn settle(&mut self) {
        for conn in std::mem::take(&mut self.fx.detached) {
            self.probes.forget(conn);
            self.forget_conn(conn);
            self.closing.insert(conn);
        }
        let done: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.spec.ephemeral && j.ended().is_some())
            .map(|(n, _)| n.clone())
            .collect();
        for name in done {
            self.forget(&name);
        }
    }

    fn member_of(&self, conn: ConnId) -> Option<&job::Member> {
        let (job, id) = self.conns.get(&conn)?.member.as_ref()?;
        self.jobs
            .get(job)?
            .members
            .get(id)
            .filter(|m| m.conn == conn)
    }

    fn refuse(&mut self, conn: ConnId, refusal: Refusal) {
        self.fx.send(
            conn,
            ServerMsg::Refused {
                code: refusal.code(),
                message: refusal.to_string(),
            },
        );
        self.fx.event(Event::Refused { conn, refusal });
    }

    /// Refuses an operator's request (status, stop) with a bad token: a member's connection
    /// stays open (as for its other refused requests; closing it would leave the member
    /// behind, holding its id and its rank, with nothing left to notice it gone), any other
    /// connection is closed.
    fn refuse_operator(&mut self, conn: ConnId, member: bool, refusal: Refusal) {
        if member {
            self.refuse(conn, refusal);
        } else {
            self.refuse_and_close(conn, refusal);
        }
    }

    /// Refuses and closes a connection that is not a member.
    fn refuse_and_close(&mut self, conn: ConnId, refusal: Refusal) {
        let why = refusal.to_string();
        self.refuse(conn, refusal);
        self.fx.close(conn, why);
    }

    /// The connection is going: a member on it is lost (or refused and lost, for garbage); a
    /// node agent's loses every rank it spoke for, at once.
    fn drop_conn(&mut self, now: Instant, conn: ConnId, why: String, close: bool) {
        if self.conns.get(&conn).is_some_and(|c| c.node.is_some()) {
            self.lose_node(now, conn, &format!("its node agent's {why}"));
            return;
        }
        let member = self.member_of(conn).map(|m| m.id.clone());
        let job = self.conns.get(&conn).and_then(|c| c.member.clone());
        match (member, job) {
            (Some(id), Some((job, _))) => {
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.remove(
                        now,
                        vec![(id, Removal::Lost(why))],
                        &self.config,
                        &mut self.fx,
                    );
                }
            }
            _ if close => self.fx.close(conn, why),
            _ => {}
        }
        self.probes.forget(conn);
        self.forget_conn(conn);
    }
}

impl crate::sans_io::Core for RendezvousMachine {
    type Input = Input;
    type Output = Action;

    fn handle(&mut self, now: Instant, input: Input) {
        RendezvousMachine::handle(self, now, input);
    }

    fn poll_output(&mut self) -> Option<Action> {
        self.poll_action()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        RendezvousMachine::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Instant) {
        RendezvousMachine::handle_timeout(self, now);
    }
}
