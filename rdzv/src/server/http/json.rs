//! A job's status as JSON (`/v1/jobs`, `dt-rdzv status --json`).

use dt_rdzv_proto::native::{JobStatus, LateJoin, Role};
use serde_json::{Value, json};

use crate::server::native::rendezvous::JobView;

/// One job as a JSON object.
pub fn job_json(j: &JobStatus) -> Value {
    let s = &j.spec;
    json!({
        "job": j.job,
        "state": j.state,
        "round": j.round,
        "world": j.world,
        "restarts": j.restarts,
        "age_seconds": j.age_ms as f64 / 1000.0,
        "missing": j.missing,
        "config_keys": j.config_keys,
        "spec": {
            "min_members": s.min_members,
            "max_members": s.max_members,
            "max_spares": s.max_spares,
            "last_call_seconds": s.last_call_ms as f64 / 1000.0,
            "join_timeout_seconds": s.join_timeout_ms as f64 / 1000.0,
            "max_rounds": s.max_rounds,
            "max_restarts": s.max_restarts,
            "late_join": match s.late_join { LateJoin::Immediate => "immediate", LateJoin::OnRequest => "on_request" },
            "ephemeral": s.ephemeral,
            "ttl_seconds": s.ttl_ms.map(|t| t as f64 / 1000.0),
        },
        "members": j.members.iter().map(|m| json!({
            "member": m.member,
            "node": m.node,
            "state": m.state,
            "rank": m.rank,
            "role": match m.role { Role::Main => "main", Role::Worker => "worker" },
            "last_heartbeat_seconds_ago": m.last_seen_ms as f64 / 1000.0,
            "addrs": m.addrs,
            "observed_ip": m.observed_ip,
            "progress": m.progress.as_ref().map(super::hang_json::progress_json),
            "progress_seconds_ago": m.progress.as_ref().map(|_| m.progress_age_ms as f64 / 1000.0),
        })).collect::<Vec<_>>(),
    })
}

/// One job as the status page's JSON: [`job_json`] and, for each missing member, when it was
/// lost or left (Unix ms, `missing_since_ms`) and how (`missing_why`), `null` where the journal
/// no longer knows.
pub(crate) fn job_view_json(view: &JobView) -> Value {
    let mut v = job_json(&view.status);
    let since: serde_json::Map<String, Value> = view
        .gone
        .iter()
        .map(|(m, g)| (m.clone(), g.as_ref().map(|g| g.0).into()))
        .collect();
    let why: serde_json::Map<String, Value> = view
        .gone
        .iter()
        .map(|(m, g)| (m.clone(), g.as_ref().map(|g| g.1.clone()).into()))
        .collect();
    v["missing_since_ms"] = since.into();
    v["missing_why"] = why.into();
    v
}
