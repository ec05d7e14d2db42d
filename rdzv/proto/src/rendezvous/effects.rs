//! What the machine asks of its driver, and what it reports for logs and metrics.

use std::collections::VecDeque;
use std::time::Duration;

use super::error::Refusal;
use super::probes::ReportVerdict;
use crate::native::{JobEnd, RoundCause, ServerMsg};

use super::ConnId;

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send a message on the connection.
    Send {
        /// The connection.
        conn: ConnId,
        /// The message.
        msg: ServerMsg,
    },
    /// Send what was queued, then close the connection. The machine has forgotten it.
    Close {
        /// The connection.
        conn: ConnId,
        /// Why, for the log.
        reason: String,
    },
    /// Something happened (for the log and metrics); nothing to do.
    Event(Event),
}

/// What happened, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A job was created by its first member.
    JobCreated {
        /// The job.
        job: String,
    },
    /// A member joined.
    Joined {
        /// The job.
        job: String,
        /// The member.
        member: String,
        /// Its node.
        node: String,
        /// Whether as a spare.
        spare: bool,
    },
    /// A round completed.
    RoundComplete {
        /// The job.
        job: String,
        /// Its number.
        round: u64,
        /// Members.
        world: u32,
        /// Why it started.
        cause: RoundCause,
        /// From the start of forming to completion.
        formed_in: Duration,
    },
    /// A round ended for everyone.
    RoundEnded {
        /// The job.
        job: String,
        /// Its number.
        round: u64,
        /// Why.
        cause: RoundCause,
    },
    /// A member was lost (silence or a closed connection).
    MemberLost {
        /// The job.
        job: String,
        /// The member.
        member: String,
        /// Its rank, if it was in the round.
        rank: Option<u32>,
        /// What the server saw.
        why: String,
    },
    /// A node agent was accepted: ranks of `node` may join through its connection.
    NodeAgent {
        /// The job.
        job: String,
        /// The node.
        node: String,
        /// Its hello stream.
        conn: ConnId,
    },
    /// A node agent was lost (silence or a closed connection), and every rank it spoke for
    /// with it (each also told as [`Event::MemberLost`]).
    NodeLost {
        /// The job.
        job: String,
        /// The node.
        node: String,
        /// How many ranks it spoke for.
        ranks: u32,
        /// What the server saw.
        why: String,
    },
    /// A member left on purpose.
    MemberLeft {
        /// The job.
        job: String,
        /// The member.
        member: String,
    },
    /// A job ended.
    JobEnded {
        /// The job.
        job: String,
        /// How.
        end: JobEnd,
    },
    /// An ended or empty job was forgotten.
    JobForgotten {
        /// The job.
        job: String,
    },
    /// A member reported a peer gone (see `probes`), or a probe it started ended.
    Reported {
        /// The job.
        job: String,
        /// The round.
        round: u64,
        /// The reporting member.
        by: String,
        /// The suspect's rank.
        rank: u32,
        /// The suspect's member id, when it is (still) known.
        member: Option<String>,
        /// What the reporter saw.
        evidence: String,
        /// What became of it.
        verdict: ReportVerdict,
    },
    /// A request was refused.
    Refused {
        /// The connection.
        conn: ConnId,
        /// Why.
        refusal: Refusal,
    },
}

/// Counters, for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RendezvousStats {
    /// Joins accepted.
    pub joins: u64,
    /// Requests refused.
    pub refusals: u64,
    /// Rounds completed.
    pub rounds: u64,
    /// Of those, rounds rebuilt after a server restart from their members' resumes.
    pub rounds_resumed: u64,
    /// Members lost.
    pub losses: u64,
    /// Members that left.
    pub leaves: u64,
    /// Jobs created.
    pub jobs_created: u64,
    /// Jobs ended, by [`JobEnd::label`].
    pub jobs_ended: Vec<(&'static str, u64)>,
    /// Messages received from members.
    pub messages: u64,
    /// Data-plane reports received (each counted once, whatever became of it).
    pub reports: u64,
    /// Probes whose suspect did not answer (declared lost).
    pub probes_confirmed: u64,
    /// Probes whose suspect answered (kept).
    pub probes_dismissed: u64,
    /// Node agents accepted.
    pub node_agents: u64,
    /// Node agents lost (with every rank they spoke for).
    pub nodes_lost: u64,
}

/// The machine's outbox, handed to jobs.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    pub(crate) actions: VecDeque<Action>,
    /// Connections the jobs let go of (closed or forgotten).
    pub(crate) detached: Vec<ConnId>,
    pub(crate) stats: RendezvousStats,
}

impl Effects {
    pub(crate) fn send(&mut self, conn: ConnId, msg: ServerMsg) {
        self.actions.push_back(Action::Send { conn, msg });
    }

    pub(crate) fn close(&mut self, conn: ConnId, reason: String) {
        self.actions.push_back(Action::Close { conn, reason });
        self.detached.push(conn);
    }

    pub(crate) fn event(&mut self, e: Event) {
        let s = &mut self.stats;
        match &e {
            Event::JobCreated { .. } => s.jobs_created += 1,
            Event::Joined { .. } => s.joins += 1,
            Event::RoundComplete { cause, .. } => {
                s.rounds += 1;
                if matches!(cause, RoundCause::Resumed { .. }) {
                    s.rounds_resumed += 1;
                }
            }
            Event::MemberLost { .. } => s.losses += 1,
            Event::MemberLeft { .. } => s.leaves += 1,
            Event::JobEnded { end, .. } => {
                let label = end.label();
                match s.jobs_ended.iter_mut().find(|(l, _)| *l == label) {
                    Some((_, n)) => *n += 1,
                    None => s.jobs_ended.push((label, 1)),
                }
            }
            Event::Refused { .. } => s.refusals += 1,
            Event::Reported { verdict, .. } => match verdict {
                ReportVerdict::Confirmed => s.probes_confirmed += 1,
                ReportVerdict::Dismissed => s.probes_dismissed += 1,
                _ => s.reports += 1,
            },
            Event::NodeAgent { .. } => s.node_agents += 1,
            Event::NodeLost { .. } => s.nodes_lost += 1,
            Event::RoundEnded { .. } | Event::JobForgotten { .. } => {}
        }
        self.actions.push_back(Action::Event(e));
    }
}
