//! The frames in flight: a queue ordered by delivery time (ties in arrival order), bounded
//! in bytes as a NIC queue is (frames past the bound are dropped, as netem's `limit` does).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A frame due at a port.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    at: u64,
    seq: u64,
    port: usize,
    frame: Vec<u8>,
}

/// Frames waiting for their delivery time.
#[derive(Debug)]
pub struct DelayLine {
    heap: BinaryHeap<Reverse<Due>>,
    seq: u64,
    bytes: usize,
    limit: usize,
    /// Frames dropped because the line was full.
    pub dropped: u64,
}

impl DelayLine {
    /// An empty line holding at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
            bytes: 0,
            limit,
            dropped: 0,
        }
    }

    /// Queues `frame` for `port` at `at`; false (and counted) when the line is full.
    pub fn push(&mut self, at: u64, port: usize, frame: Vec<u8>) -> bool {
        if self.bytes + frame.len() > self.limit {
            self.dropped += 1;
            return false;
        }
        self.bytes += frame.len();
        self.seq += 1;
        self.heap.push(Reverse(Due {
            at,
            seq: self.seq,
            port,
            frame,
        }));
        true
    }

    /// When the next frame is due, if any.
    pub fn next_at(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse(d)| d.at)
    }

    /// The next frame if it is due by `now`: its port and bytes.
    pub fn pop_due(&mut self, now: u64) -> Option<(usize, Vec<u8>)> {
        if self.next_at()? > now {
            return None;
        }
        let Reverse(d) = self.heap.pop()?;
        self.bytes -= d.frame.len();
        Some((d.port, d.frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivers_in_time_order_then_arrival_order() {
        let mut l = DelayLine::new(1 << 20);
        l.push(30, 0, vec![3]);
        l.push(10, 1, vec![1]);
        l.push(10, 2, vec![2]);
        assert_eq!(l.next_at(), Some(10));
        assert_eq!(l.pop_due(9), None, "nothing early");
        assert_eq!(l.pop_due(10), Some((1, vec![1])));
        assert_eq!(l.pop_due(10), Some((2, vec![2])), "ties keep arrival order");
        assert_eq!(l.pop_due(29), None);
        assert_eq!(l.pop_due(100), Some((0, vec![3])));
        assert_eq!(l.next_at(), None);
    }

    #[test]
    fn a_full_line_drops_and_counts() {
        let mut l = DelayLine::new(4);
        assert!(l.push(1, 0, vec![0; 3]));
        assert!(!l.push(1, 0, vec![0; 2]));
        assert_eq!(l.dropped, 1);
        l.pop_due(1);
        assert!(l.push(1, 0, vec![0; 4]), "room again once delivered");
    }
}
