//! How members and rounds go: losses, leaves, the end of a round and the end of a job.

use std::time::Instant;

use super::config::MachineConfig;
use super::effects::{Effects, Event};
use super::job::{Job, Member, Phase, Place, Removal};
use crate::native::{JobEnd, Role, RoundCause, ServerMsg};

impl Job {
    /// Ends the running round for everyone and starts forming the next one.
    pub(crate) fn end_round(
        &mut self,
        now: Instant,
        cause: RoundCause,
        cfg: &MachineConfig,
        fx: &mut Effects,
    ) {
        self.broadcast_active(
            ServerMsg::RoundEnded {
                job: self.name.clone(),
                round: self.round,
                cause: cause.clone(),
            },
            fx,
        );
        fx.event(Event::RoundEnded {
            job: self.name.clone(),
            round: self.round,
            cause: cause.clone(),
        });
        self.phase = Phase::Forming {
            since: now,
            last_call_at: None,
            cause,
            carried: true,
        };
        self.promote_spares();
        self.try_complete(now, cfg, fx);
    }

    pub(crate) fn promote_spares(&mut self) {
        // Without spares nothing to scan (a loss while a big round forms came here for each).
        while self.count(Place::Spare) > 0 && self.candidates() < self.spec.max_members {
            let next = self
                .members
                .values()
                .filter(|m| m.place == Place::Spare)
                .min_by_key(|m| m.arrival)
                .map(|m| m.id.clone());
            match next {
                Some(id) => self.set_place(&id, Place::Waiting),
                None => break,
            }
        }
    }

    /// Removes members (lost or leaving) at once, then ends the round once if any was in it.
    pub(crate) fn remove(
        &mut self,
        now: Instant,
        gone: Vec<(String, Removal)>,
        cfg: &MachineConfig,
        fx: &mut Effects,
    ) {
        let mut cause: Option<(u32, RoundCause, bool)> = None;
        let mut finished_by = None;
        for (id, how) in gone {
            let Some(m) = self.members.remove(&id) else {
                continue;
            };
            self.counts[m.place as usize] -= 1;
            let why = match &how {
                Removal::Lost(why) => {
                    fx.event(Event::MemberLost {
                        job: self.name.clone(),
                        member: id.clone(),
                        rank: m.rank.filter(|_| m.place == Place::Active),
                        why: why.clone(),
                    });
                    // Said before the close: a member that was only frozen hears, when it
                    // wakes, that the others went on without it.
                    fx.send(
                        m.conn,
                        ServerMsg::Removed {
                            job: self.name.clone(),
                            round: self.round,
                            why: why.clone(),
                        },
                    );
                    format!("member {id:?} of job {:?} lost: {why}", self.name)
                }
                Removal::Left => {
                    fx.event(Event::MemberLeft {
                        job: self.name.clone(),
                        member: id.clone(),
                    });
                    if self.spec.ephemeral && m.role == Role::Main {
                        finished_by = Some(id.clone());
                    }
                    format!("member {id:?} left job {:?}", self.name)
                }
            };
            fx.close(m.conn, why);
            if m.place == Place::Active {
                self.missing.insert(id.clone());
                if matches!(self.phase, Phase::Running { .. })
                    && let Some(rank) = m.rank
                    && cause.as_ref().is_none_or(|c| rank < c.0)
                {
                    let (c, lost) = match how {
                        Removal::Lost(why) => (
                            RoundCause::MemberLost {
                                member: id,
                                rank,
                                why,
                            },
                            true,
                        ),
                        Removal::Left => (RoundCause::MemberLeft { member: id, rank }, false),
                    };
                    let lost = lost || cause.as_ref().is_some_and(|c| c.2);
                    cause = Some((rank, c, lost));
                }
            }
        }
        if self.members.is_empty() && self.ended().is_none() {
            self.empty_since = Some(now);
        }
        if let Some(by) = finished_by {
            self.end(now, JobEnd::Finished { by }, fx);
            return;
        }
        match (&mut self.phase, cause) {
            (Phase::Running { .. }, Some((_, cause, lost))) => {
                if lost {
                    // A job rebuilt after a restart starts from the count in its members' resumes,
                    // which may be anything: saturate rather than overflow.
                    self.restarts = self.restarts.saturating_add(1);
                    if let Some(max) = self.spec.max_restarts
                        && self.restarts > max
                    {
                        self.end(now, JobEnd::RestartLimit { restarts: max }, fx);
                        return;
                    }
                }
                self.end_round(now, cause, cfg, fx);
            }
            (Phase::Running { pending_since }, None) => {
                if self.counts[Place::Waiting as usize] == 0 {
                    *pending_since = None;
                }
            }
            (Phase::Forming { .. }, _) if self.adopting.is_some() => {
                // A resumed member went: its rank cannot come back; form by the usual rules.
                for id in self.ranks.iter_mut() {
                    if !self.members.contains_key(id.as_str()) {
                        id.clear();
                    }
                }
                self.give_up_resume(now, cfg, fx);
            }
            (Phase::Forming { .. }, _) => {
                self.promote_spares();
                self.try_complete(now, cfg, fx);
            }
            (Phase::Ended { .. }, _) => {}
        }
    }

    /// Ends the job: every member is told how, and let go.
    pub(crate) fn end(&mut self, now: Instant, end: JobEnd, fx: &mut Effects) {
        if self.ended().is_some() {
            return;
        }
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|m| m.arrival);
        for m in members {
            fx.send(
                m.conn,
                ServerMsg::JobEnded {
                    job: self.name.clone(),
                    end: end.clone(),
                },
            );
            fx.close(m.conn, format!("job {:?} ended: {end}", self.name));
        }
        self.members.clear();
        self.counts = [0; 3];
        fx.event(Event::JobEnded {
            job: self.name.clone(),
            end: end.clone(),
        });
        self.phase = Phase::Ended { end, at: now };
    }

    /// A member asks for a new round now.
    pub(crate) fn next_round(
        &mut self,
        now: Instant,
        by: &str,
        cfg: &MachineConfig,
        fx: &mut Effects,
    ) {
        if matches!(self.phase, Phase::Running { .. })
            && self
                .members
                .get(by)
                .is_some_and(|m| m.place == Place::Active)
        {
            self.end_round(now, RoundCause::Requested { by: by.into() }, cfg, fx);
        }
    }
}
