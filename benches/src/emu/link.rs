//! The timing of one emulated link per port: a NIC with a rate and a delay in each
//! direction, as `tc netem rate R delay D` on both ends of a veth pair.
//!
//! A frame from port `a` to port `b` first waits for `a`'s transmit side to be free, takes
//! `len / rate` to serialise, and crosses `a`'s link in `delay`; then it waits for `b`'s
//! receive side, serialises again and crosses `b`'s link in `delay`. Host to host, an
//! unloaded small frame therefore takes two delays, as between two netem'd veths.
//! Times are nanoseconds on any monotonic clock the caller picks.

/// Rate and delay of every port's link, and when each direction is next free.
#[derive(Debug, Clone)]
pub struct Links {
    /// Bits per second (`None`: unlimited).
    rate_bps: Option<u64>,
    /// One direction of one link, in nanoseconds.
    delay_ns: u64,
    /// When each port's transmit side (towards the wire) is next free.
    tx_free: Vec<u64>,
    /// When each port's receive side (from the wire) is next free.
    rx_free: Vec<u64>,
}

impl Links {
    /// `ports` links of `rate_bps` (`None`: unlimited) and `delay_ns` each way.
    pub fn new(ports: usize, rate_bps: Option<u64>, delay_ns: u64) -> Self {
        Self {
            rate_bps,
            delay_ns,
            tx_free: vec![0; ports],
            rx_free: vec![0; ports],
        }
    }

    fn serialise_ns(&self, len: usize) -> u64 {
        match self.rate_bps {
            Some(r) if r > 0 => ((len as u128 * 8 * 1_000_000_000) / r as u128) as u64,
            _ => 0,
        }
    }

    /// A frame of `len` bytes handed to port `from`'s NIC at `now`: when it reaches the
    /// switch.
    pub fn depart(&mut self, now: u64, from: usize, len: usize) -> u64 {
        let done = self.tx_free[from].max(now) + self.serialise_ns(len);
        self.tx_free[from] = done;
        done + self.delay_ns
    }

    /// A frame of `len` bytes at the switch at `at`, for port `to`: when that host receives it.
    pub fn arrive(&mut self, at: u64, to: usize, len: usize) -> u64 {
        let done = self.rx_free[to].max(at) + self.serialise_ns(len);
        self.rx_free[to] = done;
        done + self.delay_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unloaded_frame_takes_two_delays_and_two_serialisations() {
        // 10 Gbit/s: 1250 bytes in 1 µs.
        let mut l = Links::new(2, Some(10_000_000_000), 50_000);
        let at = l.depart(1_000, 0, 1250);
        assert_eq!(at, 1_000 + 1_000 + 50_000);
        assert_eq!(l.arrive(at, 1, 1250), at + 1_000 + 50_000);
    }

    #[test]
    fn back_to_back_frames_queue_behind_each_other_at_the_rate() {
        let mut l = Links::new(3, Some(8_000_000_000), 0); // 1 byte per ns
        assert_eq!(l.depart(0, 0, 1000), 1000);
        assert_eq!(l.depart(0, 0, 1000), 2000, "waits for the first");
        assert_eq!(l.depart(0, 1, 1000), 1000, "another port's NIC is free");
        assert_eq!(l.depart(5000, 0, 10), 5010, "an idle NIC starts at once");
        // Two senders into one receiver share its receive side.
        assert_eq!(l.arrive(1000, 2, 1000), 2000);
        assert_eq!(l.arrive(1000, 2, 1000), 3000);
    }

    #[test]
    fn no_rate_means_delay_only() {
        let mut l = Links::new(2, None, 7);
        assert_eq!(l.depart(10, 0, 1 << 20), 17);
        assert_eq!(l.arrive(17, 1, 1 << 20), 24);
    }
}
