//! `GET /metrics` on the torchft port, in Prometheus's text format: per job, the last quorum's
//! id and size, the replicas heartbeating (healthy or not), the joiners and the waiting calls;
//! for the door, the quorums issued and who left them, by reason.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use dt_rdzv_proto::torchft::{JobStatus, LeaveReason};

use super::LighthouseDoor;
use crate::server::http::metrics::metric;

/// What the door counted since it started (kept in its routes).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counters {
    /// New quorums issued (not those reissued unchanged for the next step).
    pub(crate) quorums: u64,
    /// Members that left a quorum because their heartbeats stopped.
    pub(crate) left_heartbeat_timeout: u64,
    /// Members that left a quorum still heartbeating, not having asked to join.
    pub(crate) left_not_rejoined: u64,
}

impl Counters {
    pub(crate) fn left(&mut self, reason: &LeaveReason) {
        match reason {
            LeaveReason::HeartbeatTimeout { .. } => self.left_heartbeat_timeout += 1,
            LeaveReason::NotRejoined => self.left_not_rejoined += 1,
        }
    }
}

/// A label value as Prometheus reads it (`\`, `"` and newlines escaped).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn per_job(jobs: &[JobStatus], f: impl Fn(&JobStatus) -> u64) -> Vec<(String, u64)> {
    jobs.iter()
        .map(|j| (format!("{{job=\"{}\"}}", label(&j.job)), f(j)))
        .collect()
}

/// The page.
pub(crate) fn render(jobs: &[JobStatus], c: Counters) -> String {
    let mut o = String::new();
    metric(
        &mut o,
        "dtrdzv_torchft_jobs",
        "gauge",
        "torchft jobs the Lighthouse holds.",
        &[(String::new(), jobs.len() as u64)],
    );
    metric(
        &mut o,
        "dtrdzv_torchft_quorum_id",
        "gauge",
        "Each job's last quorum id.",
        &per_job(jobs, |j| j.quorum_id.max(0) as u64),
    );
    metric(
        &mut o,
        "dtrdzv_torchft_quorum_participants",
        "gauge",
        "Replicas in each job's last quorum.",
        &per_job(jobs, |j| {
            j.quorum.as_ref().map_or(0, |q| q.participants.len() as u64)
        }),
    );
    metric(
        &mut o,
        "dtrdzv_torchft_replicas_healthy",
        "gauge",
        "Replicas of each job whose last heartbeat is within the heartbeat timeout.",
        &per_job(jobs, |j| {
            j.heartbeats.iter().filter(|h| h.healthy).count() as u64
        }),
    );
    metric(
        &mut o,
        "dtrdzv_torchft_replicas_silent",
        "gauge",
        "Replicas of each job whose heartbeats stopped (not yet forgotten).",
        &per_job(jobs, |j| {
            j.heartbeats.iter().filter(|h| !h.healthy).count() as u64
        }),
    );
    metric(
        &mut o,
        "dtrdzv_torchft_joiners",
        "gauge",
        "Replicas of each job that asked to join the next quorum.",
        &per_job(jobs, |j| j.joiners.len() as u64),
    );
    metric(
        &mut o,
        "dtrdzv_torchft_waiting_calls",
        "gauge",
        "Quorum calls of each job waiting for a quorum.",
        &per_job(jobs, |j| j.waiting as u64),
    );
    metric(
        &mut o,
        "dtrdzv_torchft_quorums_total",
        "counter",
        "New quorums issued (not those reissued unchanged for the next step).",
        &[(String::new(), c.quorums)],
    );
    metric(
        &mut o,
        "dtrdzv_torchft_departures_total",
        "counter",
        "Replicas that left a quorum, by reason.",
        &[
            (
                "{reason=\"heartbeat_timeout\"}".into(),
                c.left_heartbeat_timeout,
            ),
            ("{reason=\"not_rejoined\"}".into(), c.left_not_rejoined),
        ],
    );
    o
}

/// `GET /metrics`.
pub(crate) async fn metrics(State(door): State<Arc<LighthouseDoor>>) -> impl IntoResponse {
    let (jobs, counters) = door
        .driver
        .read(|g| (g.core.status(Instant::now()), g.routes.counters));
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        render(&jobs, counters),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_labels_are_escaped() {
        let jobs = vec![JobStatus {
            job: "a\"b\nc".into(),
            quorum_id: 7,
            quorum: None,
            joiners: vec![],
            heartbeats: vec![],
            waiting: 2,
            departures: vec![],
            reason: String::new(),
        }];
        let page = render(
            &jobs,
            Counters {
                quorums: 3,
                left_heartbeat_timeout: 1,
                left_not_rejoined: 0,
            },
        );
        assert!(
            page.contains("dtrdzv_torchft_quorum_id{job=\"a\\\"b\\nc\"} 7"),
            "{page}"
        );
        assert!(page.contains("dtrdzv_torchft_waiting_calls{job=\"a\\\"b\\nc\"} 2"));
        assert!(page.contains("dtrdzv_torchft_quorums_total 3"));
        assert!(page.contains("dtrdzv_torchft_departures_total{reason=\"heartbeat_timeout\"} 1"));
        assert_eq!(page.lines().filter(|l| l.starts_with("# TYPE")).count(), 9);
    }
}
