//! The machine's deadlines: members silent past the heartbeat timeout and suspects that did
//! not answer a probe are lost; then each job's own deadlines run (last calls, join timeouts,
//! retention of ended and idle jobs).

use std::collections::BTreeMap;
use std::time::Instant;

use super::super::effects::Event;
use super::super::job::{self, Removal};
use super::super::probes::ReportVerdict;
use super::RendezvousMachine;

impl RendezvousMachine {
    /// Runs every deadline that is due: members silent past the heartbeat timeout are lost,
    /// last calls close, join timeouts fail their jobs, ended and idle jobs are forgotten.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut lost: BTreeMap<String, Vec<(String, Removal)>> = BTreeMap::new();
        let mut agents = Vec::new();
        while let Some(&(t, conn)) = self.liveness.first() {
            if t > now {
                break;
            }
            self.liveness.pop_first();
            let Some(m) = self.member_of(conn) else {
                if let Some(why) = self.agent_due(now, conn) {
                    agents.push((conn, why));
                }
                continue;
            };
            let (timeout, note) = m.liveness_timeout(&self.config);
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
                    note
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
        for (conn, why) in agents {
            self.lose_node(now, conn, &why);
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
}
