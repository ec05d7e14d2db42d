//! Pure schedules: what each rank sends, receives and reduces, step by step, computed from
//! (rank, world, counts) with no IO. The [engine](crate::engine) runs them over a transport.
//!
//! A step's local operations run first; then its sends and receives run concurrently, and the
//! step ends when all of them are done. Regions are in elements. Within a step no receive
//! writes a region that a send of the same step reads, so the engine may stream both.

pub(crate) mod direct;
pub(crate) mod doubling;
pub(crate) mod ring;
pub(crate) mod tree;

/// Which buffer a region lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Buf {
    /// The call's output buffer (in place: also its input).
    Work,
    /// The call's separate, read-only input (out-of-place calls).
    Input,
    /// Engine-owned scratch of `Schedule::scratch` elements.
    Scratch,
}

/// `len` elements at `off` in `buf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub buf: Buf,
    pub off: usize,
    pub len: usize,
}

impl Region {
    pub(crate) const fn work(off: usize, len: usize) -> Region {
        Region {
            buf: Buf::Work,
            off,
            len,
        }
    }
    pub(crate) const fn input(off: usize, len: usize) -> Region {
        Region {
            buf: Buf::Input,
            off,
            len,
        }
    }
    pub(crate) const fn scratch(off: usize, len: usize) -> Region {
        Region {
            buf: Buf::Scratch,
            off,
            len,
        }
    }
    #[cfg(test)]
    pub(crate) fn overlaps(&self, o: &Region) -> bool {
        self.buf == o.buf && self.off < o.off + o.len && o.off < self.off + self.len
    }
}

/// Send `src` to `peer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SendOp {
    pub peer: usize,
    pub src: Region,
}

/// Receive into `dst` from `peer`: copy, or combine with what `dst` holds, or (with `with`)
/// store the combination of the received data and `with` into `dst`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecvOp {
    pub peer: usize,
    pub dst: Region,
    pub reduce: bool,
    pub with: Option<Region>,
}

/// A local copy or combine of `src` into `dst` (equal lengths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalOp {
    pub src: Region,
    pub dst: Region,
    pub reduce: bool,
}

/// One step of one rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Step {
    pub locals: Vec<LocalOp>,
    pub sends: Vec<SendOp>,
    pub recvs: Vec<RecvOp>,
}

/// The steps of one rank for one call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub steps: Vec<Step>,
    /// Scratch elements the engine must provide.
    pub scratch: usize,
}

impl Schedule {
    pub(crate) fn push(&mut self, step: Step) {
        self.steps.push(step);
    }

    /// The same schedule for a subgroup: `ranks[i]` is the rank that sub-rank `i` is.
    pub(crate) fn remap(mut self, ranks: &[usize]) -> Schedule {
        for step in &mut self.steps {
            for s in &mut step.sends {
                s.peer = ranks[s.peer];
            }
            for r in &mut step.recvs {
                r.peer = ranks[r.peer];
            }
        }
        self
    }

    /// Ranks this schedule ever receives from (for the "not heard from" lists).
    #[cfg(test)]
    pub(crate) fn peers(&self) -> Vec<usize> {
        let mut p: Vec<usize> = self
            .steps
            .iter()
            .flat_map(|s| {
                s.sends
                    .iter()
                    .map(|o| o.peer)
                    .chain(s.recvs.iter().map(|o| o.peer))
            })
            .collect();
        p.sort_unstable();
        p.dedup();
        p
    }
}

/// Splits `count` into `parts` contiguous blocks, the first `count % parts` one longer.
/// Returns (offset, len) per block.
pub(crate) fn partition(count: usize, parts: usize) -> Vec<(usize, usize)> {
    let base = count / parts;
    let extra = count % parts;
    let mut off = 0;
    (0..parts)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let b = (off, len);
            off += len;
            b
        })
        .collect()
}

/// Offsets of consecutive blocks of the given lengths.
pub(crate) fn blocks(counts: &[usize]) -> Vec<(usize, usize)> {
    let mut off = 0;
    counts
        .iter()
        .map(|&len| {
            let b = (off, len);
            off += len;
            b
        })
        .collect()
}

/// `(a - b) mod n` for ranks.
pub(crate) fn sub_mod(a: usize, b: usize, n: usize) -> usize {
    (a + n - (b % n)) % n
}

#[cfg(test)]
pub(crate) mod simulate;
