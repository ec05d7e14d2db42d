//! The slots of a ring: a power of two of them, each a sequence lock over one call's words
//! (`entry.rs`), allocated as calls reach them in chunks that double from [`FIRST`] slots (a
//! ring that holds a few calls costs a few KB, one that holds many wastes nothing: the last
//! chunk is cut to the ring's size). Finding a slot is a mask, a division by [`FIRST`] and a
//! count of leading zeros.

use std::sync::OnceLock;

use super::entry::WORDS;
use super::seqlock::SeqCell;

/// Slots of the first chunk; chunk `k` has `FIRST << k`.
const FIRST: usize = 16;

/// A ring's slots.
#[derive(Debug)]
pub(crate) struct Slots {
    /// Slots - 1.
    mask: u64,
    chunks: Box<[OnceLock<Box<[SeqCell<WORDS>]>>]>,
}

/// Chunk `k`'s first slot.
fn chunk_start(k: usize) -> usize {
    FIRST * ((1 << k) - 1)
}

/// The chunk of slot `i`, and `i`'s place in it.
fn locate(i: usize) -> (usize, usize) {
    let k = (usize::BITS - 1 - (i / FIRST + 1).leading_zeros()) as usize;
    (k, i - chunk_start(k))
}

impl Slots {
    /// Room for `cap` calls (`cap > 0`), rounded up to a power of two; no memory yet.
    pub(crate) fn new(cap: usize) -> Slots {
        assert!(cap > 0, "a ring has at least one slot");
        let n = cap.next_power_of_two();
        Slots {
            mask: n as u64 - 1,
            chunks: (0..=locate(n - 1).0).map(|_| OnceLock::new()).collect(),
        }
    }

    /// How many slots (a power of two).
    pub(crate) fn len(&self) -> u64 {
        self.mask + 1
    }

    /// The slot of the call numbered `n` in its ring (`n mod len`).
    #[inline]
    pub(crate) fn cell(&self, n: u64) -> &SeqCell<WORDS> {
        let (k, at) = locate((n & self.mask) as usize);
        let chunk = self.chunks[k].get_or_init(|| {
            let start = chunk_start(k);
            let size = (FIRST << k).min(self.len() as usize - start);
            (0..size).map(|_| SeqCell::default()).collect()
        });
        &chunk[at]
    }

    /// Slots allocated so far.
    #[cfg(test)]
    fn allocated(&self) -> usize {
        self.chunks
            .iter()
            .filter_map(OnceLock::get)
            .map(|c| c.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_double_and_cover_every_slot_once() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(15), (0, 15));
        assert_eq!(locate(16), (1, 0));
        assert_eq!(locate(47), (1, 31));
        assert_eq!(locate(48), (2, 0));
        for cap in [1, 3, 16, 17, 2000, 4096] {
            let s = Slots::new(cap);
            let n = s.len();
            assert_eq!(n, cap.next_power_of_two() as u64);
            let mut seen = std::collections::HashSet::new();
            for i in 0..n {
                assert!(seen.insert(s.cell(i) as *const _ as usize));
                // The ring wraps: call `i + len` shares call `i`'s slot.
                assert!(std::ptr::eq(s.cell(i), s.cell(i + n)));
            }
            assert_eq!(s.allocated() as u64, n, "no slot past the ring's size");
        }
        let s = Slots::new(2000);
        s.cell(3);
        assert_eq!(s.allocated(), FIRST, "memory comes as calls reach it");
    }
}
