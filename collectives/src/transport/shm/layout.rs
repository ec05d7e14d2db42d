//! Where things live in a host's segment (pure arithmetic; see `group.rs` for the protocol).
//!
//! ```text
//! 0            header page: magic, layout version, ranks, chunk bytes, stride
//! PAGE + i*S   slot of local rank i (S = stride):
//!   +0           posted: u32 futex word (steps this rank has published), own cache line
//!   +64          waiters: u32 (peers asleep on `posted`), pid: u32, closed: u32,
//!                the call's input and output addresses (u64 each),
//!                bell: u32 (rung by pipe peers), bell waiters: u32, aborted: u32,
//!                reason length: u32
//!   +128         call headers: 2 × 32 bytes (op, dtype, count, seq), one per buffer parity
//!   +256         the failed rank's own error, UTF-8, at most 1024 bytes
//!   +PAGE        buffer 0 (chunk bytes), then buffer 1
//! PAGE + n*S + k*P   pipe k (P = PAGE + PIPE), one per ordered pair (from, to), from ≠ to:
//!   +0           head: u64, bytes the writer has written (own cache line)
//!   +64          tail: u64, bytes the reader has consumed
//!   +PAGE        the ring, PIPE bytes
//! ```
//!
//! Every rank writes only its own slot (the creator also writes the header, before anyone
//! attaches); buffers alternate by epoch so a rank may fill one while its peers still read the
//! other. A pipe's head and ring are written by its `from` rank only, its tail by its `to` rank.

/// Page size the layout aligns to.
pub(crate) const PAGE: usize = 4096;
/// `dtcommSH`: the first eight bytes of every segment.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"dtcommSH");
/// Bumped whenever the layout or the protocol changes; a peer with another version is refused.
pub(crate) const VERSION: u32 = 4;
/// Bytes of each pipe's ring.
pub(crate) const PIPE: usize = 256 << 10;

/// Header field offsets.
pub(crate) mod hdr {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const RANKS: usize = 12;
    pub const CHUNK: usize = 16;
    pub const STRIDE: usize = 24;
}

/// Slot field offsets.
pub(crate) mod slot {
    pub const POSTED: usize = 0;
    pub const WAITERS: usize = 64;
    pub const PID: usize = 68;
    /// u32: 1 once the rank closed its communicator (its goodbye).
    pub const CLOSED: usize = 72;
    /// u64 each: this call's input and output addresses in the rank's own address space (for
    /// peers' single-copy reads).
    pub const ADDR_IN: usize = 80;
    pub const ADDR_OUT: usize = 88;
    /// u32 futex word: bumped by a pipe peer after it wrote to or read from a pipe of this
    /// rank's; u32 after it: how many of this rank's threads sleep on it.
    pub const BELL: usize = 96;
    pub const BELL_WAITERS: usize = 100;
    /// u32: 0 while the rank is well; once it failed, 1, or `2 + lost rank` when a lost peer
    /// was the cause (its abort, for host peers it holds no link to).
    pub const ABORTED: usize = 104;
    /// u32: bytes of `REASON` once written (stored before `ABORTED`); `u32::MAX` while the
    /// failing rank writes them.
    pub const REASON_LEN: usize = 108;
    /// The failing rank's own error, so a host peer told through memory says why.
    pub const REASON: usize = 256;
    /// Longest reason kept (a longer one is cut at a character boundary).
    pub const REASON_MAX: usize = 1024;

    pub const DESC: usize = 128;
    pub const DATA: usize = super::PAGE;
}

// A failed rank's reason fits between the call headers and the slot's buffers.
const _: () =
    assert!(slot::DESC + 64 <= slot::REASON && slot::REASON + slot::REASON_MAX <= slot::DATA);

/// The geometry of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Ranks sharing it.
    pub ranks: usize,
    /// Bytes of each of a slot's two buffers (a multiple of the page).
    pub chunk: usize,
}

impl Layout {
    /// `chunk` is rounded up to whole pages (at least one).
    pub(crate) fn new(ranks: usize, chunk: usize) -> Layout {
        Layout {
            ranks,
            chunk: chunk.max(1).div_ceil(PAGE) * PAGE,
        }
    }
    /// Bytes between two slots.
    pub(crate) fn stride(&self) -> usize {
        slot::DATA + 2 * self.chunk
    }
    /// Bytes of the whole segment.
    pub(crate) fn len(&self) -> usize {
        self.pipes_base() + self.ranks * self.ranks.saturating_sub(1) * Self::pipe_stride()
    }
    /// Bytes per rank: its slot and the pipes it reads.
    pub(crate) fn per_rank(&self) -> usize {
        self.stride() + self.ranks.saturating_sub(1) * Self::pipe_stride()
    }
    fn pipes_base(&self) -> usize {
        PAGE + self.ranks * self.stride()
    }
    /// Bytes between two pipes.
    pub(crate) fn pipe_stride() -> usize {
        PAGE + PIPE
    }
    /// Offset of the pipe from local rank `from` to local rank `to` (`from != to`).
    pub(crate) fn pipe(&self, from: usize, to: usize) -> usize {
        debug_assert!(from != to && from < self.ranks && to < self.ranks);
        let k = from * (self.ranks - 1) + if to > from { to - 1 } else { to };
        self.pipes_base() + k * Self::pipe_stride()
    }
    /// Offset of local rank `i`'s slot.
    pub(crate) fn slot(&self, i: usize) -> usize {
        PAGE + i * self.stride()
    }
    /// Offset of local rank `i`'s buffer `parity`.
    pub(crate) fn buf(&self, i: usize, parity: usize) -> usize {
        self.slot(i) + slot::DATA + (parity & 1) * self.chunk
    }
    /// Offset of local rank `i`'s call header for `parity`.
    pub(crate) fn desc(&self, i: usize, parity: usize) -> usize {
        self.slot(i) + slot::DESC + (parity & 1) * 32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_and_buffers_do_not_overlap_and_are_aligned() {
        let l = Layout::new(3, 5000);
        assert_eq!(l.chunk, 8192);
        let pipe = PAGE + PIPE;
        assert_eq!(l.len(), PAGE + 3 * (PAGE + 2 * 8192) + 6 * pipe);
        let mut spans: Vec<(usize, usize)> = vec![(0, PAGE)];
        for i in 0..3 {
            assert_eq!(l.slot(i) % PAGE, 0);
            spans.push((l.slot(i), l.slot(i) + slot::DATA));
            for p in 0..2 {
                assert_eq!(l.buf(i, p) % PAGE, 0);
                assert!(l.desc(i, p) + 32 <= l.slot(i) + slot::REASON);
                spans.push((l.buf(i, p), l.buf(i, p) + l.chunk));
            }
        }
        for from in 0..3 {
            for to in (0..3).filter(|&t| t != from) {
                assert_eq!(l.pipe(from, to) % PAGE, 0);
                spans.push((l.pipe(from, to), l.pipe(from, to) + pipe));
            }
        }
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "{w:?}");
        }
        assert_eq!(spans.last().unwrap().1, l.len());
    }
}
