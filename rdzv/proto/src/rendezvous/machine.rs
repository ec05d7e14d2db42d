//! [`RendezvousMachine`]: every job on a server, the connections that belong to them, and the
//! liveness of their members. Sans IO: the driver feeds [`Input`]s with the time, carries out
//! [`Action`]s, and calls [`RendezvousMachine::handle_timeout`] at
//! [`RendezvousMachine::poll_timeout`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::ConnId;
use super::admission;
use super::auth::{Scope, authorized};
use super::config::MachineConfig;
use super::effects::{Action, Effects, Event, RendezvousStats};
use super::error::Refusal;
use super::job::{self, Job, Removal};
use super::probes::{self, MAX_EVIDENCE_BYTES, Probe, Probes, ReportVerdict, Start};
use super::resume;
use crate::native::{ClientMsg, CodecError, JobStatus, ServerMsg};

/// What the driver tells the machine.
// One input lives for one `handle` call, never in bulk: a `Join` inline costs less than a box
// per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A connection was accepted from this source IP.
    Connected {
        /// The driver's id for it.
        conn: ConnId,
        /// The client's source IP address, as seen by the server.
        observed_ip: String,
    },
    /// A decoded message arrived.
    Message {
        /// From whom.
        conn: ConnId,
        /// What.
        msg: ClientMsg,
    },
    /// Bytes that do not decode arrived; the connection will be refused and closed.
    Malformed {
        /// From whom.
        conn: ConnId,
        /// What was wrong.
        error: CodecError,
    },
    /// The connection is gone (closed by the peer, timed out, reset).
    Closed {
        /// Which.
        conn: ConnId,
        /// What the transport said.
        why: String,
    },
}

#[derive(Debug, Default)]
struct Conn {
    observed_ip: String,
    /// (job, member) once joined.
    member: Option<(String, String)>,
}

/// The rendezvous state machine of one server. See the module docs.
#[derive(Debug, Default)]
pub struct RendezvousMachine {
    config: MachineConfig,
    jobs: BTreeMap<String, Job>,
    conns: BTreeMap<ConnId, Conn>,
    /// (check at, connection): a member's heartbeat is checked at these times.
    liveness: BTreeSet<(Instant, ConnId)>,
    /// Liveness probes started by data-plane reports.
    probes: Probes,
    fx: Effects,
}

impl RendezvousMachine {
    /// A machine with no jobs.
    pub fn new(config: MachineConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
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
            Input::Message { conn, msg } => self.on_message(now, conn, msg),
            Input::Malformed { conn, error } => {
                let r = Refusal::Codec(error);
                let why = r.to_string();
                self.refuse(conn, r);
                self.drop_conn(now, conn, format!("sent a bad frame: {why}"), true);
            }
            Input::Closed { conn, why } => {
                self.drop_conn(now, conn, format!("connection closed: {why}"), false);
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
            j.end(now, crate::native::JobEnd::Stopped { reason }, &mut self.fx);
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
        let conns: Vec<ConnId> = j.members.values().map(|m| m.conn).collect();
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

    /// Runs every deadline that is due: members silent past the heartbeat timeout are lost,
    /// last calls close, join timeouts fail their jobs, ended and idle jobs are forgotten.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut lost: BTreeMap<String, Vec<(String, Removal)>> = BTreeMap::new();
        while let Some(&(t, conn)) = self.liveness.first() {
            if t > now {
                break;
            }
            self.liveness.pop_first();
            let Some(m) = self.member_of(conn) else {
                continue;
            };
            let welcomed = m.rank.is_some();
            let timeout = self.config.liveness_timeout(welcomed);
            let due = m.last_seen + timeout;
            if due > now {
                // A waiting member is looked at again within the (shorter) round timeout: it
                // may be welcomed meanwhile, and then the round's timeout applies.
                self.liveness
                    .insert((due.min(now + self.config.heartbeat_timeout), conn));
            } else {
                let why = format!(
                    "no message for {:.1} s (heartbeat timeout {:.1} s{})",
                    now.saturating_duration_since(m.last_seen).as_secs_f64(),
                    timeout.as_secs_f64(),
                    if welcomed {
                        ""
                    } else {
                        ", before its first round"
                    }
                );
                let (job, id) = self.conns[&conn].member.clone().unwrap_or_default();
                lost.entry(job).or_default().push((id, Removal::Lost(why)));
            }
        }
        for (conn, p) in self.probes.expired(now) {
            if self.member_of(conn).is_none_or(|m| m.id != p.member) {
                continue;
            }
            let why = format!(
                "did not answer a liveness probe within {} ms after {:?} reported it in round {}: {}",
                job::ms(self.config.probe_timeout),
                p.by,
                p.round,
                p.evidence
            );
            self.fx.event(Event::Reported {
                job: p.job.clone(),
                round: p.round,
                by: p.by,
                rank: p.rank,
                member: Some(p.member.clone()),
                evidence: p.evidence,
                verdict: ReportVerdict::Confirmed,
            });
            lost.entry(p.job)
                .or_default()
                .push((p.member, Removal::Lost(why)));
        }
        for (job, gone) in lost {
            if let Some(j) = self.jobs.get_mut(&job) {
                j.remove(now, gone, &self.config, &mut self.fx);
            }
        }
        let mut forget = Vec::new();
        for (name, j) in self.jobs.iter_mut() {
            if j.next_deadline(&self.config).is_some_and(|t| t <= now)
                && j.on_timeout(now, &self.config, &mut self.fx)
            {
                forget.push(name.clone());
            }
        }
        for name in forget {
            self.forget(&name);
        }
        self.settle();
    }

    fn forget(&mut self, name: &str) {
        if let Some(j) = self.jobs.remove(name) {
            for m in j.members.values() {
                self.fx.close(m.conn, format!("job {name:?} forgotten"));
            }
            self.fx.event(Event::JobForgotten { job: name.into() });
        }
    }

    /// Housekeeping after every call: forget connections the jobs let go of, and ephemeral
    /// jobs that ended.
    fn settle(&mut self) {
        for conn in std::mem::take(&mut self.fx.detached) {
            self.probes.forget(conn);
            if let Some(c) = self.conns.get_mut(&conn) {
                c.member = None;
            }
            self.conns.remove(&conn);
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

    /// The connection is going: a member on it is lost (or refused and lost, for garbage).
    fn drop_conn(&mut self, now: Instant, conn: ConnId, why: String, close: bool) {
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
        self.conns.remove(&conn);
    }

    fn on_message(&mut self, now: Instant, conn: ConnId, msg: ClientMsg) {
        let conn_state = self.conns.entry(conn).or_default();
        let joined = conn_state.member.clone();
        if let Some((job, id)) = &joined
            && let Some(j) = self.jobs.get_mut(job)
            && let Some(m) = j.members.get_mut(id)
            && m.conn == conn
        {
            m.last_seen = now;
            self.fx.stats.messages += 1;
        }
        let member = joined.filter(|_| self.member_of(conn).is_some());
        match (msg, member) {
            (ClientMsg::Join(join), Some((job, member))) => {
                let _ = join;
                self.refuse(conn, Refusal::AlreadyJoined { job, member });
            }
            (ClientMsg::Join(join), None) => self.join(now, conn, join),
            (ClientMsg::Heartbeat { .. }, Some(_)) => {}
            (ClientMsg::Leave, Some((job, id))) => {
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.remove(now, vec![(id, Removal::Left)], &self.config, &mut self.fx);
                }
            }
            (ClientMsg::Finish, Some((job, id))) => {
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.end(
                        now,
                        crate::native::JobEnd::Finished { by: id },
                        &mut self.fx,
                    );
                }
            }
            (ClientMsg::Publish { key, value }, Some((job, id))) => {
                let r = match self.jobs.get_mut(&job) {
                    Some(j) => j.publish(&id, key, value, &self.config, &mut self.fx),
                    None => Err(Refusal::UnknownJob { job }),
                };
                if let Err(e) = r {
                    self.refuse(conn, e);
                }
            }
            (ClientMsg::NextRound, Some((job, id))) => {
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.next_round(now, &id, &self.config, &mut self.fx);
                }
            }
            (ClientMsg::Lookup { ranks }, Some((job, _))) => {
                let peers = self
                    .jobs
                    .get(&job)
                    .map(|j| j.lookup(&ranks))
                    .unwrap_or_default();
                self.fx.send(conn, ServerMsg::Peers(peers));
            }
            (ClientMsg::Status { token, job }, member) => {
                let scope = job.as_deref().map_or(Scope::Server, Scope::Job);
                if !self.authorized(scope, &token) {
                    let job = job.unwrap_or_default();
                    self.refuse_operator(conn, member.is_some(), Refusal::BadToken { job });
                    return;
                }
                match self.status(now, job.as_deref()) {
                    Ok(s) => self.fx.send(conn, ServerMsg::Status(s)),
                    Err(e) => self.refuse(conn, e),
                }
            }
            (ClientMsg::Stop { token, job, reason }, member) => {
                if !self.authorized(Scope::Job(&job), &token) {
                    self.refuse_operator(conn, member.is_some(), Refusal::BadToken { job });
                    return;
                }
                match self.stoppable(&job) {
                    Ok(()) => {
                        // Answer first: stopping the asker's own job closes its connection.
                        self.fx.send(conn, ServerMsg::Stopped { job: job.clone() });
                        let stopped = self.stop(now, &job, reason);
                        debug_assert!(stopped.is_ok());
                    }
                    Err(e) => self.refuse(conn, e),
                }
            }
            (
                ClientMsg::Report {
                    round,
                    rank,
                    evidence,
                },
                Some((job, id)),
            ) => self.report(now, conn, &job, &id, round, rank, evidence),
            (ClientMsg::Alive { nonce }, Some(_)) => {
                let quiet = now + self.config.heartbeat_timeout;
                if let Some(p) = self.probes.answered(conn, nonce, quiet) {
                    self.fx.event(Event::Reported {
                        job: p.job,
                        round: p.round,
                        by: p.by,
                        rank: p.rank,
                        member: Some(p.member),
                        evidence: p.evidence,
                        verdict: ReportVerdict::Dismissed,
                    });
                }
            }
            (ClientMsg::Report { .. }, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "Report" })
            }
            (ClientMsg::Alive { .. }, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "Alive" })
            }
            (ClientMsg::Heartbeat { .. }, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "Heartbeat" })
            }
            (ClientMsg::Leave, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "Leave" })
            }
            (ClientMsg::Finish, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "Finish" })
            }
            (ClientMsg::Publish { .. }, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "Publish" })
            }
            (ClientMsg::NextRound, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "NextRound" })
            }
            (ClientMsg::Lookup { .. }, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "Lookup" })
            }
        }
    }

    /// A member's data-plane report about rank `rank` of `round` (see `probes`).
    #[allow(clippy::too_many_arguments)]
    fn report(
        &mut self,
        now: Instant,
        conn: ConnId,
        job: &str,
        by: &str,
        round: u64,
        rank: u32,
        evidence: String,
    ) {
        let evidence = probes::truncate(evidence, MAX_EVIDENCE_BYTES);
        let Some(j) = self.jobs.get(job) else { return };
        let bad = |why: String| Refusal::BadRequest {
            job: job.into(),
            member: by.into(),
            why,
        };
        let running = matches!(j.phase, job::Phase::Running { .. });
        let event = |member: Option<String>, evidence: String, verdict| Event::Reported {
            job: job.into(),
            round,
            by: by.into(),
            rank,
            member,
            evidence,
            verdict,
        };
        if !running || round != j.round {
            // Late reports of a loss the server already acted on are normal.
            self.fx.event(event(None, evidence, ReportVerdict::Stale));
            return;
        }
        let reporter_rank = j
            .members
            .get(by)
            .and_then(|m| m.rank.filter(|_| m.place == job::Place::Active));
        if reporter_rank.is_none() {
            let r = bad(format!(
                "reports rank {rank} of round {round} but is not in that round"
            ));
            self.refuse(conn, r);
            return;
        }
        let Some(suspect) = j.ranks.get(rank as usize).cloned() else {
            let r = bad(format!(
                "reports rank {rank}, but round {round} has {} ranks",
                j.ranks.len()
            ));
            self.refuse(conn, r);
            return;
        };
        if suspect == by {
            let r = bad(format!(
                "reports itself (rank {rank} of round {round}) gone"
            ));
            self.refuse(conn, r);
            return;
        }
        let Some(target) = j.members.get(&suspect).map(|m| m.conn) else {
            self.fx
                .event(event(Some(suspect), evidence, ReportVerdict::Stale));
            return;
        };
        let timeout = self.config.probe_timeout;
        let started = self.probes.start(now, target, |nonce| Probe {
            nonce,
            job: job.into(),
            member: suspect.clone(),
            rank,
            round,
            by: by.into(),
            evidence: evidence.clone(),
            due: now + timeout,
            reports: 1,
        });
        let verdict = match started {
            Start::Send(nonce) => {
                self.fx.send(target, ServerMsg::Probe { nonce });
                ReportVerdict::Probing
            }
            Start::Not(v) => v,
        };
        self.fx.event(event(Some(suspect), evidence, verdict));
    }

    fn join(&mut self, now: Instant, conn: ConnId, join: crate::native::Join) {
        if !self.authorized(Scope::Job(&join.job), &join.token) {
            self.refuse_and_close(conn, Refusal::BadToken { job: join.job });
            return;
        }
        if let Err(e) = admission::check(&join, &self.config) {
            self.refuse_and_close(conn, e);
            return;
        }
        if !self.jobs.contains_key(&join.job) {
            if let Err(e) = job::validate(&join.job, &join.spec) {
                self.refuse_and_close(conn, e);
                return;
            }
            if let Some(r) = &join.resume
                && let Err(e) = resume::validate(&join.job, &join.member, &join.spec, r)
            {
                self.refuse_and_close(conn, e);
                return;
            }
            if self.jobs.len() >= self.config.max_jobs {
                let max = self.config.max_jobs;
                self.refuse_and_close(conn, Refusal::TooManyJobs { job: join.job, max });
                return;
            }
            let mut job = Job::new(join.job.clone(), join.spec.clone(), now);
            if let Some(r) = &join.resume {
                // A server that restarted: rebuild the round its members were in.
                job.adopt(r, now, &self.config);
            }
            self.jobs.insert(join.job.clone(), job);
            self.fx.event(Event::JobCreated {
                job: join.job.clone(),
            });
        }
        let observed = self
            .conns
            .get(&conn)
            .map(|c| c.observed_ip.clone())
            .unwrap_or_default();
        let (job, id) = (join.job.clone(), join.member.clone());
        // Record the membership before the job acts: completing the round may send to it.
        self.conns.entry(conn).or_default().member = Some((job.clone(), id.clone()));
        let j = self.jobs.get_mut(&job).expect("job exists");
        match j.join(now, conn, join, observed, &self.config, &mut self.fx) {
            Ok(()) => {
                if self.member_of(conn).is_some() {
                    self.liveness
                        .insert((now + self.config.heartbeat_timeout, conn));
                }
            }
            Err(e) => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.member = None;
                }
                self.refuse_and_close(conn, e);
            }
        }
    }
}
