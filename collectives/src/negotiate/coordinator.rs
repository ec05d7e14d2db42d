//! [`Coordinator`]: the table of pending names of one process set.

use std::collections::BTreeMap;

use super::fuse::fuse;
use super::request::{Kind, Request, Response};
use super::validate::check;

/// A rank submitted a name it already has pending (Horovod raises `ValueError` at submission).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "rank {rank}: an operation named {name:?} is already pending (names must be unique until the operation completes)"
)]
pub struct Duplicate {
    /// The rank.
    pub rank: u32,
    /// The name.
    pub name: String,
}

#[derive(Debug)]
struct Entry {
    /// Rank `r`'s request, once submitted.
    requests: Vec<Option<Request>>,
    /// Arrival order of the name's first request (the order ready names run in).
    seq: u64,
    /// The cycle the name first arrived in.
    first_cycle: u64,
}

/// Pending names of a process set of `size` ranks, and what becomes ready each cycle.
#[derive(Debug)]
pub struct Coordinator {
    size: u32,
    threshold: u64,
    pending: BTreeMap<String, Entry>,
    next_seq: u64,
    /// Cycles run so far.
    cycles: u64,
    /// A name some ranks never submit fails after this many cycles (`None`: never).
    stall_cycles: Option<u64>,
    /// Ranks that have joined (in the order their joins arrived) and wait for the others.
    joined: Vec<u32>,
}

impl Coordinator {
    /// A coordinator for `size` ranks fusing allreduces up to `threshold` bytes (0: none).
    pub fn new(size: u32, threshold: u64) -> Self {
        assert!(size > 0, "a process set has at least one rank");
        Self {
            size,
            threshold,
            pending: BTreeMap::new(),
            next_seq: 0,
            cycles: 0,
            stall_cycles: None,
            joined: Vec::new(),
        }
    }

    /// Fails a name that some ranks have not submitted after `cycles` cycles, on every rank
    /// (cycles, not time: every rank counts the same cycles, so all decide alike).
    pub fn with_stall_cycles(mut self, cycles: u64) -> Self {
        self.stall_cycles = Some(cycles.max(1));
        self
    }

    /// Names pending (submitted by some ranks, not yet answered).
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The ranks that have not submitted `name` yet (for stall reports).
    pub fn missing(&self, name: &str) -> Vec<u32> {
        self.pending.get(name).map_or_else(Vec::new, |e| {
            (0..self.size)
                .filter(|r| e.requests[*r as usize].is_none())
                .collect()
        })
    }

    /// Errors for the names pending past the stall limit (removed from the table).
    fn stalled(&mut self) -> Vec<Response> {
        let Some(limit) = self.stall_cycles else {
            return Vec::new();
        };
        let now = self.cycles;
        let old: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, e)| now - e.first_cycle >= limit && e.requests.iter().any(Option::is_none))
            .map(|(n, _)| n.clone())
            .collect();
        old.into_iter()
            .map(|name| {
                let missing = self.missing(&name);
                let e = self.pending.remove(&name).expect("pending");
                let have: Vec<usize> = (0..e.requests.len())
                    .filter(|r| e.requests[*r].is_some())
                    .collect();
                // A join that failed leaves its ranks unjoined: they go on as members, and
                // must not stand in for the others' later operations (barriers, allreduces).
                if e.requests.iter().flatten().any(|q| q.kind == Kind::Join) {
                    self.joined.clear();
                }
                Response::Error {
                    message: format!(
                        "{name}: ranks {missing:?} did not submit it within {limit} negotiation \
                         cycles (the deadline); ranks {have:?} did"
                    ),
                    name,
                }
            })
            .collect()
    }

    /// Rank `rank` submits `request`. A name it already has pending is refused.
    pub fn submit(&mut self, rank: u32, request: Request) -> Result<(), Duplicate> {
        assert!(
            rank < self.size,
            "rank {rank} outside a set of {}",
            self.size
        );
        let seq = &mut self.next_seq;
        let size = self.size as usize;
        let first_cycle = self.cycles;
        let entry = self.pending.entry(request.name.clone()).or_insert_with(|| {
            *seq += 1;
            Entry {
                requests: vec![None; size],
                seq: *seq,
                first_cycle,
            }
        });
        let slot = &mut entry.requests[rank as usize];
        if slot.is_some() {
            return Err(Duplicate {
                rank,
                name: request.name,
            });
        }
        if request.kind == Kind::Join {
            self.joined.push(rank);
        }
        *slot = Some(request);
        Ok(())
    }

    /// One cycle: every name that all ranks have submitted is answered, in the order the
    /// names first arrived: errors for names whose requests disagree, and the others fused.
    pub fn cycle(&mut self) -> Vec<Response> {
        self.cycle_by(1)
    }

    /// A cycle that started before the cycle time was up (a caller waiting for its operations
    /// woke it): answers what is ready, as [`Coordinator::cycle`], but does not count toward
    /// the stall deadline, which stays at least the cycle time × the stall cycles.
    pub fn early_cycle(&mut self) -> Vec<Response> {
        self.cycle_by(0)
    }

    /// A cycle that counts as `n` toward the stall deadline: the driver charges a cycle by the
    /// cycle times it lasted, so slow cycles (100k pending names) do not stretch the deadline
    /// past the time it stands for. Every rank must charge the same `n`.
    pub fn cycle_by(&mut self, n: u64) -> Vec<Response> {
        self.cycles += n;
        let out = if n > 0 { self.stalled() } else { Vec::new() };
        self.answer(out)
    }

    fn answer(&mut self, mut out: Vec<Response>) -> Vec<Response> {
        let joined = &self.joined;
        // Ready: every rank submitted it, or every rank that has not joined did (a joined rank
        // takes part in allreduces with zeros and in barriers; other kinds fail below).
        let mut ready: Vec<(u64, String)> = self
            .pending
            .iter()
            .filter(|(_, e)| {
                e.requests
                    .iter()
                    .enumerate()
                    .all(|(r, q)| q.is_some() || joined.contains(&(r as u32)))
            })
            .map(|(name, e)| (e.seq, name.clone()))
            .collect();
        ready.sort();
        let entries: Vec<Entry> = ready
            .iter()
            .map(|(_, name)| self.pending.remove(name).expect("ready"))
            .collect();
        let mut good: Vec<&Request> = Vec::new();
        let mut gathers: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for e in &entries {
            let reqs: Vec<&Request> = e.requests.iter().flatten().collect();
            let absent: Vec<usize> = (0..e.requests.len())
                .filter(|r| e.requests[*r].is_none())
                .collect();
            if reqs[0].kind == Kind::Join {
                // Every rank has joined: all learn which joined last.
                out.push(Response::Run {
                    kind: Kind::Join,
                    names: vec![reqs[0].name.clone()],
                    bytes: 0,
                    elements: vec![u64::from(*self.joined.last().expect("joined"))],
                    head: None,
                });
                self.joined.clear();
                continue;
            }
            if !absent.is_empty() && !matches!(reqs[0].kind, Kind::Allreduce | Kind::Barrier) {
                out.push(Response::Error {
                    name: reqs[0].name.clone(),
                    message: format!(
                        "{}: ranks {absent:?} have joined (hvd.join) and cannot take part in a {}",
                        reqs[0].name,
                        reqs[0].kind.name()
                    ),
                });
                continue;
            }
            match check(&reqs) {
                Ok(()) => {
                    if reqs[0].kind == Kind::Allgather {
                        gathers.insert(&reqs[0].name, reqs.iter().map(|r| r.elements()).collect());
                    }
                    if reqs[0].kind == Kind::Alltoall {
                        gathers.insert(&reqs[0].name, alltoall_matrix(&reqs));
                    }
                    good.push(reqs[0])
                }
                Err(message) => {
                    // Errors go out first, then the runs: a run never waits on an error.
                    out.push(Response::Error {
                        name: reqs[0].name.clone(),
                        message,
                    });
                }
            }
        }
        let mut runs = fuse(&good, self.threshold);
        for r in &mut runs {
            if let Response::Run {
                kind: Kind::Allgather | Kind::Alltoall,
                names,
                elements,
                ..
            } = r
            {
                *elements = gathers.remove(names[0].as_str()).unwrap_or_default();
            }
        }
        out.extend(runs);
        out
    }
}

/// Element counts rank `r` sends rank `p`, at `[r * world + p]` (an empty split is an equal
/// one).
fn alltoall_matrix(reqs: &[&Request]) -> Vec<u64> {
    let world = reqs.len() as u64;
    let mut m = Vec::with_capacity(reqs.len() * reqs.len());
    for r in reqs {
        let row = r.row_elements();
        if r.splits.is_empty() {
            let each = r.shape.first().copied().unwrap_or(0) / world.max(1);
            m.extend(std::iter::repeat_n(each * row, reqs.len()));
        } else {
            m.extend(r.splits.iter().map(|s| s * row));
        }
    }
    m
}
