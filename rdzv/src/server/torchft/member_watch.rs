//! `GET /v1/torchft/watch?replica=ID[&quorum_id=N][&job=KEY][&timeout_ms=T]`: a long poll for
//! a member's process group (`dtcomm.torchft.ProcessGroupDtcomm`). It answers as soon as a
//! member of the quorum `replica` was configured for stops heartbeating (a killed or frozen
//! replica), so that the survivors abort the collective they wait in and the step is not
//! committed, instead of waiting for torchft's collective timeout; else after `timeout_ms`
//! (at most 60 s) with nothing lost. `{"state": "lost" | "healthy" | "stale", "quorum_id",
//! "lost": [ids], "why"}`; "stale" (at once) when the job's last quorum is not the watcher's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use dt_rdzv_proto::torchft::{Watch, check_job_key, check_replica_id};
use serde::Deserialize;
use serde_json::{Value, json};

use super::LighthouseDoor;

/// Longest one watch parks.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// The query.
#[derive(Debug, Deserialize)]
pub(crate) struct WatchQuery {
    replica: String,
    quorum_id: Option<i64>,
    #[serde(default)]
    job: String,
    timeout_ms: Option<u64>,
}

pub(crate) async fn watch(
    State(door): State<Arc<LighthouseDoor>>,
    Query(q): Query<WatchQuery>,
) -> (StatusCode, Json<Value>) {
    let limits = door.driver.read(|g| g.core.config().limits);
    if let Err(e) = check_replica_id(&q.replica, &limits).and(check_job_key(&q.job, &limits)) {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": e.to_string()})),
        );
    }
    let wait = Duration::from_millis(q.timeout_ms.unwrap_or(20_000)).min(MAX_WAIT);
    let (tick, hb) = door.driver.read(|g| {
        let c = g.core.config();
        (c.quorum_tick, c.heartbeat_timeout)
    });
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let w = door.driver.read(|g| {
            g.core
                .watch(Instant::now(), &q.job, &q.replica, q.quorum_id)
        });
        match w {
            Watch::Lost { quorum_id, lost } => {
                let why = lost
                    .iter()
                    .map(|(id, age)| match age {
                        Some(a) => format!(
                            "{id}: no heartbeat for {:.1}s (timeout {:.1}s)",
                            a.as_secs_f64(),
                            hb.as_secs_f64()
                        ),
                        None => format!("{id}: no heartbeat held"),
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                tracing::info!(job = ?q.job, watcher = ?q.replica, quorum_id, %why,
                    "torchft watch: a member of the quorum is lost");
                let ids: Vec<&str> = lost.iter().map(|(id, _)| id.as_str()).collect();
                return (
                    StatusCode::OK,
                    Json(json!({"state": "lost", "quorum_id": quorum_id, "lost": ids,
                        "why": why})),
                );
            }
            Watch::Stale => {
                return (
                    StatusCode::OK,
                    Json(json!({"state": "stale", "lost": [], "why":
                        "the job's last quorum is not this replica's"})),
                );
            }
            Watch::Healthy => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return (
                StatusCode::OK,
                Json(json!({"state": "healthy", "lost": []})),
            );
        }
        tokio::time::sleep(tick.min(Duration::from_millis(100))).await;
    }
}
