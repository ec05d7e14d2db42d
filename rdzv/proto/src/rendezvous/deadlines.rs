//! A job's deadlines: last call, join timeout, late-join batching, TTL, retention.

use std::time::{Duration, Instant};

use super::config::MachineConfig;
use super::effects::Effects;
use super::job::{Job, Phase, Place, ms};
use crate::native::{JobEnd, RoundCause};

impl Job {
    /// The earliest time [`Job::on_timeout`] has work.
    pub(crate) fn next_deadline(&self, cfg: &MachineConfig) -> Option<Instant> {
        let spec = &self.spec;
        let mut t: Option<Instant> = None;
        let mut at = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        match &self.phase {
            Phase::Ended { at: ended, .. } => {
                at(*ended + cfg.ended_retention);
                return t;
            }
            Phase::Forming {
                since,
                last_call_at,
                ..
            } => {
                at(*since + Duration::from_millis(spec.join_timeout_ms));
                if let Some(a) = &self.adopting {
                    at(a.until);
                }
                if let Some(l) = last_call_at {
                    at(*l + Duration::from_millis(spec.last_call_ms));
                }
            }
            Phase::Running { pending_since } => {
                if let Some(p) = pending_since {
                    at(*p + Duration::from_millis(spec.last_call_ms));
                }
            }
        }
        if let Some(ttl) = spec.ttl_ms {
            at(self.created + Duration::from_millis(ttl));
        }
        if let Some(e) = self.empty_since {
            at(e + cfg.idle_ttl);
        }
        t
    }

    /// Runs due deadlines. Returns true when the job should be forgotten.
    pub(crate) fn on_timeout(
        &mut self,
        now: Instant,
        cfg: &MachineConfig,
        fx: &mut Effects,
    ) -> bool {
        if let Phase::Ended { at, .. } = &self.phase {
            return now >= *at + cfg.ended_retention;
        }
        if let Some(e) = self.empty_since
            && now >= e + cfg.idle_ttl
        {
            return true;
        }
        if let Some(ttl) = self.spec.ttl_ms
            && now >= self.created + Duration::from_millis(ttl)
        {
            self.end(now, JobEnd::Expired { ttl_ms: ttl }, fx);
            return self.spec.ephemeral;
        }
        if self.adopting.as_ref().is_some_and(|a| now >= a.until) {
            self.give_up_resume(now, cfg, fx);
        }
        let last_call = Duration::from_millis(self.spec.last_call_ms);
        match &self.phase {
            Phase::Forming {
                since,
                last_call_at,
                ..
            } => {
                if last_call_at.is_some_and(|l| now >= l + last_call)
                    && self.candidates() >= self.spec.min_members
                {
                    self.complete(now, cfg, fx);
                } else if now >= *since + Duration::from_millis(self.spec.join_timeout_ms) {
                    let end = JobEnd::JoinTimeout {
                        round: self.round + 1,
                        have: self.candidates(),
                        min: self.spec.min_members,
                        waited_ms: ms(now.saturating_duration_since(*since)),
                        missing: self.missing.iter().cloned().collect(),
                    };
                    self.end(now, end, fx);
                    return self.spec.ephemeral;
                }
            }
            Phase::Running { pending_since } => {
                if pending_since.is_some_and(|p| now >= p + last_call) {
                    let count = self.count(Place::Waiting);
                    self.end_round(now, RoundCause::NewMembers { count }, cfg, fx);
                }
            }
            Phase::Ended { .. } => {}
        }
        false
    }
}
