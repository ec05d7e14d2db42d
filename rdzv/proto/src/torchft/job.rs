//! [`Job`]: one job's Lighthouse state (torchft's whole `State`): heartbeats, joiners, the
//! previous quorum and its id, the quorum calls waiting, who left.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use super::config::LighthouseConfig;
use super::departure::{Departure, Departures, LeaveReason};
use super::io::CallId;
use super::member::Member;
use super::rule::{self, Joined, Quorum};

/// One job's state.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// Who asked to join the next quorum (cleared when one is issued).
    pub(crate) joiners: HashMap<String, Joined>,
    /// Last heartbeat of each replica id (forgotten `forget_after` later).
    pub(crate) heartbeats: HashMap<String, Instant>,
    /// The last quorum issued.
    pub(crate) prev: Option<Quorum>,
    /// The last quorum id issued (or the floor it starts above).
    pub(crate) quorum_id: i64,
    /// Quorum calls waiting for a quorum that contains their requester.
    pub(crate) waiting: BTreeMap<CallId, Member>,
    /// Who left, last few.
    pub(crate) departures: Departures,
    /// Since when nothing heartbeats, joins or waits (`None`: active).
    pub(crate) idle_since: Option<Instant>,
}

/// A quorum [`Job::tick`] issued.
#[derive(Debug)]
pub(crate) struct Issue {
    /// The quorum.
    pub(crate) quorum: Quorum,
    /// The rule's reason.
    pub(crate) reason: String,
    /// The waiting calls it answers.
    pub(crate) answered: Vec<CallId>,
    /// Members of the previous quorum not in it.
    pub(crate) left: Vec<Departure>,
    /// Whether it is a new quorum (its id differs from the previous one's, or it is the
    /// job's first), not the previous one issued again for the next step.
    pub(crate) changed: bool,
}

impl Job {
    /// A new job whose first quorum id is above `floor`.
    pub(crate) fn new(floor: i64) -> Self {
        Self {
            joiners: HashMap::new(),
            heartbeats: HashMap::new(),
            prev: None,
            quorum_id: floor,
            waiting: BTreeMap::new(),
            departures: Departures::default(),
            idle_since: None,
        }
    }

    /// Nothing heartbeats, joins or waits.
    pub(crate) fn is_idle(&self) -> bool {
        self.joiners.is_empty() && self.heartbeats.is_empty() && self.waiting.is_empty()
    }

    /// Records a heartbeat.
    pub(crate) fn beat(&mut self, replica_id: &str, now: Instant) {
        match self.heartbeats.get_mut(replica_id) {
            Some(t) => *t = now,
            None => {
                self.heartbeats.insert(replica_id.to_owned(), now);
            }
        }
        self.idle_since = None;
    }

    /// Records a join (and its implicit heartbeat).
    pub(crate) fn join(&mut self, member: &Member, now: Instant) {
        self.beat(&member.replica_id, now);
        self.joiners.insert(
            member.replica_id.clone(),
            Joined {
                member: member.clone(),
                at: now,
            },
        );
    }

    /// Runs the rule once; issues the quorum it finds (see [`rule`]): the id, the departures,
    /// the joiners cleared, the waiting calls it contains answered and the others joined
    /// again (as torchft's waiting requests do when a quorum without them goes by).
    pub(crate) fn tick(&mut self, now: Instant, config: &LighthouseConfig) -> Option<Issue> {
        let verdict = rule::compute(
            now,
            config,
            &self.heartbeats,
            &self.joiners,
            self.prev.as_ref(),
        );
        let participants = verdict.participants?;
        let before = self.prev.as_ref().map(|p| p.quorum_id);
        self.quorum_id = rule::next_quorum_id(self.quorum_id, self.prev.as_ref(), &participants);
        let quorum = Quorum {
            quorum_id: self.quorum_id,
            participants: participants.into(),
            created: now,
        };
        let mut left = Vec::new();
        if let Some(prev) = &self.prev {
            for m in prev.participants.iter() {
                if quorum.contains(&m.replica_id) {
                    continue;
                }
                let reason = match self.heartbeats.get(&m.replica_id) {
                    Some(&t) if rule::healthy(now, t, config.heartbeat_timeout) => {
                        LeaveReason::NotRejoined
                    }
                    Some(&t) => LeaveReason::HeartbeatTimeout {
                        silent_for: now.saturating_duration_since(t),
                    },
                    None => LeaveReason::HeartbeatTimeout {
                        silent_for: config.forget_after(),
                    },
                };
                let d = Departure {
                    replica_id: m.replica_id.clone(),
                    last_quorum_id: prev.quorum_id,
                    quorum_id: quorum.quorum_id,
                    reason,
                    at: now,
                };
                self.departures
                    .push(d.clone(), config.limits.max_departures);
                left.push(d);
            }
        }
        self.prev = Some(quorum.clone());
        self.joiners.clear();
        let mut answered = Vec::new();
        for (&call, member) in &self.waiting {
            if quorum.contains(&member.replica_id) {
                answered.push(call);
            } else {
                self.joiners.insert(
                    member.replica_id.clone(),
                    Joined {
                        member: member.clone(),
                        at: now,
                    },
                );
            }
        }
        for call in &answered {
            self.waiting.remove(call);
        }
        Some(Issue {
            changed: before != Some(quorum.quorum_id),
            quorum,
            reason: verdict.reason,
            answered,
            left,
        })
    }

    /// Forgets heartbeats older than `forget_after` and the joins of those replicas (they
    /// cannot count any more: a quorum request would have beaten).
    pub(crate) fn prune(&mut self, now: Instant, config: &LighthouseConfig) {
        let forget = config.forget_after();
        let before = self.heartbeats.len();
        self.heartbeats
            .retain(|_, t| now.saturating_duration_since(*t) < forget);
        if self.heartbeats.len() != before {
            let hb = &self.heartbeats;
            self.joiners.retain(|id, _| hb.contains_key(id));
        }
        if self.is_idle() {
            self.idle_since.get_or_insert(now);
        }
    }
}
