//! The quorum rule, as torchft's Lighthouse runs it on every tick and every quorum request
//! (a pure function of the time, the heartbeats, the joiners and the previous quorum):
//!
//! 1. *healthy*: a heartbeat younger than the heartbeat timeout (a quorum request counts as
//!    one); *candidates*: the healthy joiners, sorted by `replica_id`;
//! 2. if any healthy joiner asks `shrink_only` (and there was a previous quorum), the
//!    candidates are cut to the previous quorum's members;
//! 3. *fast quorum*: every member of the previous quorum is a healthy joiner: issue now;
//! 4. else the healthy joiners must number at least `min_replicas` and more than half of the
//!    healthy replicas (the split-brain guard), and the quorum waits for the healthy replicas
//!    that have not joined until they all have or the join timeout has passed since the first
//!    (still healthy) join;
//! 5. [`next_quorum_id`]: the id goes up when the list of ids changed or any member reports
//!    `commit_failures > 0`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::LighthouseConfig;
use super::member::Member;

/// A replica group waiting to join, and when it (last) asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// What it asked with.
    pub member: Member,
    /// When.
    pub at: Instant,
}

/// An issued quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quorum {
    /// Its id (torchft's Manager keys its store prefix and its process groups by it).
    pub quorum_id: i64,
    /// Its members, sorted by `replica_id`.
    pub participants: Arc<[Member]>,
    /// When it was issued.
    pub created: Instant,
}

impl Quorum {
    /// Whether `replica_id` is a member.
    pub fn contains(&self, replica_id: &str) -> bool {
        self.participants.iter().any(|m| m.replica_id == replica_id)
    }
}

/// What the rule found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The quorum's members, or `None` while it is not ready.
    pub participants: Option<Vec<Member>>,
    /// Why (torchft's wording, for logs and the status page).
    pub reason: String,
}

/// Whether a heartbeat at `last` is still healthy at `now`.
pub fn healthy(now: Instant, last: Instant, timeout: Duration) -> bool {
    now.saturating_duration_since(last) < timeout
}

/// Runs the rule (see the module docs).
pub fn compute(
    now: Instant,
    config: &LighthouseConfig,
    heartbeats: &HashMap<String, Instant>,
    joiners: &HashMap<String, Joined>,
    prev: Option<&Quorum>,
) -> Verdict {
    let timeout = config.heartbeat_timeout;
    let heartbeating = heartbeats
        .values()
        .filter(|&&t| healthy(now, t, timeout))
        .count();
    let is_healthy = |id: &str| {
        heartbeats
            .get(id)
            .is_some_and(|&t| healthy(now, t, timeout))
    };
    let healthy_joiners: Vec<&Joined> = joiners
        .iter()
        .filter(|(id, _)| is_healthy(id))
        .map(|(_, j)| j)
        .collect();
    let n = healthy_joiners.len();
    let shrink_only = healthy_joiners.iter().any(|j| j.member.shrink_only);
    let mut candidates: Vec<Member> = healthy_joiners.iter().map(|j| j.member.clone()).collect();
    candidates.sort_by(|a, b| a.replica_id.cmp(&b.replica_id));
    let meta = format!(
        "[{n}/{} participants healthy][{heartbeating} heartbeating][shrink_only={shrink_only}]",
        joiners.len()
    );
    let wait = |reason: String| Verdict {
        participants: None,
        reason,
    };

    if let Some(prev) = prev {
        if shrink_only {
            candidates.retain(|c| prev.contains(&c.replica_id));
        }
        let joined_and_healthy = |id: &str| joiners.contains_key(id) && is_healthy(id);
        if prev
            .participants
            .iter()
            .all(|m| joined_and_healthy(&m.replica_id))
        {
            return Verdict {
                participants: Some(candidates),
                reason: format!("Fast quorum found! {meta}"),
            };
        }
    }

    if (n as u64) < config.min_replicas {
        return wait(format!(
            "New quorum not ready, only have {n} participants, need min_replicas {} {meta}",
            config.min_replicas
        ));
    }
    if n <= heartbeating / 2 {
        return wait(format!(
            "New quorum not ready, only have {n} participants, need at least half of {heartbeating} healthy workers {meta}"
        ));
    }
    let first_join = healthy_joiners.iter().map(|j| j.at).min().unwrap_or(now);
    if n != heartbeating && now.saturating_duration_since(first_join) < config.join_timeout {
        return wait(format!(
            "Valid quorum with {n} participants, waiting for {} healthy but not participating stragglers due to join timeout {meta}",
            heartbeating.saturating_sub(n)
        ));
    }
    Verdict {
        participants: Some(candidates),
        reason: format!("Valid quorum found {meta}"),
    }
}

/// Whether two member lists differ in their ids (in order; addresses, steps and the rest
/// may change without a new quorum id).
pub fn changed(a: &[Member], b: &[Member]) -> bool {
    a.len() != b.len() || a.iter().zip(b).any(|(x, y)| x.replica_id != y.replica_id)
}

/// The id of a quorum of `participants` issued after `prev`, whose job's id is `current`:
/// one more when the id list changed (or there was no previous quorum) or any member reports
/// commit failures, else the same.
pub fn next_quorum_id(current: i64, prev: Option<&Quorum>, participants: &[Member]) -> i64 {
    let bump = match prev {
        None => true,
        Some(p) => changed(participants, &p.participants),
    } || participants.iter().any(|m| m.commit_failures > 0);
    if bump {
        current.saturating_add(1)
    } else {
        current
    }
}
