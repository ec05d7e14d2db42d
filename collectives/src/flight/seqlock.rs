//! A sequence lock over a few words: writers take it with one compare-and-swap (so two
//! writers never interleave, even on a ring slot reused while an old call still updates it),
//! or, where one writer at a time is certain (a thread's own ring, a communicator's counts
//! under its state lock), with plain stores ([`SeqCell::write_alone`]: no read-modify-write,
//! nothing but `mov`s on x86-64). Readers take no lock and copy the words, retrying when a
//! write went on meanwhile. A reader never returns a torn copy.

use std::sync::atomic::{AtomicU64, Ordering, fence};

/// Reads that keep meeting a write give up after this many tries (a writer preempted
/// mid-write must not hang a heartbeat or a dump).
const READ_TRIES: u32 = 1000;

/// `N` words under a sequence lock.
#[derive(Debug)]
pub(crate) struct SeqCell<const N: usize> {
    /// Even: stable; odd: being written.
    ver: AtomicU64,
    words: [AtomicU64; N],
}

impl<const N: usize> Default for SeqCell<N> {
    fn default() -> Self {
        SeqCell {
            ver: AtomicU64::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// A write in progress: the words, and the lock released when it is dropped.
pub(crate) struct Write<'a, const N: usize> {
    cell: &'a SeqCell<N>,
    odd: u64,
}

impl<const N: usize> Write<'_, N> {
    /// Word `i` as it is.
    pub(crate) fn get(&self, i: usize) -> u64 {
        self.cell.words[i].load(Ordering::Relaxed)
    }
    /// Sets word `i`.
    pub(crate) fn set(&self, i: usize, v: u64) {
        self.cell.words[i].store(v, Ordering::Relaxed);
    }
}

impl<const N: usize> Drop for Write<'_, N> {
    fn drop(&mut self) {
        self.cell
            .ver
            .store(self.odd.wrapping_add(1), Ordering::Release);
    }
}

impl<const N: usize> SeqCell<N> {
    /// Takes the lock for writing (one compare-and-swap when no other writer holds it).
    pub(crate) fn write(&self) -> Write<'_, N> {
        let mut spins = 0u32;
        loop {
            let v = self.ver.load(Ordering::Relaxed);
            if v & 1 == 0
                && self
                    .ver
                    .compare_exchange_weak(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // The odd version is seen before any word written after it.
                fence(Ordering::Release);
                return Write {
                    cell: self,
                    odd: v + 1,
                };
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Takes the lock for writing where no other writer can be at it: the caller is the one
    /// writer of this cell (its thread owns it, or it holds the lock that every writer
    /// holds). Plain stores: the odd version, a release fence (ordering it before the words'
    /// stores, for readers that see those), the words, the even version. Two writers at once
    /// would let a reader see a torn copy (never memory unsafety: every word is atomic).
    #[inline]
    pub(crate) fn write_alone(&self) -> Write<'_, N> {
        // Odd while written; a version left odd (a write never finished) stays odd.
        let odd = self.ver.load(Ordering::Relaxed) | 1;
        self.ver.store(odd, Ordering::Relaxed);
        fence(Ordering::Release);
        Write { cell: self, odd }
    }

    /// A consistent copy of the words (`None` when writes kept coming: a writer preempted
    /// mid-write).
    pub(crate) fn read(&self) -> Option<[u64; N]> {
        for i in 0..READ_TRIES {
            let v1 = self.ver.load(Ordering::Acquire);
            if v1 & 1 == 0 {
                let copy: [u64; N] = std::array::from_fn(|k| self.words[k].load(Ordering::Relaxed));
                fence(Ordering::Acquire);
                if self.ver.load(Ordering::Relaxed) == v1 {
                    return Some(copy);
                }
            }
            if i % 16 == 15 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `writers` threads write numbers of their own into every word of `cell` with `write`
    /// while this thread reads it: every copy read has all words equal.
    fn readers_never_see_torn(
        cell: &SeqCell<8>,
        writers: u64,
        write: impl Fn(&SeqCell<8>, u64) + Sync,
    ) {
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for t in 0..writers {
                let (stop, write) = (&stop, &write);
                s.spawn(move || {
                    let mut n = t;
                    while !stop.load(Ordering::Relaxed) {
                        write(cell, n);
                        n += writers;
                    }
                });
            }
            let mut seen = 0;
            let start = std::time::Instant::now();
            while seen < 20_000 && start.elapsed() < std::time::Duration::from_secs(5) {
                if let Some(c) = cell.read() {
                    assert!(c.iter().all(|w| *w == c[0]), "torn: {c:?}");
                    seen += 1;
                }
            }
            stop.store(true, Ordering::Relaxed);
            assert!(seen > 0);
        });
    }

    #[test]
    fn readers_never_see_a_torn_copy() {
        // Every write sets all words to one value; a reader sees them all equal.
        readers_never_see_torn(&SeqCell::default(), 3, |c, n| {
            let w = c.write();
            for i in 0..8 {
                w.set(i, n);
            }
        });
    }

    #[test]
    fn a_lone_writer_is_never_seen_torn() {
        let cell = SeqCell::<8>::default();
        readers_never_see_torn(&cell, 1, |c, n| {
            let w = c.write_alone();
            for i in 0..8 {
                w.set(i, n);
            }
        });
        assert_eq!(cell.ver.load(Ordering::Relaxed) & 1, 0);
    }
}
