//! A native rendezvous member's session rules, sans-IO: the [`Member`] machine.
//!
//! It decides what a member's connection carries and what happens when it is lost: it sends
//! what the application sends, heartbeats at the rate the server asked for, answers the
//! server's probes, tells the round watchers when the server ends a round, and, for a member
//! whose connection is lost without the server meaning it (a restart, a network failure, a
//! `Redirect` to the job's owner), asks for a new connection ([`Output::Dial`]: the named
//! owner first, then the endpoint list, the next server first after one went silent) and
//! joins again asking for the place it held ([`Resume`]), within the reconnect window, with
//! backoff between attempts. A rejoin whose connection the server closes or resets, or that
//! drops before an answer, is one more failed attempt: a server that still holds this member's
//! old connection refuses it (`MemberTaken`) and closes the new one until it lets go of the
//! old. What ends a session: the application closing it, the window running out, the server
//! closing this member's connection on purpose, the server refusing its rejoin for good (a bad
//! token, the job ended, ...: its reason is the session's), or this member's own silence past
//! its round's heartbeat timeout ([`Output::Ended`] says why). It also keeps
//! what the member knows of its rounds ([`Rounds`]), reading each message it hands to the
//! application once.
//!
//! The driver (`dt-rdzv`'s session task: QUIC, tokio timers) feeds [`Input`]s with the time
//! and carries out the [`Output`]s in order ([`Core`]).

mod deliver;
mod io;
mod rounds;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub use io::{Input, Loss, Output};
pub use rounds::{KEPT_REFUSALS, Rounds, Stop};

use crate::native::{ClientMsg, Join, Resume, RoundEnd};
use crate::sans_io::Core;

/// What one server of a list gets of a connection attempt's deadline, at most (also the
/// most a redirect's named owner gets).
pub const PER_SERVER: Duration = Duration::from_millis(1000);
/// Longest a reconnection attempt waits for a handshake: a server that is still down is
/// tried again rather than waited for.
pub const ATTEMPT: Duration = Duration::from_secs(2);
/// First pause after a failed attempt or a refused rejoin (each doubles up to [`MAX_PAUSE`]).
pub const FIRST_PAUSE: Duration = Duration::from_millis(50);
/// Longest pause between attempts.
pub const MAX_PAUSE: Duration = Duration::from_secs(1);
/// How late a heartbeat may run before the next is counted from when it ran rather than from
/// when it was due (tokio's interval, `MissedTickBehavior::Delay`).
const LATE: Duration = Duration::from_millis(5);

/// The server's word before it closes a connection: its answer to a join sent again after
/// reconnecting, or this member's removal.
#[derive(Debug, Clone)]
enum Answer {
    /// Not yet (it still holds this member's old connection: `MemberTaken`): try again.
    Later(String),
    /// Never (a bad token, the job ended, the spec differs, this member removed...): the
    /// session ends, saying so.
    Final(String),
}

/// Where the session stands.
#[derive(Debug, Clone)]
enum Phase {
    /// A connection is served: heartbeats are due at `next` (none before a join).
    Serving { next: Option<Instant>, seq: u64 },
    /// Lost: the next attempt at `at`.
    Waiting { at: Instant, retry: Retry },
    /// An attempt is under way (a dial, then the rejoin's write).
    Dialing { retry: Retry },
    /// Over.
    Ended,
}

/// One reconnection's progress.
#[derive(Debug, Clone)]
struct Retry {
    why: String,
    until: Instant,
    backoff: Duration,
    attempt: u32,
}

/// A member's session machine (see the module docs).
#[derive(Debug, Clone)]
pub struct Member {
    /// The reconnect window (`None`: a loss ends the session).
    reconnect: Option<Duration>,
    /// The join this member sent (to send again after reconnecting).
    join: Option<Join>,
    /// Its place in the last round it was welcomed into.
    resume: Option<Resume>,
    /// The heartbeat interval the server asked for (none before a join).
    every: Option<Duration>,
    /// Its round's heartbeat timeout (from the welcome).
    heartbeat_timeout: Option<Duration>,
    /// It left or finished (or was removed): a lost connection is no surprise.
    leaving: bool,
    /// Reconnected and waiting for the server's answer to the join sent again.
    rejoining: bool,
    /// The server's refusal of that join, or this member's removal, if it said so.
    answer: Option<Answer>,
    /// Which reconnection attempt the join sent again belongs to (counting on when it fails).
    attempt: u32,
    /// Until when reconnecting may go on (set by the first loss, cleared by a `Joined`).
    reconnect_until: Option<Instant>,
    /// Pause before the next reconnection after a refused rejoin (doubles up to 1 s).
    pause: Duration,
    /// Which server of the endpoint list to try first when reconnecting.
    server: usize,
    /// Where the last server sent this member (`Redirect`), tried first next.
    redirect: Option<String>,
    /// When this member last sent anything (a heartbeat, a message).
    last_sent: Instant,
    /// The last silence past the heartbeat timeout that a send broke (when it was broken, how
    /// long it was): a process stopped past the timeout may send a heartbeat on waking before
    /// it reads that the server closed its connection, and that loss is still its removal.
    silence: Option<(Instant, Duration)>,
    /// No heartbeats (tests of the server's liveness detection).
    silent: bool,
    /// The application still listens for events.
    listening: bool,
    /// What the messages handed to the application said of its rounds.
    rounds: Rounds,
    phase: Phase,
    out: VecDeque<Output>,
}

impl Member {
    /// A session connected at `now` to server `server` of the endpoint list, reconnecting
    /// within `reconnect` after a loss (`None`: never).
    pub fn new(now: Instant, server: usize, reconnect: Option<Duration>) -> Self {
        Self {
            reconnect,
            join: None,
            resume: None,
            every: None,
            heartbeat_timeout: None,
            leaving: false,
            rejoining: false,
            answer: None,
            attempt: 0,
            reconnect_until: None,
            pause: FIRST_PAUSE,
            server,
            redirect: None,
            last_sent: now,
            silence: None,
            silent: false,
            listening: true,
            rounds: Rounds::default(),
            phase: Phase::Serving { next: None, seq: 0 },
            out: VecDeque::new(),
        }
    }

    /// Stops (or resumes) heartbeats.
    pub fn set_silent(&mut self, silent: bool) {
        self.silent = silent;
    }

    /// Whether the application still listens for events (one that does not is not worth
    /// reconnecting for).
    pub fn set_listening(&mut self, listening: bool) {
        self.listening = listening;
    }

    /// Whether a connection is being served (inputs from it are expected).
    pub fn serving(&self) -> bool {
        matches!(self.phase, Phase::Serving { .. })
    }

    /// Whether the session is over.
    pub fn ended(&self) -> bool {
        matches!(self.phase, Phase::Ended)
    }

    /// This member's place in its last round, if it was welcomed into one.
    pub fn resume(&self) -> Option<Resume> {
        self.resume
    }

    /// What this member knows of its rounds, from every message handed to the application
    /// ([`Output::Deliver`]).
    pub fn rounds(&self) -> &Rounds {
        &self.rounds
    }

    /// The same, for the application to move to the next round ([`Rounds::advance`]) and to
    /// read the refusals ([`Rounds::take_refused`]).
    pub fn rounds_mut(&mut self) -> &mut Rounds {
        &mut self.rounds
    }

    fn restart_heartbeats(&mut self, now: Instant) {
        if let Phase::Serving { next, .. } = &mut self.phase {
            *next = self.every.map(|e| now + e);
        }
    }

    fn end(&mut self, why: String) {
        self.phase = Phase::Ended;
        self.out.push_back(Output::Ended(why));
    }

    /// When this member, in a round, has sent nothing for longer than the round's heartbeat
    /// timeout (its process was stopped or starved: a lost connection is then its own
    /// silence, not the server's), the server has declared it lost: it must not rejoin as if
    /// the server had gone away.
    fn silenced(&self, now: Instant) -> Option<RoundEnd> {
        let (r, timeout) = (self.resume?, self.heartbeat_timeout?);
        let mut silent = now.saturating_duration_since(self.last_sent);
        if let Some((broken, gap)) = self.silence {
            // Broken just now (within one timeout): the loss that follows is its consequence.
            if now.saturating_duration_since(broken) <= timeout {
                silent = silent.max(gap);
            }
        }
        (silent > timeout && !self.leaving).then(|| RoundEnd {
            round: r.round,
            lost: None,
            why: format!(
                "this member sent nothing for {:.1} s (its process was stopped or starved), past \
                 the heartbeat timeout of {:.1} s: dt-rdzv has removed it from round {}",
                silent.as_secs_f64(),
                timeout.as_secs_f64(),
                r.round
            ),
            removed: true,
        })
    }

    /// The connection is gone; `retry` when the server did not mean it.
    fn lost_for(&mut self, now: Instant, why: String, retry: bool) {
        // A member reconnecting has been silent because it had no connection, not because it
        // was stopped: only the loss of a connection it served can be its own silence.
        if let Some(end) = self.silenced(now).filter(|_| !self.rejoining) {
            // Not the server's loss but this member's silence: it was removed.
            let text = format!("{} (the connection: {why})", end.why);
            self.out.push_back(Output::EndAll(end));
            return self.end(text);
        }
        let window = self
            .reconnect
            .filter(|_| retry && self.join.is_some() && !self.leaving && self.listening);
        let Some(window) = window else {
            if !retry && !self.leaving {
                // The server closed this member's connection on purpose: it was declared lost
                // (or its job was forgotten, or it refused the rejoin for good).
                self.out.push_back(Output::EndAll(RoundEnd {
                    round: self.resume.map_or(u64::MAX, |r| r.round),
                    lost: None,
                    why: format!("dt-rdzv closed this member's connection: {why}"),
                    removed: true,
                }));
            }
            self.rejoining = false;
            return self.end(why);
        };
        let until = *self.reconnect_until.get_or_insert(now + window);
        let (at, attempt) = if self.rejoining {
            // The last rejoin failed (refused while the server still held the old connection,
            // or its connection closed or dropped before an answer): one more failed attempt,
            // after the pause.
            self.rejoining = false;
            let p = self.pause;
            self.pause = (p * 2).min(MAX_PAUSE);
            if now + p >= until {
                return self.end(format!(
                    "lost the connection to dt-rdzv and could not rejoin within the reconnect \
                     window: {why}"
                ));
            }
            (now + p, self.attempt)
        } else {
            (now, 0)
        };
        let retry = Retry {
            why,
            until,
            backoff: FIRST_PAUSE,
            attempt,
        };
        self.phase = Phase::Waiting { at, retry };
        self.out.push_back(Output::Disconnect);
    }

    fn dial_failed(&mut self, now: Instant, mut retry: Retry, last: String) {
        if now + retry.backoff >= retry.until {
            return self.end(format!(
                "lost the connection to dt-rdzv ({}) and could not rejoin within the reconnect \
                 window: {last}",
                retry.why
            ));
        }
        let at = now + retry.backoff;
        retry.backoff = (retry.backoff * 2).min(MAX_PAUSE);
        self.phase = Phase::Waiting { at, retry };
    }
}

impl Core for Member {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Instant, input: Input) {
        let phase = std::mem::replace(&mut self.phase, Phase::Ended);
        match (input, phase) {
            (Input::Outgoing(msg), phase) => {
                self.phase = phase;
                match &msg {
                    ClientMsg::Join(j) => self.join = Some(j.clone()),
                    ClientMsg::Leave | ClientMsg::Finish => self.leaving = true,
                    _ => {}
                }
                self.out.push_back(Output::Send(msg));
            }
            (Input::Sent, phase) => {
                self.phase = phase;
                let gap = now.saturating_duration_since(self.last_sent);
                if self.heartbeat_timeout.is_some_and(|t| gap > t) {
                    self.silence = Some((now, gap));
                }
                self.last_sent = now;
            }
            (Input::Message(msg), phase @ Phase::Serving { .. }) => {
                self.phase = phase;
                self.message(now, msg);
            }
            (Input::ConnectionLost { why, loss }, Phase::Serving { .. }) => {
                // A server that went silent (killed, its host lost) is not tried first again
                // when the endpoint list has another.
                if loss == Loss::Silent {
                    self.server += 1;
                }
                match self.answer.take() {
                    // The server refused the rejoin for good, or removed this member: its reason
                    // ends the session.
                    Some(Answer::Final(refused)) => {
                        self.lost_for(now, format!("{refused} (the connection: {why})"), false);
                    }
                    // Not yet: the server closed this connection after refusing; try again.
                    Some(Answer::Later(refused)) => {
                        self.lost_for(now, format!("{refused} (the connection: {why})"), true);
                    }
                    None => {
                        // A rejoin unanswered when its connection ended (closed, reset, timed
                        // out: the server restarting or letting go of this member's old
                        // connection meanwhile) is a failed attempt, tried again.
                        let retry = self.rejoining
                            || match loss {
                                Loss::ServerGone | Loss::Silent => true,
                                Loss::Closed | Loss::Stream => false,
                            };
                        self.lost_for(now, why, retry);
                    }
                }
            }
            (Input::Connected { server }, phase @ Phase::Dialing { .. }) => {
                self.phase = phase;
                self.server = server;
                let mut join: Join = self.join.clone().expect("only members reconnect");
                join.resume = self.resume;
                self.out.push_back(Output::Rejoin(join));
            }
            (Input::RejoinSent, Phase::Dialing { retry }) => {
                self.rejoining = true;
                self.answer = None;
                self.attempt = retry.attempt;
                // Written: this member's sign of life on its new connection.
                self.last_sent = now;
                self.phase = Phase::Serving {
                    next: self.every.map(|e| now + e),
                    seq: 0,
                };
            }
            (Input::DialFailed { why }, Phase::Dialing { retry }) => {
                self.dial_failed(now, retry, why);
            }
            // Anything else is out of turn (a message from a connection already given up):
            // ignored.
            (_, phase) => self.phase = phase,
        }
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Serving { next, .. } => *next,
            Phase::Waiting { at, .. } => Some(*at),
            Phase::Dialing { .. } | Phase::Ended => None,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match &mut self.phase {
            Phase::Serving {
                next: Some(due),
                seq,
            } if *due <= now => {
                let every = self.every.expect("heartbeats only at a rate");
                *due = if now > *due + LATE {
                    now + every
                } else {
                    *due + every
                };
                if !self.silent {
                    *seq += 1;
                    let seq = *seq;
                    self.out
                        .push_back(Output::Send(ClientMsg::Heartbeat { seq }));
                }
            }
            Phase::Waiting { at, retry } if *at <= now => {
                let mut retry = retry.clone();
                retry.attempt += 1;
                let left = retry.until.saturating_duration_since(now);
                self.out.push_back(Output::Dial {
                    attempt: retry.attempt,
                    why: retry.why.clone(),
                    redirect: self.redirect.take(),
                    redirect_deadline: left.min(PER_SERVER),
                    start: self.server,
                    deadline: left.min(ATTEMPT),
                });
                self.phase = Phase::Dialing { retry };
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
