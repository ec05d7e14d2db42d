//! "Why is my job stuck?" end to end: members whose heartbeats carry summaries of their calls
//! (as dtcomm's engine sends them), the server's `/v1/jobs/{job}/hang` naming the culprit, and
//! its refusals (no token, another job's token, an unknown job).

mod common;
use common::{http_get, members_reporting, rt};

use std::time::{Duration, Instant};

use dt_rdzv::server::{BackgroundServer, ServeConfig};
use dt_rdzv_proto::native::progress::{CallState, GroupProgress, PendingCall, Progress};

const TOKEN: &str = "test-token";
const WAIT: Duration = Duration::from_secs(60);

/// What a member of a 4-rank job says of its calls once it knows its place: rank 2 completed
/// all_reduce seq 9 and has called nothing since; the others wait in seq 10.
fn summary(rank: u32, round: u64, started: Instant) -> Option<Progress> {
    let age = started.elapsed().as_millis() as u64 + 2_000;
    let done = GroupProgress {
        group: 0,
        group_size: 4,
        completed_seq: 9,
        completed_op: "all_reduce".into(),
        completed_age_ms: age,
    };
    let pending = (rank != 2).then(|| PendingCall {
        group: 0,
        group_size: 4,
        seq: 10,
        op: "all_reduce".into(),
        state: CallState::Started,
        age_ms: age,
        peer: None,
        waiting_for: vec![(rank + 3) % 4],
    });
    Some(Progress {
        rank,
        round,
        idle_ms: (rank == 2).then_some(age),
        pending: pending.into_iter().collect(),
        groups: vec![done],
        calls: 10,
    })
}

#[test]
fn the_server_names_the_rank_the_others_wait_for() {
    names_the_rank_the_others_wait_for(None);
}

/// The same job with its four ranks on one node, joined through the node's agent: their
/// summaries still reach the server (the agent's heartbeats keep them alive).
#[test]
fn the_server_names_the_rank_the_others_wait_for_among_a_node_agents_ranks() {
    names_the_rank_the_others_wait_for(Some("node-a"));
}

fn names_the_rank_the_others_wait_for(agent_node: Option<&str>) {
    let s = BackgroundServer::start(ServeConfig {
        token: Some(TOKEN.into()),
        ..ServeConfig::loopback_ephemeral()
    })
    .expect("server starts");
    let h = s.http_endpoint().unwrap();
    rt().block_on(async {
        let started = Instant::now();
        let _members = members_reporting(&s, TOKEN, "stuck", 4, agent_node, move |rank, round| {
            summary(rank, round, started)
        })
        .await;
        // Summaries ride on the next heartbeats (every 0.5 s).
        let deadline = Instant::now() + WAIT;
        let report = loop {
            let (code, body) = http_get(&h, "/v1/jobs/stuck/hang", Some(TOKEN));
            assert_eq!(code, 200, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if v["findings"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f["kind"] == "waiting"))
            {
                break v;
            }
            assert!(Instant::now() < deadline, "no finding within {WAIT:?}: {v}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let f = &report["findings"][0];
        assert_eq!(f["culprits"], serde_json::json!([2]), "{report}");
        assert_eq!(f["waiters"], serde_json::json!([0, 1, 3]), "{report}");
        let words = f["words"].as_str().unwrap();
        assert!(
            words.starts_with("ranks 0, 1 and 3 wait in all_reduce seq 10 of group 0"),
            "{words}"
        );
        assert!(
            words.contains("for rank 2, which completed seq 9"),
            "{words}"
        );
        assert_eq!(report["stuck"], true);
        assert!(report["text"].as_str().unwrap().contains(words));
        // Each member's summary shows in the job's status too.
        let (_, body) = http_get(&h, "/v1/jobs/stuck", Some(TOKEN));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(
            v["members"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["progress"].is_object()),
            "{v}"
        );
    });
    // Refusals: no token, another job's token, a job that does not exist.
    assert_eq!(http_get(&h, "/v1/jobs/stuck/hang", None).0, 401);
    let other = dt_rdzv_proto::rendezvous::job_token(TOKEN, "other");
    assert_eq!(http_get(&h, "/v1/jobs/stuck/hang", Some(&other)).0, 401);
    let (code, body) = http_get(&h, "/v1/jobs/nope/hang", Some(TOKEN));
    assert_eq!(code, 404);
    assert!(body.contains("nope"), "{body}");
}
