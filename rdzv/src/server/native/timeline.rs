//! Each job's recent history for the status page's picture (`GET /v1/jobs/{job}/timeline`):
//! every second the server samples, for each rank of each job's current round, the last
//! sequence number it completed in the world group (from the summary its heartbeats carry,
//! `dt_rdzv_proto::native::progress`), and keeps the last [`SAMPLES`] samples per job. Joins,
//! losses and rounds come from the journal when the timeline is asked for.
//!
//! Bounded whatever the jobs do: at most [`MAX_JOBS`] jobs are followed (the others are
//! answered as not followed until a followed job is forgotten), [`SAMPLES`] samples per job,
//! and a sample holds one value per rank only for rounds of at most [`MAX_RANK_LINES`] ranks.
//! Bigger rounds keep, per sample, the minimum, median and maximum over the ranks and the
//! [`LAGGARDS`] ranks furthest behind (silent first, then the lowest sequence number, a rank in
//! no call before one already waiting in the next), so that 1,000 ranks cost what 64 do.
//!
//! Sans-IO: the server's task (`RdzvCore::run_timeline`) feeds it each job's ranks and summaries
//! as the machine holds them (borrowed under the driver's read lock, nothing copied but a
//! rank and a pointer per member) and the time; it never reads a clock.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use dt_rdzv_proto::native::progress::WORLD_GROUP;
use dt_rdzv_proto::rendezvous::JobProgress;
use serde_json::{Value, json};

/// How often the server samples.
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);
/// Samples kept per job (five minutes at [`INTERVAL`]).
pub(crate) const SAMPLES: usize = 300;
/// Jobs followed at once.
pub(crate) const MAX_JOBS: usize = 32;
/// Largest round whose samples hold every rank's value; bigger rounds are summarised.
pub(crate) const MAX_RANK_LINES: usize = 64;
/// Ranks furthest behind kept per sample.
pub(crate) const LAGGARDS: usize = 4;
/// Most laggard ranks the JSON draws a line for (those behind most recently).
pub(crate) const MAX_LAGGARD_LINES: usize = 8;
/// Most journal marks (joins, losses, rounds) one answer carries (the latest).
pub(crate) const MAX_MARKS: usize = 200;

/// Where one rank stands in a sample: its last completed world-group sequence number (`None`:
/// no summary for this round), and whether it is in a world-group call now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    seq: Option<u64>,
    waiting: bool,
}

impl Place {
    /// Sort key, furthest behind first: silent, then the lowest sequence number, a rank in no
    /// call before one waiting in the next call.
    fn behind(&self) -> (bool, u64, bool) {
        (self.seq.is_some(), self.seq.unwrap_or(0), self.waiting)
    }
}

/// One sample of one job.
#[derive(Debug, Clone)]
struct Sample {
    at_ms: u64,
    round: u64,
    world: u32,
    /// Ranks with a summary for this round.
    reporting: u32,
    /// Minimum, median and maximum over those ranks.
    spread: Option<(u64, u64, u64)>,
    /// The ranks furthest behind, at most [`LAGGARDS`].
    laggards: Vec<(u32, Place)>,
    /// Every rank's place, index = rank, for rounds of at most [`MAX_RANK_LINES`] ranks.
    ranks: Option<Vec<Place>>,
}

impl Sample {
    fn of(at_ms: u64, j: &JobProgress<'_>) -> Sample {
        let world = j.world as usize;
        let mut places: Vec<(u32, Place)> = j
            .ranks
            .iter()
            .filter(|(rank, _)| (*rank as usize) < world)
            .map(|&(rank, progress)| {
                let p = progress.filter(|p| p.round == j.round);
                let seq = p.map(|p| {
                    p.groups
                        .iter()
                        .find(|g| g.group == WORLD_GROUP)
                        .map_or(0, |g| g.completed_seq)
                });
                let waiting = p.is_some_and(|p| p.pending.iter().any(|c| c.group == WORLD_GROUP));
                (rank, Place { seq, waiting })
            })
            .collect();
        places.sort_by_key(|(r, _)| *r);
        places.dedup_by_key(|(r, _)| *r);
        places.sort_by_key(|(r, p)| (p.behind(), *r));
        let mut seqs: Vec<u64> = places.iter().filter_map(|(_, p)| p.seq).collect();
        seqs.sort_unstable();
        let spread =
            (!seqs.is_empty()).then(|| (seqs[0], seqs[(seqs.len() - 1) / 2], seqs[seqs.len() - 1]));
        let ranks = (world <= MAX_RANK_LINES).then(|| {
            let mut v = vec![
                Place {
                    seq: None,
                    waiting: false
                };
                world
            ];
            for (r, p) in &places {
                v[*r as usize] = *p;
            }
            v
        });
        Sample {
            at_ms,
            round: j.round,
            world: j.world,
            reporting: seqs.len() as u32,
            spread,
            laggards: places.into_iter().take(LAGGARDS).collect(),
            ranks,
        }
    }
}

/// One followed job's samples.
#[derive(Debug, Default)]
struct Line {
    samples: VecDeque<Sample>,
}

/// Every followed job's timeline. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Timelines {
    jobs: HashMap<String, Line>,
    /// Jobs seen in the last sample that are not followed (over [`MAX_JOBS`]).
    unfollowed: usize,
}

impl Timelines {
    /// Takes one sample at `at_ms` (Unix ms) of `jobs` (every job's ranks and summaries,
    /// borrowed from the machine): jobs the machine forgot are dropped, new ones followed
    /// while there is room.
    pub(crate) fn sample(&mut self, at_ms: u64, jobs: &[JobProgress<'_>]) {
        let known: HashSet<&str> = jobs.iter().map(|j| j.job).collect();
        self.jobs.retain(|name, _| known.contains(name.as_str()));
        self.unfollowed = 0;
        for j in jobs {
            if !self.jobs.contains_key(j.job) && self.jobs.len() >= MAX_JOBS {
                self.unfollowed += 1;
                continue;
            }
            let line = self.jobs.entry(j.job.to_string()).or_default();
            if line.samples.len() == SAMPLES {
                line.samples.pop_front();
            }
            line.samples.push_back(Sample::of(at_ms, j));
        }
    }

    /// Jobs followed now.
    #[cfg(test)]
    pub(crate) fn followed(&self) -> usize {
        self.jobs.len()
    }

    /// `job`'s timeline as JSON (the job is known to the machine: the caller checked), with
    /// `marks` (journal entries of the job, oldest first) cut to the latest [`MAX_MARKS`].
    /// With `since_ms`, only the samples taken after it (a page that holds the earlier ones
    /// asks for what is new: a few hundred bytes a second instead of the whole window); the
    /// ranks' `idle_since_ms` and the laggards chosen still look at the whole window.
    pub(crate) fn json(
        &self,
        job: &str,
        now_ms: u64,
        mut marks: Vec<Value>,
        since_ms: Option<u64>,
    ) -> Value {
        if marks.len() > MAX_MARKS {
            marks.drain(..marks.len() - MAX_MARKS);
        }
        let limits = json!({
            "samples": SAMPLES,
            "jobs": MAX_JOBS,
            "rank_lines": MAX_RANK_LINES,
            "laggards_per_sample": LAGGARDS,
            "laggard_lines": MAX_LAGGARD_LINES,
            "marks": MAX_MARKS,
        });
        let mut v = json!({
            "job": job,
            "now_ms": now_ms,
            "interval_seconds": INTERVAL.as_secs_f64(),
            "window_seconds": (INTERVAL * SAMPLES as u32).as_secs_f64(),
            "limits": limits,
            "marks": marks,
            "since_ms": since_ms,
        });
        let Some(line) = self.jobs.get(job) else {
            v["followed"] = false.into();
            v["why"] = format!(
                "the server follows at most {MAX_JOBS} jobs at once; this one is not followed \
                 until one of them is forgotten"
            )
            .into();
            return v;
        };
        let s = &line.samples;
        // Samples are in time order: the new ones are a suffix.
        let from = since_ms.map_or(0, |t| s.iter().take_while(|x| x.at_ms <= t).count());
        let new = || s.range(from..);
        v["followed"] = true.into();
        v["times_ms"] = new().map(|x| x.at_ms).collect::<Vec<_>>().into();
        v["rounds"] = new().map(|x| x.round).collect::<Vec<_>>().into();
        v["world"] = new().map(|x| x.world).collect::<Vec<_>>().into();
        v["summary"] = json!({
            "reporting": new().map(|x| x.reporting).collect::<Vec<_>>(),
            "min": new().map(|x| x.spread.map(|p| p.0)).collect::<Vec<_>>(),
            "median": new().map(|x| x.spread.map(|p| p.1)).collect::<Vec<_>>(),
            "max": new().map(|x| x.spread.map(|p| p.2)).collect::<Vec<_>>(),
        });
        if s.iter().all(|x| x.ranks.is_some()) {
            let width = s.iter().map(|x| x.world as usize).max().unwrap_or(0);
            v["mode"] = "ranks".into();
            v["ranks"] = (0..width)
                .map(|r| rank_json(r as u32, s, from, |x| x.ranks.as_ref()?.get(r).copied()))
                .collect::<Vec<_>>()
                .into();
        } else {
            v["mode"] = "summary".into();
            // The ranks behind most recently, each with its value where it was among them.
            let mut chosen: Vec<u32> = Vec::new();
            for x in s.iter().rev() {
                for (r, _) in &x.laggards {
                    if chosen.len() < MAX_LAGGARD_LINES && !chosen.contains(r) {
                        chosen.push(*r);
                    }
                }
            }
            chosen.sort_unstable();
            v["laggards"] = chosen
                .iter()
                .map(|&r| {
                    rank_json(r, s, from, |x| {
                        x.laggards.iter().find(|(l, _)| *l == r).map(|(_, p)| *p)
                    })
                })
                .collect::<Vec<_>>()
                .into();
        }
        v
    }
}

/// One rank's line: its sequence number per sample from sample `from` on (`null` where
/// unknown), and since when (Unix ms, the first of the last samples of the whole window) it has
/// been in no world-group call (`null`: in one at the last sample, or not known).
fn rank_json(
    rank: u32,
    s: &VecDeque<Sample>,
    from: usize,
    at: impl Fn(&Sample) -> Option<Place>,
) -> Value {
    let places: Vec<Option<Place>> = s.iter().map(at).collect();
    let idle = |p: &Option<Place>| p.is_some_and(|p| p.seq.is_some() && !p.waiting);
    let run = places.iter().rev().take_while(|p| idle(p)).count();
    json!({
        "rank": rank,
        "seq": places[from..].iter().map(|p| p.and_then(|p| p.seq)).collect::<Vec<_>>(),
        "idle_since_ms": (run > 0).then(|| s[s.len() - run].at_ms),
    })
}

#[cfg(test)]
mod tests;
