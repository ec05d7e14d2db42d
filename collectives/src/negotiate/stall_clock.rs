//! [`StallClock`]: how many cycle times a negotiation cycle charges toward the stall deadline.
//!
//! The deadline is counted in cycles so that every rank fails a stalled name in the same
//! cycle, but it stands for time: a cycle slowed by 100k pending names must charge the cycle
//! times it lasted, and an early cycle (a caller woke it) must charge none. Each rank proposes
//! a charge in its cycle message and every rank takes the largest.
//!
//! What a rank charges is measured between the ends of its all-gathers, which every rank
//! leaves together: a rank descheduled for 3 ms before a gather holds the others in that
//! gather, so the interval that ends there is 3 ms longer on every rank alike, once. (Measuring
//! from cycle start to cycle start instead charged it twice under the largest-proposal rule:
//! on the slow rank in one cycle and on the ranks it held in the next; on an oversubscribed
//! host a 4 s deadline fired after 3.1 s.) Time not yet charged is kept, so cycle times that
//! are not whole add up instead of being dropped.

use std::time::{Duration, Instant};

/// One rank's real time not yet charged to the stall deadline (sans-IO: the caller passes the
/// instants).
#[derive(Debug, Clone)]
pub(crate) struct StallClock {
    cycle: Duration,
    owed: Duration,
    last: Instant,
}

impl StallClock {
    /// A clock charging in units of `cycle`, counting from `start`.
    pub(crate) fn new(cycle: Duration, start: Instant) -> Self {
        Self {
            cycle: cycle.max(Duration::from_micros(100)),
            owed: Duration::ZERO,
            last: start,
        }
    }

    /// An all-gather ended at `now`: the time since the previous one is owed.
    pub(crate) fn gathered(&mut self, now: Instant) {
        self.owed += now.saturating_duration_since(self.last);
        self.last = now;
    }

    /// What this rank proposes to charge in its next cycle message: the whole cycle times owed.
    pub(crate) fn propose(&self) -> u32 {
        let n = self.owed.as_nanos() / self.cycle.as_nanos();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Every rank charged `n` cycle times (the largest proposal): they are no longer owed.
    /// A rank whose own proposal was smaller owes nothing rather than less than nothing.
    pub(crate) fn charged(&mut self, n: u32) {
        self.owed = self.owed.saturating_sub(self.cycle.saturating_mul(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Duration = Duration::from_millis(5);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn cycles_that_are_not_whole_add_up() {
        let t0 = Instant::now();
        let mut c = StallClock::new(C, t0);
        let mut charged = 0;
        // 1000 cycles of 5.5 ms: 5.5 s, 1100 cycle times.
        for k in 1..=1000u32 {
            c.gathered(t0 + Duration::from_micros(5500) * k);
            let n = c.propose();
            c.charged(n);
            charged += n;
        }
        assert!((1099..=1100).contains(&charged), "{charged}");
    }

    #[test]
    fn an_early_cycle_charges_nothing_and_a_slow_one_what_it_lasted() {
        let t0 = Instant::now();
        let mut c = StallClock::new(C, t0);
        c.gathered(t0 + ms(1));
        assert_eq!(c.propose(), 0, "early: not counted");
        c.charged(0);
        // 100k pending names made one cycle last 80 ms: 16 cycle times, not 1.
        c.gathered(t0 + ms(81));
        assert_eq!(c.propose(), 16);
    }

    /// Three ranks on two cores: each in turn is descheduled 20 ms before a gather, and the
    /// others wait in that gather. Every rank's gather-to-gather intervals see each stall
    /// once, so the largest proposal charges the real time, not up to twice it.
    #[test]
    fn a_stalled_rank_is_charged_once_not_once_per_rank_it_held() {
        let t0 = Instant::now();
        let mut clocks: Vec<StallClock> = (0..3).map(|_| StallClock::new(C, t0)).collect();
        let mut now = t0;
        let mut total = 0u32;
        for k in 0..300u32 {
            now += ms(5) + if k % 4 == 0 { ms(20) } else { ms(0) };
            // Each rank leaves the gather within 50 µs of the others.
            for (r, c) in clocks.iter_mut().enumerate() {
                c.gathered(now + Duration::from_micros(25 * (u64::from(k) + r as u64) % 50));
            }
            let n = clocks.iter().map(StallClock::propose).max().unwrap();
            clocks.iter_mut().for_each(|c| c.charged(n));
            total += n;
        }
        let real = u32::try_from((now - t0).as_millis() / 5).unwrap();
        assert!(total <= real + 1 && total + 2 >= real, "{total} vs {real}");
    }
}
