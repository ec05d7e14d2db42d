//! One round trip per cycle: each rank's contribution travels in a fixed-size slot of one
//! all-gather, and only what does not fit takes a second, variable-size round.
//!
//! A slot is `[u32 length LE][the first bytes of the contribution]`. Every rank sees every
//! length, so all of them know whether a second round is needed and how large the next
//! cycles' slots are: [`Slots::settle`] grows the slot at once to fit the largest contribution
//! (up to [`MAX_SLOT`]) and halves it only after [`SHRINK_AFTER`] cycles in a row that would
//! have fitted in half, so the bursts of a training step keep finding room. Pure: the driver
//! does the collectives.

/// The smallest slot (bytes, the length included).
pub(crate) const MIN_SLOT: usize = 256;
/// The largest slot: longer contributions send their remainder in a second round.
pub(crate) const MAX_SLOT: usize = 32 << 10;
/// Cycles in a row that fit in half the slot before it halves.
pub(crate) const SHRINK_AFTER: u32 = 1000;

/// The slot size every rank uses for the next cycle, and how long it has been too large.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slots {
    size: usize,
    small_for: u32,
}

impl Default for Slots {
    fn default() -> Self {
        Self {
            size: MIN_SLOT,
            small_for: 0,
        }
    }
}

impl Slots {
    /// This rank's slot for `payload`: its length, then as much of it as fits.
    pub(crate) fn pack(&self, payload: &[u8]) -> Vec<u8> {
        let mut slot = vec![0u8; self.size];
        slot[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        let head = payload.len().min(self.size - 4);
        slot[4..4 + head].copy_from_slice(&payload[..head]);
        slot
    }

    /// Splits the gathered slots (rank order): each rank's length and the bytes that came
    /// in its slot.
    pub(crate) fn unpack<'a>(&self, gathered: &'a [u8]) -> Vec<(usize, &'a [u8])> {
        gathered
            .chunks_exact(self.size)
            .map(|s| {
                let len = u32::from_le_bytes(s[..4].try_into().expect("4 bytes")) as usize;
                (len, &s[4..4 + len.min(self.size - 4)])
            })
            .collect()
    }

    /// The bytes of each rank's contribution that did not fit (the second round's counts).
    pub(crate) fn overflow(&self, lens: &[usize]) -> Vec<usize> {
        lens.iter()
            .map(|l| l.saturating_sub(self.size - 4))
            .collect()
    }

    /// Adjusts the slot for the next cycle from every rank's length this cycle (the same on
    /// every rank, so every rank adjusts alike).
    pub(crate) fn settle(&mut self, lens: &[usize]) {
        let need = (lens.iter().copied().max().unwrap_or(0) + 4)
            .next_power_of_two()
            .clamp(MIN_SLOT, MAX_SLOT);
        if need > self.size {
            self.size = need;
            self.small_for = 0;
        } else if need < self.size {
            self.small_for += 1;
            if self.small_for >= SHRINK_AFTER {
                self.size /= 2;
                self.small_for = 0;
            }
        } else {
            self.small_for = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Slots {
        fn size(&self) -> usize {
            self.size
        }
    }

    #[test]
    fn a_contribution_that_fits_travels_whole_in_its_slot() {
        let s = Slots::default();
        let mut all = s.pack(b"rank zero");
        all.extend(s.pack(b""));
        all.extend(s.pack(&[7; 100]));
        let got = s.unpack(&all);
        assert_eq!(got[0], (9, &b"rank zero"[..]));
        assert_eq!(got[1], (0, &b""[..]));
        assert_eq!(got[2], (100, &[7u8; 100][..]));
        assert_eq!(s.overflow(&[9, 0, 100]), vec![0, 0, 0]);
    }

    #[test]
    fn a_long_one_sends_its_head_and_counts_the_rest() {
        let s = Slots::default();
        let long: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let all = s.pack(&long);
        let got = s.unpack(&all);
        assert_eq!(got[0].0, 1000);
        assert_eq!(got[0].1, &long[..MIN_SLOT - 4]);
        assert_eq!(s.overflow(&[1000]), vec![1000 - (MIN_SLOT - 4)]);
    }

    #[test]
    fn grows_at_once_and_shrinks_only_after_a_long_quiet() {
        let mut s = Slots::default();
        s.settle(&[10, 3000]);
        assert_eq!(s.size(), 4096, "the next burst fits");
        for _ in 0..SHRINK_AFTER - 1 {
            s.settle(&[10, 10]);
        }
        assert_eq!(s.size(), 4096);
        s.settle(&[1000, 10]);
        assert_eq!(s.size(), 2048, "halves after SHRINK_AFTER quiet cycles");
        s.settle(&[5000, 0]);
        assert_eq!(s.size(), 8192, "(5000 + 4 bytes round up to 8 KiB)");
        s.settle(&[1 << 20]);
        assert_eq!(s.size(), MAX_SLOT, "never past the cap");
    }
}
