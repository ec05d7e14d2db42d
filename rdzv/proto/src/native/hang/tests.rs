//! The diagnosis on hand-made jobs: one per shape of hang the issue names.

use super::*;
use crate::native::progress::{CallState, GroupProgress, PendingCall, Progress};
use crate::native::{JobSpec, JobStatus, MemberStatus, Role};

const ROUND: u64 = 4;

fn member(rank: u32, progress: Option<Progress>) -> MemberStatus {
    MemberStatus {
        member: format!("m{rank}"),
        node: "n0".into(),
        state: "active".into(),
        rank: Some(rank),
        role: Role::Worker,
        last_seen_ms: 100,
        addrs: Vec::new(),
        observed_ip: String::new(),
        progress,
        progress_age_ms: 100,
    }
}

fn job(members: Vec<MemberStatus>) -> JobStatus {
    JobStatus {
        job: "j".into(),
        state: "running".into(),
        round: ROUND,
        world: members.len() as u32,
        spec: JobSpec::fixed(members.len() as u32),
        members,
        missing: Vec::new(),
        restarts: 0,
        age_ms: 60_000,
        config_keys: Vec::new(),
        workers: Vec::new(),
        workers_world: 0,
    }
}

fn done(group: u64, size: u32, seq: u64, age_ms: u64) -> GroupProgress {
    GroupProgress {
        group,
        group_size: size,
        completed_seq: seq,
        completed_op: "all_reduce".into(),
        completed_age_ms: age_ms,
    }
}

fn call(group: u64, size: u32, seq: u64, op: &str, peer: Option<u32>) -> PendingCall {
    PendingCall {
        group,
        group_size: size,
        seq,
        op: op.into(),
        state: CallState::Started,
        age_ms: 40_000,
        peer,
        waiting_for: Vec::new(),
    }
}

fn waiting(rank: u32, calls: Vec<PendingCall>, groups: Vec<GroupProgress>) -> Option<Progress> {
    Some(Progress {
        rank,
        round: ROUND,
        pending: calls,
        groups,
        idle_ms: None,
        calls: 10,
    })
}

fn idle(rank: u32, groups: Vec<GroupProgress>, idle_ms: u64) -> Option<Progress> {
    Some(Progress {
        rank,
        round: ROUND,
        pending: Vec::new(),
        groups,
        idle_ms: Some(idle_ms),
        calls: 10,
    })
}

#[test]
fn six_ranks_wait_for_the_one_that_sleeps() {
    let members = (0..6)
        .map(|r| {
            if r == 3 {
                member(r, idle(r, vec![done(0, 6, 1042, 41_000)], 40_900))
            } else {
                let c = call(0, 6, 1043, "all_reduce", None);
                member(r, waiting(r, vec![c], vec![done(0, 6, 1042, 41_000)]))
            }
        })
        .collect();
    let r = diagnose(&job(members), &HangOptions::default());
    assert!(r.stuck);
    assert_eq!(r.findings[0].kind, FindingKind::Waiting);
    assert_eq!(r.findings[0].culprits, vec![3]);
    assert_eq!(
        r.findings[0].words,
        "ranks 0-2, 4 and 5 wait in all_reduce seq 1043 of group 0 (for 40 s) for rank 3, which \
         completed seq 1042 (all_reduce, 41 s ago) and has called no collective for 41 s"
    );
    assert_eq!(r.waiting, 5);
    assert_eq!(r.idle, 1);
    let text = r.to_string();
    assert!(text.contains("rank 3, which completed seq 1042"), "{text}");
}

#[test]
fn two_ranks_receiving_from_each_other_are_a_cycle() {
    let members = vec![
        member(0, waiting(0, vec![call(0, 2, 1, "recv", Some(1))], vec![])),
        member(1, waiting(1, vec![call(0, 2, 1, "recv", Some(0))], vec![])),
    ];
    let r = diagnose(&job(members), &HangOptions::default());
    assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
    assert_eq!(r.findings[0].kind, FindingKind::Cycle);
    assert_eq!(
        r.findings[0].words,
        "rank 0 waits in recv from rank 1 and rank 1 in recv from rank 0: a cycle, none of them \
         can go on"
    );
}

#[test]
fn a_silent_rank_is_named_as_not_heartbeating() {
    let mut members: Vec<MemberStatus> = (0..3)
        .map(|r| {
            let c = call(0, 3, 7, "all_reduce", None);
            member(r, waiting(r, vec![c], vec![done(0, 3, 6, 9_000)]))
        })
        .collect();
    members[2].last_seen_ms = 4_200;
    members[2].progress = idle(2, vec![done(0, 3, 6, 5_000)], 4_000);
    let r = diagnose(&job(members), &HangOptions::default());
    let words: Vec<&str> = r.findings.iter().map(|f| f.words.as_str()).collect();
    assert!(
        words[0].ends_with("for rank 2, which stopped heartbeating 4.2 s ago"),
        "{words:?}"
    );
    assert!(
        words.contains(&"rank 2 stopped heartbeating 4.2 s ago"),
        "{words:?}"
    );
}

#[test]
fn two_subgroups_hung_differently_are_told_apart() {
    let (a, b) = (0xa, 0xb);
    let members = vec![
        // Group a = {0, 1, 2}: 0 and 1 wait in seq 5 for 2, which left after seq 4.
        member(
            0,
            waiting(
                0,
                vec![call(a, 3, 5, "all_reduce", None)],
                vec![done(a, 3, 4, 30_000)],
            ),
        ),
        member(
            1,
            waiting(
                1,
                vec![call(a, 3, 5, "all_reduce", None)],
                vec![done(a, 3, 4, 30_000)],
            ),
        ),
        member(2, idle(2, vec![done(a, 3, 4, 30_000)], 29_000)),
        // Group b = {3, 4}: 3 waits in broadcast seq 2 for 4, which sleeps.
        member(
            3,
            waiting(
                3,
                vec![call(b, 2, 2, "broadcast", None)],
                vec![done(b, 2, 1, 30_000)],
            ),
        ),
        member(4, idle(4, vec![done(b, 2, 1, 30_000)], 12_000)),
    ];
    let r = diagnose(&job(members), &HangOptions::default());
    let about = |g: u64| {
        r.findings
            .iter()
            .find(|f| f.group == Some(g))
            .unwrap_or_else(|| panic!("{:?}", r.findings))
    };
    assert_eq!(about(a).waiters, vec![0, 1]);
    assert_eq!(about(a).culprits, vec![2]);
    assert!(
        about(a).words.contains("of group a (3 ranks)"),
        "{}",
        about(a).words
    );
    assert_eq!(about(b).waiters, vec![3]);
    assert_eq!(about(b).culprits, vec![4]);
    assert!(
        about(b)
            .words
            .contains("rank 4, which completed seq 1 (all_reduce, 30 s ago)"),
        "{}",
        about(b).words
    );
}

#[test]
fn rank_0_stuck_itself_does_not_stop_the_report() {
    let members = (0..4)
        .map(|r| {
            if r == 0 {
                member(r, idle(r, vec![done(0, 4, 2, 20_000)], 19_000))
            } else {
                let c = call(0, 4, 3, "barrier", None);
                member(r, waiting(r, vec![c], vec![done(0, 4, 2, 20_000)]))
            }
        })
        .collect();
    let r = diagnose(&job(members), &HangOptions::default());
    assert_eq!(r.findings[0].waiters, vec![1, 2, 3]);
    assert_eq!(r.findings[0].culprits, vec![0]);
}

#[test]
fn a_thousand_ranks_are_summarised_not_listed() {
    let members = (0..1000)
        .map(|r| {
            if r == 500 {
                member(r, idle(r, vec![done(0, 1000, 1, 5_000)], 5_000))
            } else {
                let c = call(0, 1000, 2, "all_reduce", None);
                member(r, waiting(r, vec![c], vec![done(0, 1000, 1, 5_000)]))
            }
        })
        .collect();
    let r = diagnose(&job(members), &HangOptions::default());
    assert!(
        r.findings[0]
            .words
            .starts_with("ranks 0-499 and 501-999 wait in all_reduce seq 2")
    );
    assert_eq!(r.ranks.len(), 64);
    assert_eq!(r.ranks_omitted, 936);
    assert_eq!(r.ranks[0].rank, 0);
    assert!(
        r.ranks.iter().any(|v| v.rank == 500),
        "the culprit is listed"
    );
}

#[test]
fn a_round_whose_data_does_not_flow_is_stalled() {
    let members = (0..3)
        .map(|r| {
            let mut c = call(0, 3, 1, "all_reduce", None);
            c.waiting_for = vec![(r + 2) % 3];
            member(r, waiting(r, vec![c], vec![]))
        })
        .collect();
    let r = diagnose(&job(members), &HangOptions::default());
    assert_eq!(r.findings[0].kind, FindingKind::Stalled);
    assert!(
        r.findings[0]
            .words
            .contains("rank 0 has not heard from rank 2"),
        "{}",
        r.findings[0].words
    );
}

#[test]
fn short_calls_and_other_rounds_are_not_hangs() {
    let mut c = call(0, 2, u64::MAX, "all_reduce", None);
    c.age_ms = 10;
    let mut stale = waiting(1, vec![call(0, 2, 1, "all_reduce", None)], vec![]).unwrap();
    stale.round = ROUND - 1;
    let members = vec![
        member(0, waiting(0, vec![c], vec![])),
        member(1, Some(stale)),
    ];
    let r = diagnose(&job(members), &HangOptions::default());
    assert!(!r.stuck, "{:?}", r.findings);
    assert_eq!(r.findings.len(), 1);
    assert_eq!(r.findings[0].kind, FindingKind::NoSummary);
    assert_eq!(r.findings[0].culprits, vec![1]);
}

#[test]
fn a_claimed_sequence_number_of_u64_max_does_not_overflow() {
    let members = vec![
        member(
            0,
            waiting(0, vec![call(0, 2, u64::MAX, "all_reduce", None)], vec![]),
        ),
        member(1, idle(1, vec![done(0, 2, u64::MAX, 1_000)], 1_000)),
    ];
    let r = diagnose(&job(members), &HangOptions::default());
    // Rank 1 completed that very sequence number: it holds nobody up; nobody is outside.
    assert_eq!(r.findings[0].kind, FindingKind::Stalled);
}

#[test]
fn waits_across_groups_that_close_a_circle_are_a_cycle() {
    // Rank 3 waits in group b for rank 4; rank 4 waits in the world's barrier for rank 3.
    let b = 0xb;
    let members = vec![
        member(0, waiting(0, vec![call(0, 3, 9, "barrier", None)], vec![])),
        member(
            1,
            waiting(
                1,
                vec![call(b, 2, 2, "broadcast", None)],
                vec![done(b, 2, 1, 30_000)],
            ),
        ),
        member(
            2,
            waiting(
                2,
                vec![call(0, 3, 9, "barrier", None)],
                vec![done(b, 2, 1, 30_000)],
            ),
        ),
    ];
    let r = diagnose(&job(members), &HangOptions::default());
    assert_eq!(r.findings[0].kind, FindingKind::Cycle, "{:?}", r.findings);
    assert_eq!(
        r.findings[0].words,
        "rank 1 waits in broadcast seq 2 of group b (2 ranks) for rank 2 and rank 2 in barrier \
         seq 9 of group 0 for rank 1: a cycle, none of them can go on"
    );
}

#[test]
fn a_store_job_is_diagnosed_like_a_native_one() {
    use crate::native::progress::{from_record, to_record};
    let now = 1_700_000_100_000;
    let records: Vec<Option<(u64, Progress)>> = (0..3)
        .map(|r| match r {
            // Rank 1 published 9 s ago and never again: stopped.
            1 => Some((
                now - 9_000,
                idle(1, vec![done(0, 3, 4, 9_000)], 9_000).unwrap(),
            )),
            _ => waiting(
                r,
                vec![call(0, 3, 5, "all_reduce", None)],
                vec![done(0, 3, 4, 9_000)],
            )
            .map(|p| (now - 200, p)),
        })
        .map(|r| r.map(|(t, p)| from_record(&to_record(t, &p)).unwrap()))
        .collect();
    let job = store::store_job("store 127.0.0.1:29500", &records, now);
    let opts = HangOptions {
        silent_after_ms: 3_000,
        ..HangOptions::default()
    };
    let r = diagnose(&job, &opts);
    assert_eq!(r.findings[0].culprits, vec![1]);
    assert!(
        r.findings[0]
            .words
            .ends_with("for rank 1, which stopped heartbeating 9.0 s ago"),
        "{}",
        r.findings[0].words
    );
}

#[test]
fn a_round_that_lost_a_member_is_told_as_missing() {
    let mut j = job(vec![member(0, idle(0, vec![], 1_000))]);
    j.state = "forming".into();
    j.missing = vec!["vm:380".into()];
    let r = diagnose(&j, &HangOptions::default());
    assert!(r.stuck);
    let f = r
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::Missing)
        .unwrap();
    assert_eq!(
        f.words,
        "round 4 ended and the job (forming) waits for 1 member of it that is gone: vm:380"
    );
}
