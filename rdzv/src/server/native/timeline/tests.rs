use dt_rdzv_proto::native::progress::{CallState, GroupProgress, PendingCall, Progress};
use dt_rdzv_proto::native::{JobSpec, JobStatus, MemberStatus, Role};

use super::*;

/// A member of round `round` at `rank` that completed world seq `seq` (no summary: `None`),
/// waiting in the next one or not.
fn member(rank: u32, round: u64, seq: Option<u64>, waiting: bool) -> MemberStatus {
    MemberStatus {
        member: format!("m{rank}"),
        node: "n".into(),
        state: "active".into(),
        rank: Some(rank),
        role: Role::Worker,
        last_seen_ms: 0,
        addrs: Vec::new(),
        observed_ip: String::new(),
        progress: seq.map(|s| Progress {
            rank,
            round,
            pending: waiting
                .then(|| PendingCall {
                    group: 0,
                    group_size: 4,
                    seq: s + 1,
                    op: "all_reduce".into(),
                    state: CallState::Started,
                    age_ms: 5,
                    peer: None,
                    waiting_for: Vec::new(),
                })
                .into_iter()
                .collect(),
            groups: vec![GroupProgress {
                group: 0,
                group_size: 4,
                completed_seq: s,
                completed_op: "all_reduce".into(),
                completed_age_ms: 5,
            }],
            idle_ms: (!waiting).then_some(5),
            calls: s,
        }),
        progress_age_ms: 0,
    }
}

/// What the machine hands the sampler (`RendezvousMachine::progress`) for these statuses:
/// the active members' ranks and summaries, borrowed.
fn views(jobs: &[JobStatus]) -> Vec<JobProgress<'_>> {
    jobs.iter()
        .map(|j| JobProgress {
            job: &j.job,
            round: j.round,
            world: j.world,
            ranks: j
                .members
                .iter()
                .filter(|m| m.state == "active")
                .filter_map(|m| Some((m.rank?, m.progress.as_ref())))
                .collect(),
        })
        .collect()
}

fn job(name: &str, members: Vec<MemberStatus>) -> JobStatus {
    JobStatus {
        job: name.into(),
        state: "running".into(),
        round: 1,
        world: members.len() as u32,
        spec: JobSpec::default(),
        members,
        missing: Vec::new(),
        restarts: 0,
        age_ms: 0,
        config_keys: Vec::new(),
        workers: Vec::new(),
        workers_world: 0,
    }
}

/// Four ranks at seq `t`, rank 2 stuck at 3 from t = 3 on.
fn small(t: u64) -> JobStatus {
    job(
        "small",
        (0..4)
            .map(|r| {
                let stuck = r == 2 && t >= 3;
                member(r, 1, Some(if stuck { 3 } else { t }), !stuck)
            })
            .collect(),
    )
}

#[test]
fn a_small_job_has_a_line_per_rank_bounded_to_the_window() {
    let mut t = Timelines::default();
    for i in 0..(SAMPLES as u64 + 25) {
        t.sample(1_000 * i, &views(&[small(i)]));
    }
    let v = t.json("small", 0, Vec::new(), None);
    assert_eq!(v["followed"], true);
    assert_eq!(v["mode"], "ranks");
    let times = v["times_ms"].as_array().unwrap();
    assert_eq!(times.len(), SAMPLES, "samples per job are bounded");
    assert_eq!(times[0], 25_000, "the oldest went first");
    let ranks = v["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 4);
    for r in ranks {
        assert_eq!(r["seq"].as_array().unwrap().len(), SAMPLES);
    }
    let last = SAMPLES - 1;
    assert_eq!(ranks[2]["seq"][last], 3, "rank 2 stays at 3");
    assert_eq!(
        ranks[2]["idle_since_ms"], 25_000,
        "in no call all through the window"
    );
    assert_eq!(
        ranks[0]["idle_since_ms"],
        Value::Null,
        "waiting in the next call"
    );
    assert_eq!(ranks[0]["seq"][last], SAMPLES as u64 + 24);
    assert_eq!(v["summary"]["min"][last], 3);
    assert_eq!(v["summary"]["reporting"][last], 4);
}

#[test]
fn a_big_job_is_summarised_with_its_laggards() {
    let n = 1_500u32;
    // Everyone completed 100 and waits in 101, but rank 777 completed 100 and is in no call,
    // rank 5 completed only 90, rank 1200 sends no summary.
    let members = (0..n)
        .map(|r| match r {
            5 => member(r, 1, Some(90), true),
            777 => member(r, 1, Some(100), false),
            1200 => member(r, 1, None, false),
            _ => member(r, 1, Some(100), true),
        })
        .collect();
    let big = job("big", members);
    let mut t = Timelines::default();
    for i in 0..(SAMPLES as u64 * 2) {
        t.sample(i, &views(std::slice::from_ref(&big)));
    }
    let line = &t.jobs["big"];
    assert_eq!(line.samples.len(), SAMPLES);
    assert!(line.samples.iter().all(|s| s.ranks.is_none()));
    assert!(line.samples.iter().all(|s| s.laggards.len() == LAGGARDS));
    let v = t.json("big", 0, Vec::new(), None);
    assert_eq!(v["mode"], "summary");
    assert!(v.get("ranks").is_none(), "no line per rank at {n} ranks");
    let lags: Vec<u64> = v["laggards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["rank"].as_u64().unwrap())
        .collect();
    // Silent first, then the lowest seq, then the one in no call, then the lowest rank.
    assert_eq!(lags, vec![0, 5, 777, 1200]);
    assert_eq!(v["summary"]["min"][0], 90);
    assert_eq!(v["summary"]["median"][0], 100);
    assert_eq!(v["summary"]["reporting"][0], n - 1);
    // The answer stays small: a few hundred numbers per line, a handful of lines.
    let bytes = serde_json::to_vec(&v).unwrap().len();
    assert!(bytes < 200_000, "{bytes} bytes");
}

#[test]
fn laggard_lines_are_bounded_when_the_laggards_change() {
    let mut t = Timelines::default();
    // A job of 100 ranks where a different rank is furthest behind at every sample.
    for i in 0..50u32 {
        let members = (0..100)
            .map(|r| member(r, 1, Some(if r == i { 1 } else { 9 }), true))
            .collect();
        t.sample(u64::from(i), &views(&[job("shifting", members)]));
    }
    let v = t.json("shifting", 0, Vec::new(), None);
    let lines = v["laggards"].as_array().unwrap();
    assert_eq!(lines.len(), MAX_LAGGARD_LINES);
    assert!(
        lines.iter().any(|l| l["rank"] == 49),
        "the latest laggard is kept"
    );
}

#[test]
fn jobs_are_bounded_and_forgotten_ones_dropped() {
    let mut t = Timelines::default();
    let many: Vec<JobStatus> = (0..MAX_JOBS + 5)
        .map(|i| job(&format!("j{i:03}"), vec![member(0, 1, Some(1), false)]))
        .collect();
    t.sample(0, &views(&many));
    assert_eq!(t.followed(), MAX_JOBS);
    assert_eq!(t.unfollowed, 5);
    let last = format!("j{:03}", MAX_JOBS + 4);
    let v = t.json(&last, 0, Vec::new(), None);
    assert_eq!(v["followed"], false);
    assert!(v["why"].as_str().unwrap().contains("at most"));
    // The machine forgets the first job: its room goes to a job not followed so far.
    t.sample(1, &views(&many[1..]));
    assert_eq!(t.followed(), MAX_JOBS);
    assert!(!t.jobs.contains_key("j000"));
    let next = format!("j{MAX_JOBS:03}");
    assert_eq!(t.json(&next, 0, Vec::new(), None)["followed"], true);
    assert_eq!(t.json(&last, 0, Vec::new(), None)["followed"], false);
    assert_eq!(t.unfollowed, 4);
}

#[test]
fn marks_are_bounded_to_the_latest() {
    let t = Timelines::default();
    let marks: Vec<Value> = (0..MAX_MARKS + 30).map(|i| json!({ "seq": i })).collect();
    let v = t.json("x", 0, marks, None);
    let m = v["marks"].as_array().unwrap();
    assert_eq!(m.len(), MAX_MARKS);
    assert_eq!(m[0]["seq"], 30);
}

#[test]
fn summaries_of_another_round_or_spares_do_not_count() {
    let mut members = vec![member(0, 1, Some(7), false), member(1, 0, Some(50), false)];
    members[1].progress.as_mut().unwrap().round = 0;
    let mut spare = member(1, 1, Some(99), false);
    spare.state = "spare".into();
    spare.rank = Some(1);
    members.push(spare);
    let mut t = Timelines::default();
    t.sample(
        0,
        &views(&[JobStatus {
            world: 2,
            ..job("r", members)
        }]),
    );
    let v = t.json("r", 0, Vec::new(), None);
    assert_eq!(v["ranks"][0]["seq"][0], 7);
    assert_eq!(
        v["ranks"][1]["seq"][0],
        Value::Null,
        "round 0's summary is stale"
    );
    assert_eq!(v["summary"]["max"][0], 7);
}

#[test]
fn a_rank_in_no_call_is_dated_from_its_first_such_sample() {
    let mut t = Timelines::default();
    for i in 0..10 {
        t.sample(1_000 * i, &views(&[small(i)]));
    }
    let v = t.json("small", 0, Vec::new(), None);
    assert_eq!(v["ranks"][2]["idle_since_ms"], 3_000);
    assert_eq!(v["ranks"][1]["idle_since_ms"], Value::Null);
}

#[test]
fn since_a_sample_only_the_later_ones_come_and_idle_runs_still_span_the_window() {
    let mut t = Timelines::default();
    for i in 0..10 {
        t.sample(1_000 * i, &views(&[small(i)]));
    }
    let whole = t.json("small", 9_500, Vec::new(), None);
    let v = t.json("small", 9_500, Vec::new(), Some(7_000));
    assert_eq!(v["since_ms"], 7_000);
    assert_eq!(v["times_ms"], json!([8_000, 9_000]));
    assert_eq!(v["rounds"], json!([1, 1]));
    assert_eq!(v["summary"]["min"], json!([3, 3]));
    assert_eq!(v["ranks"][0]["seq"], json!([8, 9]));
    assert_eq!(v["ranks"][2]["seq"], json!([3, 3]));
    // Dated from the whole window, not from the samples sent.
    assert_eq!(v["ranks"][2]["idle_since_ms"], 3_000);
    assert_eq!(
        v["ranks"][2]["idle_since_ms"],
        whole["ranks"][2]["idle_since_ms"]
    );
    // The earlier part and the later part make the whole.
    let head = t.json("small", 9_500, Vec::new(), Some(u64::MAX));
    assert_eq!(head["times_ms"], json!([]));
    let all = t.json("small", 9_500, Vec::new(), Some(0));
    assert_eq!(
        all["times_ms"].as_array().unwrap().len(),
        9,
        "the sample at 0 is not after 0"
    );
    assert_eq!(whole["times_ms"].as_array().unwrap().len(), 10);
}

#[test]
fn a_page_holding_the_window_gets_a_fraction_of_it_each_second() {
    let mut t = Timelines::default();
    let ranks = |i: u64| {
        job(
            "wide",
            (0..MAX_RANK_LINES as u32)
                .map(|r| member(r, 1, Some(i * 7 + u64::from(r)), true))
                .collect(),
        )
    };
    for i in 0..SAMPLES as u64 {
        t.sample(1_000 * i, &views(&[ranks(i)]));
    }
    let last = 1_000 * (SAMPLES as u64 - 1);
    let whole = serde_json::to_vec(&t.json("wide", last, Vec::new(), None))
        .unwrap()
        .len();
    let next = serde_json::to_vec(&t.json("wide", last, Vec::new(), Some(last - 1_000)))
        .unwrap()
        .len();
    eprintln!(
        "{MAX_RANK_LINES} ranks, {SAMPLES} samples: whole window {whole} B, one new sample {next} B"
    );
    assert!(next * 20 < whole, "{next} B of {whole} B");
}
