//! What each message does: a member's requests (join, heartbeat, leave, finish, publish, next
//! round, lookup, report, alive) and an operator's (status, stop, which need a token); a
//! member's request from a connection that has not joined is refused and the connection
//! closed; what a connection the machine already closed still sends is dropped.

use std::time::Instant;

use super::super::ConnId;
use super::super::auth::Scope;
use super::super::effects::Event;
use super::super::error::Refusal;
use super::super::job::{Member, Relay, Removal};
use super::super::probes::ReportVerdict;
use super::RendezvousMachine;
use crate::native::{ClientMsg, JobEnd, MAX_RELAYED, Relayed, ServerMsg};

impl RendezvousMachine {
    pub(super) fn on_message(&mut self, now: Instant, conn: ConnId, msg: ClientMsg) {
        if self.closing.contains(&conn) {
            // Sent before our close reached it (a late heartbeat of a member declared lost).
            return;
        }
        let conn_state = self.conns.entry(conn).or_default();
        if conn_state.node.is_some() {
            self.on_agent_message(now, conn, msg);
            return;
        }
        let (joined, carrier) = (conn_state.member.clone(), conn_state.carrier);
        if let Some(carrier) = carrier {
            self.node_seen(now, carrier);
        }
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
            (ClientMsg::Node(_), Some((job, member))) => {
                self.refuse(conn, Refusal::AlreadyJoined { job, member })
            }
            (ClientMsg::Node(hello), None) => self.node_hello(now, conn, hello),
            (ClientMsg::RankLost { .. }, Some((job, member))) => {
                let why = "only a node agent reports its ranks lost, on its hello stream".into();
                self.refuse(conn, Refusal::BadRequest { job, member, why })
            }
            (ClientMsg::RankLost { .. }, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "RankLost" })
            }
            (ClientMsg::Heartbeat { .. }, Some(_)) => {}
            (ClientMsg::Progress(p), Some((job, id))) => {
                let checked = p
                    .check()
                    .map_err(|e| format!("progress summary refused: {e}"));
                self.keep(conn, job, id, checked, |m| m.progress = Some((p, now)));
            }
            (ClientMsg::Relay { world, workers }, Some((job, id))) => {
                let checked = check_relay(world, &workers)
                    .map_err(|why| format!("relayed summaries refused: {why}"));
                self.keep(conn, job, id, checked, |m| {
                    // The workers' own numbering of rounds is not the job's: their summaries
                    // are read as of the workers' world, round 0.
                    let mut workers = workers;
                    for w in &mut workers {
                        w.progress.round = 0;
                    }
                    m.relayed = Some(Relay {
                        world,
                        workers,
                        at: now,
                    });
                });
            }
            (ClientMsg::Relay { .. }, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "Relay" })
            }
            (ClientMsg::Leave, Some((job, id))) => {
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.remove(now, vec![(id, Removal::Left)], &self.config, &mut self.fx);
                }
            }
            (ClientMsg::Finish, Some((job, id))) => {
                if let Some(j) = self.jobs.get_mut(&job) {
                    j.end(now, JobEnd::Finished { by: id }, &mut self.fx);
                }
            }
            (ClientMsg::Publish { key, value }, Some((job, id))) => {
                let room = self.config_room;
                let r = match self.jobs.get_mut(&job) {
                    Some(j) => {
                        let before = j.config.bytes() as u64;
                        let r = j.publish(&id, key, value, &self.config, room, &mut self.fx);
                        self.config_bytes = self.config_bytes - before + j.config.bytes() as u64;
                        r
                    }
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
            (ClientMsg::Lookup { ranks }, Some((job, id))) => {
                let peers = match self.jobs.get(&job) {
                    Some(j) => j.lookup(&id, &ranks, &self.config),
                    None => Ok(Vec::new()),
                };
                match peers {
                    Ok(peers) => self.fx.send(conn, ServerMsg::Peers(peers)),
                    Err(e) => self.refuse(conn, e),
                }
            }
            (ClientMsg::Status { token, job }, member) => {
                let scope = job.as_deref().map_or(Scope::Server, Scope::Job);
                if !self.authorized(scope, &token) {
                    let job = job.unwrap_or_default();
                    self.refuse_operator(conn, member.is_some(), Refusal::BadToken { job });
                    return;
                }
                if member.is_none() && self.operator(conn, job.as_deref(), &token).is_err() {
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
                if member.is_none() && self.operator(conn, Some(&job), &token).is_err() {
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
            (ClientMsg::Dump { round, why }, Some((job, id))) => {
                self.dump(conn, &job, &id, round, why)
            }
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
            (ClientMsg::Dump { .. }, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "Dump" })
            }
            (ClientMsg::Alive { .. }, None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "Alive" })
            }
            (ClientMsg::Progress(_), None) => {
                self.refuse_and_close(conn, Refusal::NotJoined { what: "Progress" })
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
}

impl RendezvousMachine {
    /// Keeps what member `id` of `job` sent (`update`), or refuses it when `checked` says why
    /// (the member keeps its place either way).
    fn keep(
        &mut self,
        conn: ConnId,
        job: String,
        id: String,
        checked: Result<(), String>,
        update: impl FnOnce(&mut Member),
    ) {
        match checked {
            Err(why) => self.refuse(
                conn,
                Refusal::BadRequest {
                    job,
                    member: id,
                    why,
                },
            ),
            Ok(()) => {
                if let Some(m) = self.jobs.get_mut(&job).and_then(|j| j.members.get_mut(&id)) {
                    update(m);
                }
            }
        }
    }
}

/// Whether a relay is within the protocol's bounds: at most [`MAX_RELAYED`] workers, each
/// summary within its own bounds, ranks within the world and each once.
fn check_relay(world: u32, workers: &[Relayed]) -> Result<(), String> {
    if workers.len() > MAX_RELAYED {
        return Err(format!("{} workers (at most {MAX_RELAYED})", workers.len()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for w in workers {
        w.progress.check().map_err(|e| e.to_string())?;
        let r = w.progress.rank;
        if r >= world {
            return Err(format!("rank {r} in a world of {world}"));
        }
        if !seen.insert(r) {
            return Err(format!("rank {r} twice"));
        }
    }
    Ok(())
}
