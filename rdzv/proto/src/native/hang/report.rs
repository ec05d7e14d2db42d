//! What `dt-rdzv status --hang` answers: every rank's calls, and the findings in words.

use std::fmt;

use crate::native::progress::{GroupProgress, PendingCall, WORLD_GROUP};

/// What the diagnosis looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HangOptions {
    /// A call pending for less than this is ordinary work, not a hang.
    pub stuck_after_ms: u64,
    /// A member silent for longer than this has stopped heartbeating.
    pub silent_after_ms: u64,
    /// Most ranks the report lists one by one (the findings name every rank in ranges).
    pub max_ranks_listed: usize,
}

impl Default for HangOptions {
    /// Calls pending 1 s, members silent 1.5 s (three heartbeats), 64 ranks listed.
    fn default() -> Self {
        Self {
            stuck_after_ms: 1_000,
            silent_after_ms: 1_500,
            max_ranks_listed: 64,
        }
    }
}

/// One rank as the server sees it; ages are as of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankView {
    /// Its rank in the round.
    pub rank: u32,
    /// Its member id.
    pub member: String,
    /// Its node.
    pub node: String,
    /// Milliseconds since its last message.
    pub silent_ms: u64,
    /// Whether it still heartbeats.
    pub heartbeating: bool,
    /// Whether it sent a summary of its calls for this round.
    pub summary: bool,
    /// Its calls not finished, oldest first.
    pub pending: Vec<PendingCall>,
    /// Its last completed call per group.
    pub groups: Vec<GroupProgress>,
    /// Milliseconds it has been in no call, if it is in none.
    pub idle_ms: Option<u64>,
}

impl RankView {
    /// Its last completed call in `group`, if it has one.
    pub fn completed(&self, group: u64) -> Option<&GroupProgress> {
        self.groups.iter().find(|g| g.group == group)
    }
}

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// Ranks wait in one call for others that are not in it.
    Waiting,
    /// Ranks wait for each other in a circle: none can go on.
    Cycle,
    /// Ranks wait in one call and every rank of the group is in it: the data does not flow.
    Stalled,
    /// Ranks stopped heartbeating.
    Silent,
    /// Ranks send no summary of their calls.
    NoSummary,
    /// The round ended and the next one waits for members that are gone (lost or left).
    Missing,
}

impl FindingKind {
    /// Its name in JSON.
    pub const fn name(self) -> &'static str {
        match self {
            FindingKind::Waiting => "waiting",
            FindingKind::Cycle => "cycle",
            FindingKind::Stalled => "stalled",
            FindingKind::Silent => "silent",
            FindingKind::NoSummary => "no_summary",
            FindingKind::Missing => "missing",
        }
    }
}

/// One finding, in words and in fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What it is about.
    pub kind: FindingKind,
    /// The group of the call waited in, if one.
    pub group: Option<u64>,
    /// The call's sequence number.
    pub seq: Option<u64>,
    /// The call's operation.
    pub op: Option<String>,
    /// The ranks that wait.
    pub waiters: Vec<u32>,
    /// The ranks they wait for (the culprits), or the ranks of a cycle, or the silent ones.
    pub culprits: Vec<u32>,
    /// The finding in words.
    pub words: String,
}

/// The answer to "why is my job stuck?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HangReport {
    /// The job.
    pub job: String,
    /// Its state (`running`, `forming`, ...).
    pub state: String,
    /// Its round.
    pub round: u64,
    /// The round's size.
    pub world: u32,
    /// Whether anything is stuck.
    pub stuck: bool,
    /// The findings, most telling first.
    pub findings: Vec<Finding>,
    /// Ranks in a call for longer than the threshold.
    pub waiting: u32,
    /// Ranks in no call.
    pub idle: u32,
    /// Ranks listed one by one (culprits and waiters first), at most
    /// [`HangOptions::max_ranks_listed`].
    pub ranks: Vec<RankView>,
    /// Ranks left out of `ranks`.
    pub ranks_omitted: u32,
}

/// The name of a group in words.
pub fn group_name(group: u64, size: u32) -> String {
    if group == WORLD_GROUP {
        "group 0".into()
    } else {
        format!("group {group:x} ({size} ranks)")
    }
}

/// A duration in words: "850 ms", "1.2 s", "41 s".
pub fn ago(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 10_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{} s", ms / 1000)
    }
}

impl fmt::Display for HangReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "job {:?}: {}, round {}, {} ranks; {} in a call, {} in none",
            self.job, self.state, self.round, self.world, self.waiting, self.idle
        )?;
        if self.findings.is_empty() {
            writeln!(f, "nothing is stuck")?;
        }
        for x in &self.findings {
            writeln!(f, "* {}", x.words)?;
        }
        if !self.ranks.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "{:>6}  {:<24} {:<40} last completed",
                "rank", "member", "pending"
            )?;
        }
        for r in &self.ranks {
            let pending = match r.pending.first() {
                Some(p) => format!(
                    "{} seq {} {} ({})",
                    p.op,
                    p.seq,
                    group_name(p.group, p.group_size),
                    ago(p.age_ms)
                ),
                None if !r.summary => "(no summary)".into(),
                None => format!("none ({})", r.idle_ms.map(ago).unwrap_or_default()),
            };
            let last = r
                .completed(WORLD_GROUP)
                .or(r.groups.first())
                .map(|g| {
                    format!(
                        "{} seq {} ({} ago)",
                        g.completed_op,
                        g.completed_seq,
                        ago(g.completed_age_ms)
                    )
                })
                .unwrap_or_else(|| "-".into());
            let silent = if r.heartbeating {
                String::new()
            } else {
                format!("  [silent {}]", ago(r.silent_ms))
            };
            writeln!(
                f,
                "{:>6}  {:<24} {:<40} {last}{silent}",
                r.rank, r.member, pending
            )?;
        }
        if self.ranks_omitted > 0 {
            writeln!(
                f,
                "... and {} more ranks (--json for all findings)",
                self.ranks_omitted
            )?;
        }
        Ok(())
    }
}
