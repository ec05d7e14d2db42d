//! The diagnosis: from every member's last summary and heartbeat, who waits for whom, and
//! which ranks hold the others up, in words. Pure: a [`JobStatus`] in, a [`HangReport`] out.
//!
//! A rank waits in its oldest started call (or, with none started, its oldest queued one)
//! once that call is older than [`HangOptions::stuck_after_ms`]. Waiters in one collective
//! (group, sequence number, operation) wait for the group's ranks that are not in it and have
//! not completed it: every rank of the round for the world group; for a subgroup, the ranks
//! whose summaries name the group, and the ranks the waiters' engines have not heard from.
//! A point-to-point call waits for its peer. Waits form a graph over ranks; a circle in it is
//! a deadlock, told as one.

use std::collections::{BTreeMap, BTreeSet};

use super::ranks::words;
use super::report::{Finding, FindingKind, HangOptions, HangReport, RankView, ago, group_name};
use crate::native::JobStatus;
use crate::native::progress::{CallState, PendingCall, WORLD_GROUP};

/// Culprits beyond this many are not followed when looking for circles.
const MAX_EDGES_PER_WAIT: usize = 64;
/// Culprits described one by one; beyond this, by example.
const MAX_DESCRIBED: usize = 4;

/// Why `job` is stuck, if it is.
pub fn diagnose(job: &JobStatus, opts: &HangOptions) -> HangReport {
    // A launcher's agents are the members and relay their workers' calls: the workers hang.
    if let Some(workers) = super::store::workers_job(job) {
        return diagnose(&workers, opts);
    }
    let views = views(job, opts);
    let waits: BTreeMap<u32, PendingCall> = views
        .values()
        .filter_map(|v| current_wait(v, opts).map(|p| (v.rank, p.clone())))
        .collect();

    // Waiters per collective, and every rank's wait edges.
    let mut collectives: BTreeMap<(u64, u64, &str), Vec<u32>> = BTreeMap::new();
    for (&r, p) in &waits {
        if p.peer.is_none() {
            collectives
                .entry((p.group, p.seq, p.op.as_str()))
                .or_default()
                .push(r);
        }
    }
    let mut edges: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut waiting_findings = Vec::new();
    for (&(group, seq, op), waiters) in &collectives {
        let size = waits[&waiters[0]].group_size;
        let culprits = culprits(&views, &waits, group, seq, op, waiters);
        if culprits.len() <= MAX_EDGES_PER_WAIT {
            for w in waiters {
                edges.insert(*w, culprits.clone());
            }
        }
        waiting_findings.push(collective_finding(
            &views, group, size, seq, op, waiters, &culprits, &waits,
        ));
    }
    for (&r, p) in &waits {
        if let Some(peer) = p.peer {
            edges.insert(r, vec![peer]);
            if !matches!(waits.get(&peer), Some(q) if q.peer == Some(r)) {
                waiting_findings.push(p2p_finding(&views, r, p, peer));
            }
        }
    }

    let mut findings = Vec::new();
    let cycles = cycles(&edges);
    let in_cycles: BTreeSet<u32> = cycles.iter().flatten().copied().collect();
    for c in &cycles {
        findings.push(cycle_finding(c, &waits));
    }
    waiting_findings.retain(|f| {
        !(f.waiters.iter().all(|w| in_cycles.contains(w))
            && f.culprits.iter().all(|c| in_cycles.contains(c)))
    });
    waiting_findings.sort_by_key(|f| std::cmp::Reverse(f.waiters.len()));
    findings.extend(waiting_findings);

    let silent: Vec<&RankView> = views.values().filter(|v| !v.heartbeating).collect();
    if !silent.is_empty() {
        let ranks: Vec<u32> = silent.iter().map(|v| v.rank).collect();
        let longest = silent.iter().map(|v| v.silent_ms).max().unwrap_or(0);
        let words = if ranks.len() == 1 {
            format!(
                "rank {} stopped heartbeating {} ago",
                ranks[0],
                ago(longest)
            )
        } else {
            format!(
                "{} stopped heartbeating (the longest {} ago)",
                words(&ranks),
                ago(longest)
            )
        };
        findings.push(Finding {
            kind: FindingKind::Silent,
            group: None,
            seq: None,
            op: None,
            waiters: Vec::new(),
            culprits: ranks,
            words,
        });
    }
    if !job.missing.is_empty() {
        // Lost members leave the round at once (their connection idles out within seconds,
        // or their heartbeats stop): what holds the job up then is the next round forming.
        let n = job.missing.len();
        let shown: Vec<&str> = job.missing.iter().take(8).map(String::as_str).collect();
        findings.push(Finding {
            kind: FindingKind::Missing,
            group: None,
            seq: None,
            op: None,
            waiters: Vec::new(),
            culprits: Vec::new(),
            words: format!(
                "round {} ended and the job ({}) waits for {n} member{} of it that {} gone: {}{}",
                job.round,
                job.state,
                if n == 1 { "" } else { "s" },
                if n == 1 { "is" } else { "are" },
                shown.join(", "),
                if n > shown.len() { ", ..." } else { "" }
            ),
        });
    }
    let stuck = !findings.is_empty();
    let unsummarised: Vec<u32> = views
        .values()
        .filter(|v| !v.summary && v.heartbeating)
        .map(|v| v.rank)
        .collect();
    if !unsummarised.is_empty() && job.world > 0 {
        findings.push(Finding {
            kind: FindingKind::NoSummary,
            group: None,
            seq: None,
            op: None,
            waiters: Vec::new(),
            words: format!(
                "{} sent no summary of their calls for this round (not dtcomm's engine, or its \
                 recorder is off: DTCOMM_FR_BUFFER_SIZE=0)",
                words(&unsummarised)
            ),
            culprits: unsummarised,
        });
    }

    let culprits: BTreeSet<u32> = findings
        .iter()
        .flat_map(|f| f.culprits.iter().copied())
        .collect();
    let named: BTreeSet<u32> = findings
        .iter()
        .flat_map(|f| f.waiters.iter().copied())
        .collect();
    let mut listed: Vec<&RankView> = views.values().collect();
    listed.sort_by_key(|v| {
        (
            !culprits.contains(&v.rank),
            !named.contains(&v.rank),
            v.rank,
        )
    });
    let omitted = listed.len().saturating_sub(opts.max_ranks_listed);
    listed.truncate(opts.max_ranks_listed);
    listed.sort_by_key(|v| v.rank);
    HangReport {
        job: job.job.clone(),
        state: job.state.clone(),
        round: job.round,
        world: job.world,
        stuck,
        findings,
        waiting: waits.len() as u32,
        idle: views
            .values()
            .filter(|v| v.summary && v.pending.is_empty())
            .count() as u32,
        ranks: listed.into_iter().cloned().collect(),
        ranks_omitted: omitted as u32,
    }
}

/// Every ranked member of the current round, its summary's ages brought to now.
fn views(job: &JobStatus, opts: &HangOptions) -> BTreeMap<u32, RankView> {
    job.members
        .iter()
        .filter_map(|m| {
            let rank = m.rank?;
            let progress = m.progress.as_ref().filter(|p| p.round == job.round);
            let late = m.progress_age_ms;
            let mut v = RankView {
                rank,
                member: m.member.clone(),
                node: m.node.clone(),
                silent_ms: m.last_seen_ms,
                heartbeating: m.last_seen_ms <= opts.silent_after_ms,
                summary: progress.is_some(),
                pending: Vec::new(),
                groups: Vec::new(),
                idle_ms: None,
            };
            if let Some(p) = progress {
                v.pending = p.pending.clone();
                for c in &mut v.pending {
                    c.age_ms = c.age_ms.saturating_add(late);
                }
                v.pending.sort_by_key(|c| std::cmp::Reverse(c.age_ms));
                v.groups = p.groups.clone();
                for g in &mut v.groups {
                    g.completed_age_ms = g.completed_age_ms.saturating_add(late);
                }
                v.idle_ms = p.idle_ms.map(|i| i.saturating_add(late));
            }
            Some((rank, v))
        })
        .collect()
}

/// The call a rank waits in, if one has run long enough to count.
fn current_wait<'a>(v: &'a RankView, opts: &HangOptions) -> Option<&'a PendingCall> {
    let old = |p: &&PendingCall| p.age_ms >= opts.stuck_after_ms;
    v.pending
        .iter()
        .filter(old)
        .find(|p| p.state == CallState::Started)
        .or_else(|| v.pending.iter().find(old))
}

/// The ranks the waiters of one collective wait for.
fn culprits(
    views: &BTreeMap<u32, RankView>,
    waits: &BTreeMap<u32, PendingCall>,
    group: u64,
    seq: u64,
    op: &str,
    waiters: &[u32],
) -> Vec<u32> {
    let mut members: BTreeSet<u32> = if group == WORLD_GROUP {
        views.keys().copied().collect()
    } else {
        views
            .values()
            .filter(|v| v.completed(group).is_some() || v.pending.iter().any(|p| p.group == group))
            .map(|v| v.rank)
            .collect()
    };
    for w in waiters {
        members.extend(waits[w].waiting_for.iter().copied());
    }
    members
        .into_iter()
        // Waiters come in rank order (from a map by rank): a binary search, not a scan.
        .filter(|r| waiters.binary_search(r).is_err())
        .filter(|r| {
            // Not in this very call (the same call with another op is a mismatch: a culprit).
            !matches!(waits.get(r), Some(p) if p.group == group && p.seq == seq && p.op == op)
        })
        .filter(|r| match views.get(r).and_then(|v| v.completed(group)) {
            Some(g) => g.completed_seq < seq,
            None => true,
        })
        .collect()
}

/// What a rank another waits for is doing, as a clause ("which ...").
fn describe(
    views: &BTreeMap<u32, RankView>,
    waits: &BTreeMap<u32, PendingCall>,
    r: u32,
    group: u64,
) -> String {
    let Some(v) = views.get(&r) else {
        return "which is not in the round".into();
    };
    if !v.heartbeating {
        return format!("which stopped heartbeating {} ago", ago(v.silent_ms));
    }
    if !v.summary {
        return "which sent no summary of its calls".into();
    }
    if let Some(p) = waits.get(&r).or(v.pending.first()) {
        let from = match p.peer {
            Some(peer) => format!(" with rank {peer}"),
            None => format!(" of {}", group_name(p.group, p.group_size)),
        };
        return format!(
            "which waits in {} seq {}{from} (for {})",
            p.op,
            p.seq,
            ago(p.age_ms)
        );
    }
    let idle = v.idle_ms.map(ago).unwrap_or_else(|| "?".into());
    match v.completed(group) {
        Some(g) => format!(
            "which completed seq {} ({}, {} ago) and has called no collective for {idle}",
            g.completed_seq,
            g.completed_op,
            ago(g.completed_age_ms)
        ),
        None => format!(
            "which has completed no call of {} and has been in no call for {idle}",
            if group == WORLD_GROUP {
                "group 0".to_string()
            } else {
                format!("group {group:x}")
            }
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn collective_finding(
    views: &BTreeMap<u32, RankView>,
    group: u64,
    size: u32,
    seq: u64,
    op: &str,
    waiters: &[u32],
    culprits: &[u32],
    waits: &BTreeMap<u32, PendingCall>,
) -> Finding {
    let verb = if waiters.len() == 1 { "waits" } else { "wait" };
    let head = format!(
        "{} {verb} in {op} seq {seq} of {}",
        words(waiters),
        group_name(group, size)
    );
    let age = waiters.iter().map(|w| waits[w].age_ms).max().unwrap_or(0);
    let (kind, words_) = if culprits.is_empty() {
        let mut silent_pairs: Vec<String> = waiters
            .iter()
            .filter(|w| !waits[w].waiting_for.is_empty())
            .take(MAX_DESCRIBED)
            .map(|w| {
                format!(
                    "rank {w} has not heard from {}",
                    words(&waits[w].waiting_for)
                )
            })
            .collect();
        if silent_pairs.is_empty() {
            silent_pairs.push("no rank said whom it waits for".into());
        }
        (
            FindingKind::Stalled,
            format!(
                "{head} (for {}), and no rank of the group is outside it: the data does not flow ({})",
                ago(age),
                silent_pairs.join("; ")
            ),
        )
    } else if culprits.len() <= MAX_DESCRIBED {
        let each: Vec<String> = culprits
            .iter()
            .map(|&c| format!("rank {c}, {}", describe(views, waits, c, group)))
            .collect();
        (
            FindingKind::Waiting,
            format!("{head} (for {}) for {}", ago(age), each.join("; and ")),
        )
    } else {
        (
            FindingKind::Waiting,
            format!(
                "{head} (for {}) for {} ({} ranks; e.g. rank {}, {})",
                ago(age),
                words(culprits),
                culprits.len(),
                culprits[0],
                describe(views, waits, culprits[0], group)
            ),
        )
    };
    Finding {
        kind,
        group: Some(group),
        seq: Some(seq),
        op: Some(op.to_string()),
        waiters: waiters.to_vec(),
        culprits: culprits.to_vec(),
        words: words_,
    }
}

fn p2p_finding(views: &BTreeMap<u32, RankView>, r: u32, p: &PendingCall, peer: u32) -> Finding {
    let waits = BTreeMap::new();
    Finding {
        kind: FindingKind::Waiting,
        group: Some(p.group),
        seq: Some(p.seq),
        op: Some(p.op.clone()),
        waiters: vec![r],
        culprits: vec![peer],
        words: format!(
            "rank {r} waits in {} seq {} with rank {peer} (for {}) for rank {peer}, {}",
            p.op,
            p.seq,
            ago(p.age_ms),
            describe(views, &waits, peer, p.group)
        ),
    }
}

fn cycle_finding(cycle: &[u32], waits: &BTreeMap<u32, PendingCall>) -> Finding {
    let n = cycle.len();
    let clauses: Vec<String> = (0..n)
        .map(|i| {
            let (r, next) = (cycle[i], cycle[(i + 1) % n]);
            let p = &waits[&r];
            let what = match p.peer {
                Some(_) => format!("{} from rank {next}", p.op),
                None => format!(
                    "{} seq {} of {} for rank {next}",
                    p.op,
                    p.seq,
                    group_name(p.group, p.group_size)
                ),
            };
            if i == 0 {
                format!("rank {r} waits in {what}")
            } else {
                format!("rank {r} in {what}")
            }
        })
        .collect();
    let (last, rest) = clauses.split_last().expect("a cycle has ranks");
    let joined = if rest.is_empty() {
        last.clone()
    } else {
        format!("{} and {last}", rest.join(", "))
    };
    Finding {
        kind: FindingKind::Cycle,
        group: None,
        seq: None,
        op: None,
        waiters: cycle.to_vec(),
        culprits: cycle.to_vec(),
        words: format!("{joined}: a cycle, none of them can go on"),
    }
}

/// The circles of the wait graph, each once, each starting at its lowest rank.
fn cycles(edges: &BTreeMap<u32, Vec<u32>>) -> Vec<Vec<u32>> {
    // Iterative depth-first search with colours; a back edge closes a circle.
    let mut colour: BTreeMap<u32, u8> = BTreeMap::new(); // 1: on the path, 2: done
    let mut found: BTreeSet<Vec<u32>> = BTreeSet::new();
    for &start in edges.keys() {
        if colour.contains_key(&start) {
            continue;
        }
        let mut path: Vec<(u32, usize)> = vec![(start, 0)];
        colour.insert(start, 1);
        while let Some((node, next)) = path.last_mut() {
            let out = edges.get(node).map(Vec::as_slice).unwrap_or(&[]);
            if *next < out.len() {
                let to = out[*next];
                *next += 1;
                match colour.get(&to) {
                    None => {
                        colour.insert(to, 1);
                        path.push((to, 0));
                    }
                    Some(1) => {
                        let at = path
                            .iter()
                            .position(|(n, _)| *n == to)
                            .expect("on the path");
                        let mut c: Vec<u32> = path[at..].iter().map(|(n, _)| *n).collect();
                        let low = c
                            .iter()
                            .enumerate()
                            .min_by_key(|(_, r)| **r)
                            .map(|(i, _)| i);
                        c.rotate_left(low.unwrap_or(0));
                        found.insert(c);
                    }
                    _ => {}
                }
            } else {
                colour.insert(*node, 2);
                path.pop();
            }
        }
    }
    found.into_iter().collect()
}
