//! A job's timeline end to end (`/v1/jobs/{job}/timeline`): members whose heartbeats carry
//! summaries of their calls, the server's samples of their progress with the journal's joins
//! and rounds, and its refusals (no token, another job's token, an unknown job).

mod common;
use common::{http_get, members_with_progress, rt};

use std::time::{Duration, Instant};

use dt_rdzv::server::{BackgroundServer, ServeConfig};
use dt_rdzv_proto::native::progress::{GroupProgress, Progress};
use serde_json::Value;

const TOKEN: &str = "test-token";
const WAIT: Duration = Duration::from_secs(60);

/// Rank r has completed seq 20 + r, but rank 1 only seq 11 (furthest behind).
fn summary(rank: u32, round: u64) -> Option<Progress> {
    Some(Progress {
        rank,
        round,
        pending: Vec::new(),
        groups: vec![GroupProgress {
            group: 0,
            group_size: 3,
            completed_seq: if rank == 1 { 11 } else { 20 + u64::from(rank) },
            completed_op: "all_reduce".into(),
            completed_age_ms: 0,
        }],
        idle_ms: Some(0),
        calls: 10,
    })
}

#[test]
fn the_timeline_follows_each_rank_and_is_refused_without_the_jobs_token() {
    let s = BackgroundServer::start(ServeConfig {
        token: Some(TOKEN.into()),
        ..ServeConfig::loopback_ephemeral()
    })
    .expect("server starts");
    let h = s.http_endpoint().unwrap();
    rt().block_on(async {
        let _members = members_with_progress(&s, TOKEN, "pic", 3, summary).await;
        // A job token covers its own job's timeline.
        let mine = dt_rdzv_proto::rendezvous::job_token(TOKEN, "pic");
        let deadline = Instant::now() + WAIT;
        let v = loop {
            let (code, body) = http_get(&h, "/v1/jobs/pic/timeline", Some(&mine));
            assert_eq!(code, 200, "{body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            let last = |r: usize| {
                v["ranks"][r]["seq"]
                    .as_array()
                    .and_then(|s| s.last().cloned())
            };
            if (0..3).all(|r| last(r).is_some_and(|s| !s.is_null())) {
                break v;
            }
            assert!(
                Instant::now() < deadline,
                "no summary sampled within {WAIT:?}: {v}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(v["followed"], true, "{v}");
        assert_eq!(v["mode"], "ranks", "{v}");
        let n = v["times_ms"].as_array().unwrap().len();
        let last = |r: usize| v["ranks"][r]["seq"][n - 1].clone();
        assert_eq!(
            (last(0), last(1), last(2)),
            (20.into(), 11.into(), 22.into())
        );
        assert_eq!(v["summary"]["min"][n - 1], 11);
        assert_eq!(v["summary"]["median"][n - 1], 20);
        assert_eq!(v["rounds"][n - 1], 1);
        let kinds: Vec<&str> = v["marks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds.iter().filter(|k| **k == "joined").count(),
            3,
            "{kinds:?}"
        );
        assert!(kinds.contains(&"round"), "{kinds:?}");
        assert!(
            v["marks"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["job"] == "pic")
        );
        // What a page that holds these samples asks next: the samples after the last one,
        // and no mark it already has.
        let newest = v["times_ms"][n - 1].as_u64().unwrap();
        let deadline = Instant::now() + WAIT;
        let later = loop {
            let path = format!("/v1/jobs/pic/timeline?since={newest}");
            let (code, body) = http_get(&h, &path, Some(&mine));
            assert_eq!(code, 200, "{body}");
            let later: Value = serde_json::from_str(&body).unwrap();
            if !later["times_ms"].as_array().unwrap().is_empty() {
                break later;
            }
            assert!(
                Instant::now() < deadline,
                "no sample after {newest}: {later}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(later["since_ms"], newest);
        let times = later["times_ms"].as_array().unwrap();
        assert!(
            times.iter().all(|t| t.as_u64().unwrap() > newest),
            "{later}"
        );
        for r in 0..3 {
            assert_eq!(
                later["ranks"][r]["seq"].as_array().unwrap().len(),
                times.len()
            );
        }
        assert!(
            later["marks"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["time_ms"].as_u64().unwrap() > newest),
            "{later}"
        );
        let (code, body) = http_get(&h, "/v1/jobs/pic/timeline?since=soon", Some(&mine));
        assert_eq!(code, 400, "a since that is not a number: {body}");
    });
    // Refusals: no token, another job's token, a job that does not exist.
    assert_eq!(http_get(&h, "/v1/jobs/pic/timeline", None).0, 401);
    let other = dt_rdzv_proto::rendezvous::job_token(TOKEN, "other");
    assert_eq!(http_get(&h, "/v1/jobs/pic/timeline", Some(&other)).0, 401);
    let (code, body) = http_get(&h, "/v1/jobs/nope/timeline", Some(TOKEN));
    assert_eq!(code, 404);
    assert!(body.contains("nope"), "{body}");
}
