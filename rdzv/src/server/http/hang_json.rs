//! A member's summary of its calls, and a hang report, as JSON (`/v1/jobs/{job}/hang`,
//! `dt-rdzv status --hang --json`, and each member's `progress` in `/v1/jobs`).

use dt_rdzv_proto::native::hang::{HangReport, RankView};
use dt_rdzv_proto::native::progress::{GroupProgress, PendingCall, Progress};
use serde_json::{Value, json};

fn pending_json(p: &PendingCall) -> Value {
    json!({
        "group": p.group,
        "group_size": p.group_size,
        "seq": p.seq,
        "op": p.op,
        "state": p.state.name(),
        "age_seconds": p.age_ms as f64 / 1000.0,
        "peer": p.peer,
        "waiting_for": p.waiting_for,
    })
}

fn group_json(g: &GroupProgress) -> Value {
    json!({
        "group": g.group,
        "group_size": g.group_size,
        "completed_seq": g.completed_seq,
        "completed_op": g.completed_op,
        "completed_seconds_ago": g.completed_age_ms as f64 / 1000.0,
    })
}

/// A member's summary as it arrived (ages as of sending).
pub fn progress_json(p: &Progress) -> Value {
    json!({
        "rank": p.rank,
        "round": p.round,
        "pending": p.pending.iter().map(pending_json).collect::<Vec<_>>(),
        "groups": p.groups.iter().map(group_json).collect::<Vec<_>>(),
        "idle_seconds": p.idle_ms.map(|i| i as f64 / 1000.0),
        "calls": p.calls,
    })
}

fn rank_json(v: &RankView) -> Value {
    json!({
        "rank": v.rank,
        "member": v.member,
        "node": v.node,
        "last_heartbeat_seconds_ago": v.silent_ms as f64 / 1000.0,
        "heartbeating": v.heartbeating,
        "summary": v.summary,
        "pending": v.pending.iter().map(pending_json).collect::<Vec<_>>(),
        "groups": v.groups.iter().map(group_json).collect::<Vec<_>>(),
        "idle_seconds": v.idle_ms.map(|i| i as f64 / 1000.0),
    })
}

/// A hang report as a JSON object.
pub fn hang_json(r: &HangReport) -> Value {
    json!({
        "job": r.job,
        "state": r.state,
        "round": r.round,
        "world": r.world,
        "stuck": r.stuck,
        "waiting": r.waiting,
        "idle": r.idle,
        "findings": r.findings.iter().map(|f| json!({
            "kind": f.kind.name(),
            "group": f.group,
            "seq": f.seq,
            "op": f.op,
            "waiters": f.waiters,
            "culprits": f.culprits,
            "words": f.words,
        })).collect::<Vec<_>>(),
        "ranks": r.ranks.iter().map(rank_json).collect::<Vec<_>>(),
        "ranks_omitted": r.ranks_omitted,
        "text": r.to_string(),
    })
}
