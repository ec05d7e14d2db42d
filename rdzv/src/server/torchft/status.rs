//! The status pages: `GET /status` (HTML) and `GET /status.json`: each job's last quorum,
//! joiners, heartbeats (age, healthy), the calls waiting, who left and why, and what the rule
//! says now.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::response::Html;
use dt_rdzv_proto::torchft::{JobStatus, LeaveReason};
use serde_json::{Value, json};

use super::LighthouseDoor;
use super::wire::unix_time;

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

fn unix_ms(t: Instant) -> u64 {
    unix_time(t)
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, ms)
}

impl LighthouseDoor {
    fn snapshot(&self) -> (Vec<JobStatus>, u64, u64) {
        self.driver.read(|g| {
            let c = g.core.config();
            (
                g.core.status(Instant::now()),
                ms(c.heartbeat_timeout),
                c.min_replicas,
            )
        })
    }
}

fn job_json(j: &JobStatus) -> Value {
    let now = Instant::now();
    json!({
        "job": j.job,
        "quorum_id": j.quorum_id,
        "quorum": j.quorum.as_ref().map(|q| json!({
            "quorum_id": q.quorum_id,
            "created_unix_ms": unix_ms(q.created),
            "age_ms": ms(now.saturating_duration_since(q.created)),
            "participants": q.participants.iter().map(|m| json!({
                "replica_id": m.replica_id,
                "address": m.address,
                "store_address": m.store_address,
                "step": m.step,
                "world_size": m.world_size,
                "shrink_only": m.shrink_only,
                "commit_failures": m.commit_failures,
            })).collect::<Vec<_>>(),
        })),
        "joiners": j.joiners.iter().map(|(m, since)| json!({
            "replica_id": m.replica_id,
            "step": m.step,
            "shrink_only": m.shrink_only,
            "joined_ms_ago": ms(*since),
        })).collect::<Vec<_>>(),
        "heartbeats": j.heartbeats.iter().map(|h| json!({
            "replica_id": h.replica_id,
            "age_ms": ms(h.age),
            "healthy": h.healthy,
        })).collect::<Vec<_>>(),
        "waiting_calls": j.waiting,
        "departures": j.departures.iter().map(|d| json!({
            "replica_id": d.replica_id,
            "last_quorum_id": d.last_quorum_id,
            "quorum_id": d.quorum_id,
            "reason": match d.reason {
                LeaveReason::HeartbeatTimeout { .. } => "heartbeat_timeout",
                LeaveReason::NotRejoined => "not_rejoined",
            },
            "detail": d.reason.to_string(),
            "unix_ms": unix_ms(d.at),
        })).collect::<Vec<_>>(),
        "status": j.reason,
    })
}

/// `GET /status.json`.
pub(crate) async fn json(State(door): State<Arc<LighthouseDoor>>) -> Json<Value> {
    let (jobs, hb, min) = door.snapshot();
    Json(json!({
        "heartbeat_timeout_ms": hb,
        "min_replicas": min,
        "jobs": jobs.iter().map(job_json).collect::<Vec<_>>(),
    }))
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// `GET /status` (and `/`).
pub(crate) async fn html(State(door): State<Arc<LighthouseDoor>>) -> Html<String> {
    let (jobs, hb, min) = door.snapshot();
    let mut p = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>dt-rdzv torchft Lighthouse</title></head><body>\n",
    );
    let _ = writeln!(
        p,
        "<h1>torchft Lighthouse (dt-rdzv)</h1><p>heartbeat timeout {hb} ms, min replicas {min}, {} job(s). <a href=\"/status.json\">JSON</a></p>",
        jobs.len()
    );
    for j in &jobs {
        let name = if j.job.is_empty() {
            "(default job)".to_string()
        } else {
            esc(&j.job)
        };
        let _ = writeln!(
            p,
            "<h2>{name}</h2><p>quorum_id {}; {}</p>",
            j.quorum_id,
            esc(&j.reason)
        );
        if let Some(q) = &j.quorum {
            let max_step = q.participants.iter().map(|m| m.step).max().unwrap_or(-1);
            let _ = writeln!(
                p,
                "<h3>Quorum {} ({} participants, max step {max_step})</h3><table border=\"1\"><tr><th>replica_id</th><th>address</th><th>store</th><th>step</th><th>world size</th><th>shrink only</th><th>commit failures</th></tr>",
                q.quorum_id,
                q.participants.len()
            );
            for m in q.participants.iter() {
                let _ = writeln!(
                    p,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&m.replica_id),
                    esc(&m.address),
                    esc(&m.store_address),
                    m.step,
                    m.world_size,
                    m.shrink_only,
                    m.commit_failures
                );
            }
            p.push_str("</table>\n");
        }
        let _ = writeln!(
            p,
            "<h3>Joiners ({}), waiting calls {}</h3><ul>",
            j.joiners.len(),
            j.waiting
        );
        for (m, since) in &j.joiners {
            let _ = writeln!(
                p,
                "<li>{} step {} (joined {} ms ago)</li>",
                esc(&m.replica_id),
                m.step,
                ms(*since)
            );
        }
        let _ = writeln!(p, "</ul><h3>Heartbeats ({})</h3><ul>", j.heartbeats.len());
        for h in &j.heartbeats {
            let state = if h.healthy { "healthy" } else { "<b>late</b>" };
            let _ = writeln!(
                p,
                "<li>{}: {} ms ago, {state}</li>",
                esc(&h.replica_id),
                ms(h.age)
            );
        }
        let _ = writeln!(p, "</ul><h3>Left ({})</h3><ul>", j.departures.len());
        for d in &j.departures {
            let _ = writeln!(
                p,
                "<li>{} left after quorum {} (absent from {}): {}</li>",
                esc(&d.replica_id),
                d.last_quorum_id,
                d.quorum_id,
                esc(&d.reason.to_string())
            );
        }
        p.push_str("</ul>\n");
    }
    p.push_str("</body></html>\n");
    Html(p)
}
