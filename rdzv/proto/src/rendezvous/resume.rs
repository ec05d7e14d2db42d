//! Rebuilding a running round after a server restart, from its members' resumes.
//!
//! The server keeps rounds in memory. When it restarts, members reconnect and join again with
//! the place they held ([`Resume`]: round, rank, world). A job the server does not know, created
//! by such a join, is *adopted*: it waits (at most `resume_window`) for every rank of that
//! round, then completes the same round again (same number, ranks and peers, cause
//! [`RoundCause::Resumed`]), so the members' communicators stay valid and training does not
//! notice. If a rank does not come back in time, two members claim one rank, or a resumed
//! member goes, the job forms its next round by the usual rules, the resumed members keeping
//! their ranks where they fit.

use std::time::Instant;

use super::config::MachineConfig;
use super::effects::{Effects, Event};
use super::error::Refusal;
use super::job::{Adopting, Job, Phase, Place};
use crate::native::{JobSpec, Join, LateJoin, Resume, RoundCause, ServerMsg};

/// The largest round a job is rebuilt for (dt-rdzv's default `--max-native-connections`).
/// Rebuilding holds a seat and a missing-rank entry for every rank of the round before any
/// member is back, so the size a resume claims needs a bound besides the job's own spec.
pub(crate) const MAX_RESUME_WORLD: u32 = 65_536;

/// The highest round a resume may name. Rounds count from 1, one at a time, so a real round
/// number is far below this, and the rebuilt job's round counter can never overflow.
pub(crate) const MAX_RESUME_ROUND: u64 = u32::MAX as u64;

/// Checks a resume before a job is rebuilt from it (`spec` is already valid): a round of
/// 1..=`max_members` (at most [`MAX_RESUME_WORLD`]) members, a rank in it, a round number in
/// 1..=[`MAX_RESUME_ROUND`].
pub(crate) fn validate(job: &str, member: &str, spec: &JobSpec, r: &Resume) -> Result<(), Refusal> {
    let max_world = spec.max_members.min(MAX_RESUME_WORLD);
    let why = if r.world == 0 || r.world > max_world {
        format!(
            "a round of {} members (1..={max_world} for this job)",
            r.world
        )
    } else if r.rank >= r.world {
        format!("rank {} of a round of {} members", r.rank, r.world)
    } else if r.round == 0 || r.round > MAX_RESUME_ROUND {
        format!("round {} (1..={MAX_RESUME_ROUND})", r.round)
    } else {
        return Ok(());
    };
    Err(Refusal::BadRequest {
        job: job.into(),
        member: member.into(),
        why: format!("cannot resume {why}"),
    })
}

impl Job {
    /// A new job created by a member asking to resume `r` (checked by [`validate`]): rebuild
    /// round `r.round`.
    pub(crate) fn adopt(&mut self, r: &Resume, now: Instant, cfg: &MachineConfig) {
        self.round = r.round.saturating_sub(1);
        self.restarts = r.restarts;
        self.ranks = vec![String::new(); r.world as usize];
        self.missing = (0..r.world).map(rank_name).collect();
        self.adopting = Some(Adopting {
            round: r.round,
            world: r.world,
            until: now + cfg.resume_window,
        });
        self.phase = Phase::Forming {
            since: now,
            last_call_at: None,
            cause: RoundCause::Resumed { members: r.world },
            carried: true,
        };
    }

    /// The rank a joining member takes back, if the job is rebuilding its round and the
    /// member held a free rank of it.
    pub(crate) fn resumed_rank(&self, join: &Join) -> Option<u32> {
        let a = self.adopting.as_ref()?;
        let r = join.resume?;
        let free = self
            .ranks
            .get(r.rank as usize)
            .is_some_and(String::is_empty);
        (r.round == a.round && r.world == a.world && free).then_some(r.rank)
    }

    /// Records a member that took back `rank`.
    pub(crate) fn seat(&mut self, id: &str, rank: u32) {
        self.ranks[rank as usize] = id.to_string();
        self.missing.remove(&rank_name(rank));
    }

    /// While rebuilding: completes the round once every rank is back. Returns false when the
    /// job is not rebuilding (the usual rules apply).
    pub(crate) fn try_complete_resumed(
        &mut self,
        now: Instant,
        cfg: &MachineConfig,
        fx: &mut Effects,
    ) -> bool {
        let Some(a) = &self.adopting else {
            return false;
        };
        if self.count(Place::Active) < a.world {
            return true;
        }
        let Some(a) = self.adopting.take() else {
            return true;
        };
        let Phase::Forming { since, .. } = self.phase else {
            return true;
        };
        self.round = a.round;
        self.missing.clear();
        self.phase = Phase::Running {
            pending_since: None,
        };
        let cause = RoundCause::Resumed { members: a.world };
        self.send_welcomes(&cause, cfg, fx);
        fx.event(Event::RoundComplete {
            job: self.name.clone(),
            round: self.round,
            world: a.world,
            cause,
            formed_in: now.saturating_duration_since(since),
        });
        // Members that joined afresh meanwhile are late joiners of the resumed round.
        let waiting = self.count(Place::Waiting);
        if waiting > 0 {
            if self.spec.late_join == LateJoin::Immediate {
                self.phase = Phase::Running {
                    pending_since: Some(now),
                };
            }
            self.broadcast_active(
                ServerMsg::Pending {
                    job: self.name.clone(),
                    round: self.round,
                    waiting,
                },
                fx,
            );
        }
        true
    }

    /// Stops rebuilding (a rank did not come back in time, or a resumed member went): the
    /// next round forms by the usual rules, resumed members keeping their ranks where they fit.
    pub(crate) fn give_up_resume(&mut self, now: Instant, cfg: &MachineConfig, fx: &mut Effects) {
        let Some(a) = self.adopting.take() else {
            return;
        };
        // The next round is numbered after the one the members knew.
        self.round = a.round;
        self.ranks.retain(|id| !id.is_empty());
        self.try_complete(now, cfg, fx);
    }
}

/// How a rank not yet back is named in status and join-timeout messages.
fn rank_name(rank: u32) -> String {
    format!("rank {rank} (before the server restarted)")
}
