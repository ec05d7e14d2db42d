//! [`Watch`]: what a member's process group asks the Lighthouse while a collective may be in
//! flight: has anyone of the quorum it was configured for stopped heartbeating? torchft's
//! survivors otherwise learn of a frozen replica only at their collective's timeout.

use std::time::{Duration, Instant};

use super::job::Job;
use super::rule;

/// The answer for one watcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watch {
    /// The watcher's quorum is the job's last one and everyone in it is heartbeating.
    Healthy,
    /// Members of the watcher's quorum whose heartbeats stopped (or were forgotten), with
    /// the age of each one's last heartbeat (`None`: none held).
    Lost {
        /// The quorum's id.
        quorum_id: i64,
        /// `(replica id, age of its last heartbeat)`.
        lost: Vec<(String, Option<Duration>)>,
    },
    /// The job's last quorum is not the watcher's (a later one formed, or it is in none):
    /// the watcher's group is about to be reconfigured; nothing to watch.
    Stale,
}

/// Whether `replica` (a replica id, or the part before torchft's `:uuid`) names `id`.
fn names(replica: &str, id: &str) -> bool {
    id == replica || id.strip_prefix(replica).is_some_and(|r| r.starts_with(':'))
}

pub(crate) fn watch(
    job: &Job,
    now: Instant,
    timeout: Duration,
    replica: &str,
    quorum_id: Option<i64>,
) -> Watch {
    let Some(q) = job.prev.as_ref() else {
        return Watch::Stale;
    };
    if quorum_id.is_some_and(|id| id != q.quorum_id)
        || !q.participants.iter().any(|m| names(replica, &m.replica_id))
    {
        return Watch::Stale;
    }
    let lost: Vec<(String, Option<Duration>)> = q
        .participants
        .iter()
        .filter(|m| !names(replica, &m.replica_id))
        .filter_map(|m| match job.heartbeats.get(&m.replica_id) {
            Some(&t) if rule::healthy(now, t, timeout) => None,
            Some(&t) => Some((m.replica_id.clone(), Some(now.saturating_duration_since(t)))),
            None => Some((m.replica_id.clone(), None)),
        })
        .collect();
    if lost.is_empty() {
        Watch::Healthy
    } else {
        Watch::Lost {
            quorum_id: q.quorum_id,
            lost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::names;

    #[test]
    fn a_replica_names_its_ids_with_or_without_torchfts_uuid() {
        assert!(names("train_0", "train_0"));
        assert!(names("train_0", "train_0:6ab5"));
        assert!(!names("train_0", "train_01:6ab5"));
        assert!(!names("train_1", "train_0:6ab5"));
    }
}
