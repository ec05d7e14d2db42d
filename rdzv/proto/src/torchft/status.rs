//! [`JobStatus`]: one job as the status page shows it (a copy, taken under the lock).

use std::time::{Duration, Instant};

use super::config::LighthouseConfig;
use super::departure::Departure;
use super::job::Job;
use super::member::Member;
use super::rule::{self, Quorum};

/// One replica's heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatStatus {
    /// Its id.
    pub replica_id: String,
    /// Age of its last heartbeat.
    pub age: Duration,
    /// Younger than the heartbeat timeout.
    pub healthy: bool,
}

/// One job, for the status page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStatus {
    /// The job key (`""`: the default job).
    pub job: String,
    /// Its last quorum id.
    pub quorum_id: i64,
    /// Its last quorum.
    pub quorum: Option<Quorum>,
    /// Who asked to join the next one, sorted by id, with how long ago.
    pub joiners: Vec<(Member, Duration)>,
    /// Heartbeats, sorted by id.
    pub heartbeats: Vec<HeartbeatStatus>,
    /// Quorum calls waiting.
    pub waiting: usize,
    /// Who left, oldest first.
    pub departures: Vec<Departure>,
    /// What the rule says now.
    pub reason: String,
}

impl JobStatus {
    pub(crate) fn of(job: &str, j: &Job, now: Instant, config: &LighthouseConfig) -> Self {
        let mut joiners: Vec<(Member, Duration)> = j
            .joiners
            .values()
            .map(|x| (x.member.clone(), now.saturating_duration_since(x.at)))
            .collect();
        joiners.sort_by(|a, b| a.0.replica_id.cmp(&b.0.replica_id));
        let mut heartbeats: Vec<HeartbeatStatus> = j
            .heartbeats
            .iter()
            .map(|(id, &t)| HeartbeatStatus {
                replica_id: id.clone(),
                age: now.saturating_duration_since(t),
                healthy: rule::healthy(now, t, config.heartbeat_timeout),
            })
            .collect();
        heartbeats.sort_by(|a, b| a.replica_id.cmp(&b.replica_id));
        let reason = rule::compute(now, config, &j.heartbeats, &j.joiners, j.prev.as_ref()).reason;
        Self {
            job: job.to_owned(),
            quorum_id: j.quorum_id,
            quorum: j.prev.clone(),
            joiners,
            heartbeats,
            waiting: j.waiting.len(),
            departures: j.departures.iter().cloned().collect(),
            reason,
        }
    }
}
