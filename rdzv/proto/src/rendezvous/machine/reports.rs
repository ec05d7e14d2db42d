//! A member's data-plane report about a peer of its round (see `probes`): stale reports are
//! noted, bad ones refused, and a good one starts a liveness probe of the suspect (or joins the
//! one under way).

use std::time::Instant;

use super::super::ConnId;
use super::super::effects::Event;
use super::super::error::Refusal;
use super::super::job;
use super::super::probes::{self, MAX_EVIDENCE_BYTES, Probe, ReportVerdict, Start};
use super::RendezvousMachine;
use crate::native::ServerMsg;

impl RendezvousMachine {
    /// A member's data-plane report about rank `rank` of `round` (see `probes`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn report(
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
}
