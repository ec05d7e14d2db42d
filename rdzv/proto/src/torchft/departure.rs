//! [`Departure`]: who left a job's quorum and why, kept (a bounded number) for the status
//! page. torchft's Lighthouse only shows the current quorum and the heartbeats it ever saw.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Why a member of the previous quorum is not in the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaveReason {
    /// Its heartbeats stopped: the last one was this old when the new quorum was issued.
    HeartbeatTimeout {
        /// Age of its last heartbeat.
        silent_for: Duration,
    },
    /// It still heartbeats but did not ask to join before the quorum was issued without it
    /// (the join timeout passed, or the quorum formed without waiting for it).
    NotRejoined,
}

impl std::fmt::Display for LeaveReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::HeartbeatTimeout { silent_for } => write!(
                f,
                "heartbeat timeout (silent for {} ms)",
                silent_for.as_millis()
            ),
            Self::NotRejoined => f.write_str("alive but did not rejoin in time"),
        }
    }
}

/// One member gone from a job's quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departure {
    /// Its replica id.
    pub replica_id: String,
    /// The id of the last quorum it was in.
    pub last_quorum_id: i64,
    /// The id of the first quorum without it.
    pub quorum_id: i64,
    /// Why.
    pub reason: LeaveReason,
    /// When the quorum without it was issued.
    pub at: Instant,
}

/// The last few departures of one job, oldest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Departures {
    log: VecDeque<Departure>,
}

impl Departures {
    /// Records `d`, forgetting the oldest past `max`.
    pub(crate) fn push(&mut self, d: Departure, max: usize) {
        if max == 0 {
            return;
        }
        while self.log.len() >= max {
            self.log.pop_front();
        }
        self.log.push_back(d);
    }

    /// Oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Departure> {
        self.log.iter()
    }
}
