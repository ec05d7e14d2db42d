//! What the member machine does with each message from the server.

use std::time::{Duration, Instant};

use crate::native::{RefusalCode, Resume, RoundEnd, ServerMsg};

use super::io::Output;
use super::{Answer, FIRST_PAUSE, Member};

impl Member {
    /// Notes what the session needs of `msg` and hands it to the application (or answers it);
    /// what the application gets also updates its [`Rounds`](super::Rounds) (read once, here).
    pub(super) fn message(&mut self, now: Instant, msg: ServerMsg) {
        let before = self.every;
        let deliver = self.note(now, &msg);
        if self.every != before {
            self.restart_heartbeats(now);
        }
        if deliver {
            // A refusal and the job's end are kept in the rounds for the application.
            let _ = self.rounds.take(&msg);
            self.out.push_back(Output::Deliver(msg));
        }
    }

    /// Whether the message goes on to the application.
    fn note(&mut self, now: Instant, msg: &ServerMsg) -> bool {
        match msg {
            ServerMsg::Probe { nonce } => {
                // A peer reported this member gone: say otherwise at once. Not the
                // application's business.
                self.out
                    .push_back(Output::Reply(crate::native::ClientMsg::Alive {
                        nonce: *nonce,
                    }));
                return false;
            }
            // A peer's call timed out: the process's dump watchers act on it, on the session.
            ServerMsg::Dump {
                round, rank, why, ..
            } => {
                self.out.push_back(Output::Dump {
                    round: *round,
                    rank: *rank,
                    why: why.clone(),
                });
                return false;
            }
            // Another server owns the job: join there (not the application's business either;
            // the join, and the resume if any, are sent again).
            ServerMsg::Redirect { endpoint, why, .. } => {
                self.out.push_back(Output::Redirected {
                    to: endpoint.clone(),
                    why: why.clone(),
                });
                self.redirect = Some(endpoint.clone());
                self.lost_for(now, format!("redirected to {endpoint}: {why}"), true);
                return false;
            }
            ServerMsg::Removed { job, round, why } => {
                self.leaving = true;
                self.answer = Some(Answer::Final(format!(
                    "dt-rdzv removed this member from job {job:?} (round {round}): {why}"
                )));
                self.out.push_back(Output::EndAll(RoundEnd {
                    round: *round,
                    lost: None,
                    why: format!("dt-rdzv removed this member from job {job:?}: {why}"),
                    removed: true,
                }));
            }
            ServerMsg::RoundEnded { round, cause, .. } => {
                self.out
                    .push_back(Output::EndThrough(RoundEnd::from_cause(*round, cause)));
            }
            ServerMsg::Joined {
                heartbeat_interval_ms,
                ..
            } => {
                self.every = Some(Duration::from_millis((*heartbeat_interval_ms).max(10)));
                if self.rejoining {
                    self.out.push_back(Output::Rejoined);
                }
                self.rejoining = false;
                self.answer = None;
                self.attempt = 0;
                self.reconnect_until = None;
                self.pause = FIRST_PAUSE;
            }
            ServerMsg::Welcome(w) => {
                if w.round > 1 {
                    self.out.push_back(Output::EndThrough(RoundEnd {
                        round: w.round - 1,
                        lost: None,
                        why: format!("superseded by round {} ({})", w.round, w.cause),
                        removed: false,
                    }));
                }
                self.every = Some(Duration::from_millis(w.heartbeat_interval_ms.max(10)));
                self.heartbeat_timeout = Some(Duration::from_millis(w.heartbeat_timeout_ms));
                self.silence = None;
                self.resume = Some(Resume {
                    round: w.round,
                    rank: w.rank,
                    world: w.world,
                    restarts: w.restarts,
                });
            }
            // The server still holds this member's old connection (it has not noticed the
            // loss yet): it closes this one; try again until it lets go.
            ServerMsg::Refused {
                code: RefusalCode::MemberTaken,
                message,
            } if self.rejoining => {
                self.answer = Some(Answer::Later(format!(
                    "dt-rdzv refused the rejoin for now (MemberTaken): {message}"
                )));
                return false;
            }
            // Any other answer to a rejoin is final: the session ends with its reason when
            // the server closes the connection.
            ServerMsg::Refused { code, message } => {
                if self.rejoining {
                    self.answer = Some(Answer::Final(format!(
                        "dt-rdzv refused this member's rejoin ({code:?}): {message}"
                    )));
                }
                self.rejoining = false;
            }
            ServerMsg::JobEnded { job, end } => {
                self.rejoining = false;
                self.out.push_back(Output::EndAll(RoundEnd {
                    round: self.resume.map_or(u64::MAX, |r| r.round),
                    lost: None,
                    why: format!("job {job:?} ended: {end}"),
                    removed: true,
                }));
            }
            _ => {}
        }
        true
    }
}
