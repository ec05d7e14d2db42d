//! The hang diagnosis's cost at scale: a job of N simulated members, one of them asleep
//! outside any call while the others wait in an all_reduce, diagnosed as the server does it
//! for `/v1/jobs/JOB/hang` (the job's status in, the report out). Prints, per N, the median
//! and range of the diagnosis time over the rounds, and the finding's first words.
//!
//! ```text
//! cargo run --release -p dt-rdzv-proto --example hang_report -- 1000,10000,100000 --rounds 5
//! ```

use std::time::Instant;

use dt_rdzv_proto::native::hang::{HangOptions, diagnose};
use dt_rdzv_proto::native::progress::{CallState, GroupProgress, PendingCall, Progress};
use dt_rdzv_proto::native::{JobSpec, JobStatus, MemberStatus, Role};

fn job(n: u32) -> JobStatus {
    let done = |seq| GroupProgress {
        group: 0,
        group_size: n,
        completed_seq: seq,
        completed_op: "all_reduce".into(),
        completed_age_ms: 41_000,
    };
    let members = (0..n)
        .map(|rank| {
            let asleep = rank == n / 2;
            MemberStatus {
                member: format!("node{}:{}", rank / 8, rank % 8),
                node: format!("node{}", rank / 8),
                state: "active".into(),
                rank: Some(rank),
                role: Role::Worker,
                last_seen_ms: 200,
                addrs: Vec::new(),
                observed_ip: String::new(),
                progress: Some(Progress {
                    rank,
                    round: 1,
                    pending: (!asleep)
                        .then(|| PendingCall {
                            group: 0,
                            group_size: n,
                            seq: 1043,
                            op: "all_reduce".into(),
                            state: CallState::Started,
                            age_ms: 40_000,
                            peer: None,
                            waiting_for: vec![(rank + n - 1) % n],
                        })
                        .into_iter()
                        .collect(),
                    groups: vec![done(1042)],
                    idle_ms: asleep.then_some(41_000),
                    calls: 1042,
                }),
                progress_age_ms: 300,
            }
        })
        .collect();
    JobStatus {
        job: "train".into(),
        state: "running".into(),
        round: 1,
        world: n,
        spec: JobSpec::fixed(n),
        members,
        missing: Vec::new(),
        restarts: 0,
        age_ms: 60_000,
        config_keys: Vec::new(),
        workers: Vec::new(),
        workers_world: 0,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut sizes: Vec<u32> = vec![1_000, 10_000, 100_000];
    let mut rounds = 5usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => rounds = args.next().and_then(|v| v.parse().ok()).unwrap_or(5),
            list => sizes = list.split(',').filter_map(|s| s.parse().ok()).collect(),
        }
    }
    println!("members  median_ms  min_ms  max_ms  finding");
    for n in sizes {
        let status = job(n);
        let mut times = Vec::with_capacity(rounds);
        let mut words = String::new();
        for _ in 0..rounds.max(1) {
            let t = Instant::now();
            let r = diagnose(&status, &HangOptions::default());
            times.push(t.elapsed().as_secs_f64() * 1e3);
            words = r
                .findings
                .first()
                .map(|f| f.words.clone())
                .unwrap_or_default();
        }
        times.sort_by(f64::total_cmp);
        let short: String = words.chars().take(90).collect();
        println!(
            "{n:>7}  {:>9.2}  {:>6.2}  {:>6.2}  {short}...",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1]
        );
    }
}
