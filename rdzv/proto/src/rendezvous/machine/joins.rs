//! A join: the token, the admission limits, the job created (or rebuilt from a resume after a
//! server restart) on its first join, then the member's place in it and its liveness check.

use std::time::Instant;

use super::super::ConnId;
use super::super::admission;
use super::super::auth::Scope;
use super::super::effects::Event;
use super::super::error::Refusal;
use super::super::job::{self, Job};
use super::super::resume;
use super::RendezvousMachine;
use crate::native::Join;

impl RendezvousMachine {
    pub(super) fn join(&mut self, now: Instant, conn: ConnId, join: Join) {
        if !self.authorized(Scope::Job(&join.job), &join.token) {
            // Clipped: a refusal (and its log line) must not repeat a megabyte-long name.
            let job = admission::clip(&join.job);
            self.refuse_and_close(conn, Refusal::BadToken { job });
            return;
        }
        if let Err(e) = admission::check(&join, &self.config) {
            self.refuse_and_close(conn, e);
            return;
        }
        if let Err(e) = self.through_agent(conn, &join) {
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
                // A rank joined through its node's agent lives as long as the agent does.
                let own_liveness = self.conns.get(&conn).is_some_and(|c| c.carrier.is_none());
                if own_liveness && self.member_of(conn).is_some() {
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

    /// A join on a stream of a node agent's connection must name the agent's job and node.
    fn through_agent(&self, conn: ConnId, join: &Join) -> Result<(), Refusal> {
        let Some(carrier) = self.conns.get(&conn).and_then(|c| c.carrier) else {
            return Ok(());
        };
        let bad = |why: String| Refusal::BadRequest {
            job: admission::clip(&join.job),
            member: admission::clip(&join.member),
            why,
        };
        match self.conns.get(&carrier).and_then(|c| c.node.as_ref()) {
            None => Err(bad("joined through a node agent that is gone".into())),
            Some(n) if n.job != join.job || n.node != join.node => Err(bad(format!(
                "joined through the agent of node {:?} of job {:?} but names node {:?} of job {:?}",
                n.node,
                n.job,
                admission::clip(&join.node),
                admission::clip(&join.job)
            ))),
            Some(_) => Ok(()),
        }
    }
}
