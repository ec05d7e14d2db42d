//! A job whose members report their calls and then hang on one rank, for the status page's
//! picture (`python/tests/test_status_page.py`) and for trying `dt-rdzv status --hang` by hand.
//!
//! `progress_members HOST:PORT FINGERPRINT TOKEN JOB MEMBERS STUCK_RANK STALL_SECONDS SECONDS`
//! joins `MEMBERS` members to `JOB` (a fixed-size job) through the native port, each
//! heartbeating a summary of its calls (`ClientConfig.progress`): for `STALL_SECONDS` after the
//! round forms every rank completes one all_reduce every 100 ms (rank r a little behind the
//! others, so that the lines are told apart); then rank `STUCK_RANK` calls nothing more, and the
//! others wait for it in the next all_reduce. It prints `ready` once every member has its rank,
//! keeps the members `SECONDS` and exits (or is stopped by PID).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dt_rdzv::native::{ClientConfig, Connector, Membership, ProgressSource, Trust};
use dt_rdzv_proto::native::progress::{CallState, GroupProgress, PendingCall, Progress};
use dt_rdzv_proto::native::{JobSpec, Role};

const WAIT: Duration = Duration::from_secs(60);
/// One all_reduce per this long while the job runs.
const STEP_MS: u64 = 100;

/// Where a member stands: its rank and round once welcomed, and when the round formed.
type Place = Arc<Mutex<Option<(u32, u64, Instant)>>>;

/// What rank `rank` says of its calls `elapsed` after the round formed.
fn summary(
    rank: u32,
    round: u64,
    world: u32,
    elapsed: Duration,
    stuck: u32,
    stall: Duration,
) -> Progress {
    let now_ms = elapsed.as_millis() as u64;
    let stall_ms = stall.as_millis() as u64;
    let running = now_ms < stall_ms;
    // Before the stall rank r trails the others by r steps at most (its own pace); at the
    // stall everyone has completed the same call.
    let at = now_ms.min(stall_ms);
    let lag = if running { u64::from(rank % 3) } else { 0 };
    let done = (at / STEP_MS).saturating_sub(lag);
    let since_done = if running {
        now_ms % STEP_MS
    } else {
        now_ms - stall_ms
    };
    let idle = !running && rank == stuck;
    let pending = (!idle).then(|| PendingCall {
        group: 0,
        group_size: world,
        seq: done + 1,
        op: "all_reduce".into(),
        state: CallState::Started,
        age_ms: since_done,
        peer: None,
        waiting_for: if running { Vec::new() } else { vec![stuck] },
    });
    Progress {
        rank,
        round,
        pending: pending.into_iter().collect(),
        groups: vec![GroupProgress {
            group: 0,
            group_size: world,
            completed_seq: done,
            completed_op: "all_reduce".into(),
            completed_age_ms: since_done,
        }],
        idle_ms: idle.then_some(since_done),
        calls: done + u64::from(!idle),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 8 {
        eprintln!(
            "usage: progress_members HOST:PORT FINGERPRINT TOKEN JOB MEMBERS STUCK_RANK \
             STALL_SECONDS SECONDS"
        );
        std::process::exit(2);
    }
    let num = |i: usize| -> u64 { args[i].parse().expect("a number") };
    let (endpoint, fingerprint, token, job) = (&args[0], &args[1], &args[2], &args[3]);
    let (n, stuck) = (num(4) as u32, num(5) as u32);
    let stall = Duration::from_secs(num(6));
    let keep = Duration::from_secs(num(7));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut members = Vec::new();
        for i in 0..n {
            let place: Place = Arc::new(Mutex::new(None));
            let mut cfg = ClientConfig::new(
                endpoint.clone(),
                token.as_str(),
                Trust::Fingerprint(fingerprint.clone()),
            );
            let p = place.clone();
            cfg.progress = Some(ProgressSource::new(move || {
                let (rank, round, formed) = (*p.lock().unwrap())?;
                Some(summary(rank, round, n, formed.elapsed(), stuck, stall))
            }));
            let connector = Connector::new(&cfg.trust).expect("TLS settings");
            let mut m = connector.connect(&cfg).await.expect("connect");
            m.join(Membership {
                job: job.clone(),
                member: format!("member-{i}"),
                node: format!("node-{}", i / 4),
                addrs: vec![format!("127.0.0.1:{}", 41000 + i)],
                host: Vec::new(),
                role: Role::Worker,
                spec: JobSpec::fixed(n),
            })
            .await
            .expect("join");
            members.push((m, place));
        }
        for (m, place) in members.iter_mut() {
            let w = m.wait_welcome(WAIT).await.expect("welcome");
            *place.lock().unwrap() = Some((w.rank, w.round, Instant::now()));
        }
        println!("ready");
        tokio::time::sleep(keep).await;
        drop(members);
    });
}
