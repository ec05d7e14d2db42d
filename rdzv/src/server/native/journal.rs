//! The recent events of the rendezvous (joins, rounds, losses with their cause, reports,
//! stops), numbered and timed, for the status page and `GET /v1/events`. Bounded: the oldest
//! entries go first.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use dt_rdzv_proto::rendezvous::{Event, ReportVerdict};
use serde_json::{Value, json};

/// Entries kept.
pub(crate) const CAPACITY: usize = 2048;
/// Most entries one request returns.
pub(crate) const PAGE: usize = 500;

/// One event.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) seq: u64,
    /// Unix time, milliseconds.
    pub(crate) at_ms: u64,
    pub(crate) job: String,
    pub(crate) kind: &'static str,
    pub(crate) member: Option<String>,
    pub(crate) rank: Option<u32>,
    pub(crate) round: Option<u64>,
    pub(crate) text: String,
}

impl Entry {
    pub(crate) fn json(&self) -> Value {
        json!({
            "seq": self.seq,
            "time_ms": self.at_ms,
            "job": self.job,
            "kind": self.kind,
            "member": self.member,
            "rank": self.rank,
            "round": self.round,
            "text": self.text,
        })
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    next: u64,
    entries: VecDeque<Entry>,
}

/// Unix time now, milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Journal {
    /// Notes `e` if it is worth showing (not refusals, forgotten jobs, or reports that changed
    /// nothing).
    pub(crate) fn record(&mut self, e: &Event) {
        let mut entry = |job: &str,
                         kind: &'static str,
                         member: Option<&str>,
                         rank: Option<u32>,
                         round: Option<u64>,
                         text: String| {
            self.next += 1;
            if self.entries.len() == CAPACITY {
                self.entries.pop_front();
            }
            self.entries.push_back(Entry {
                seq: self.next,
                at_ms: now_ms(),
                job: job.into(),
                kind,
                member: member.map(Into::into),
                rank,
                round,
                text,
            });
        };
        match e {
            Event::JobCreated { job } => {
                entry(job, "job_created", None, None, None, "job created".into())
            }
            Event::Joined {
                job,
                member,
                node,
                spare,
            } => entry(
                job,
                "joined",
                Some(member),
                None,
                None,
                format!(
                    "{member} joined from {node}{}",
                    if *spare { " as a spare" } else { "" }
                ),
            ),
            Event::RoundComplete {
                job,
                round,
                world,
                cause,
                formed_in,
            } => entry(
                job,
                "round",
                None,
                None,
                Some(*round),
                format!("round {round} holds {world} members ({cause}; formed in {formed_in:.1?})"),
            ),
            Event::RoundEnded { job, round, cause } => entry(
                job,
                "round_ended",
                None,
                None,
                Some(*round),
                format!("round {round} ended: {cause}"),
            ),
            Event::MemberLost {
                job,
                member,
                rank,
                why,
            } => entry(
                job,
                "lost",
                Some(member),
                *rank,
                None,
                format!("{member} lost: {why}"),
            ),
            Event::NodeAgent { job, node, .. } => entry(
                job,
                "node_agent",
                None,
                None,
                None,
                format!("node agent of {node} connected"),
            ),
            Event::NodeLost {
                job,
                node,
                ranks,
                why,
            } => entry(
                job,
                "node_lost",
                None,
                None,
                None,
                format!("node {node} lost with its {ranks} ranks: {why}"),
            ),
            Event::MemberLeft { job, member } => entry(
                job,
                "left",
                Some(member),
                None,
                None,
                format!("{member} left"),
            ),
            Event::JobEnded { job, end } => entry(
                job,
                "job_ended",
                None,
                None,
                None,
                format!("job ended: {end}"),
            ),
            Event::Reported {
                job,
                round,
                by,
                rank,
                member,
                evidence,
                verdict,
            } => {
                let what = match verdict {
                    ReportVerdict::Probing => "reported gone; probing it",
                    ReportVerdict::Confirmed => "did not answer the probe: declared lost",
                    ReportVerdict::Dismissed => "answered the probe: stays",
                    _ => return,
                };
                let who = member.as_deref().unwrap_or("?");
                entry(
                    job,
                    "report",
                    member.as_deref(),
                    Some(*rank),
                    Some(*round),
                    format!("rank {rank} ({who}) {what} (report by {by}: {evidence})"),
                )
            }
            Event::JobForgotten { .. } | Event::Refused { .. } => {}
        }
    }

    /// Entries after `since` (of `job`, or all), at most [`PAGE`], and the number to ask from
    /// next.
    pub(crate) fn since(&self, since: u64, job: Option<&str>) -> (Vec<&Entry>, u64) {
        let out: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| e.seq > since && job.is_none_or(|j| e.job == j))
            .take(PAGE)
            .collect();
        let next = out
            .last()
            .map_or(since.max(self.first_seq().saturating_sub(1)), |e| e.seq);
        (out, next)
    }

    fn first_seq(&self) -> u64 {
        self.entries.front().map_or(self.next + 1, |e| e.seq)
    }

    /// `job`'s entries from `after_ms` (Unix ms) on, oldest first, at most `max` (the latest).
    pub(crate) fn recent(&self, job: &str, after_ms: u64, max: usize) -> Vec<&Entry> {
        let mut out: Vec<&Entry> = self
            .entries
            .iter()
            .rev()
            .take_while(|e| e.at_ms >= after_ms)
            .filter(|e| e.job == job)
            .take(max)
            .collect();
        out.reverse();
        out
    }

    /// When `member` of `job` was last lost or left (Unix ms), and how, if the journal still
    /// knows.
    pub(crate) fn gone(&self, job: &str, member: &str) -> Option<(u64, &str)> {
        self.entries
            .iter()
            .rev()
            .find(|e| {
                e.job == job
                    && e.member.as_deref() == Some(member)
                    && matches!(e.kind, "lost" | "left")
            })
            .map(|e| (e.at_ms, e.text.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_paged_and_filtered_by_job() {
        let mut j = Journal::default();
        for i in 0..(CAPACITY + 10) {
            j.record(&Event::JobCreated {
                job: format!("j{}", i % 2),
            });
        }
        assert_eq!(j.entries.len(), CAPACITY);
        let (page, next) = j.since(0, None);
        assert_eq!(page.len(), PAGE);
        assert_eq!(page[0].seq, 11, "the oldest ten were dropped");
        assert_eq!(next, page.last().unwrap().seq);
        let (mine, _) = j.since(0, Some("j1"));
        assert!(mine.iter().all(|e| e.job == "j1"));
        let (none, next) = j.since(u64::MAX - 1, None);
        assert!(none.is_empty() && next == u64::MAX - 1);
        j.record(&Event::MemberLost {
            job: "j0".into(),
            member: "m".into(),
            rank: Some(1),
            why: "silent".into(),
        });
        assert_eq!(j.gone("j0", "m").map(|g| g.1), Some("m lost: silent"));
        assert!(j.gone("j1", "m").is_none());
        let recent = j.recent("j0", 0, 3);
        assert_eq!(recent.len(), 3);
        assert_eq!(recent[2].kind, "lost", "the latest, oldest first");
        assert!(j.recent("j0", u64::MAX, 3).is_empty());
    }
}
