//! How fast one native connection's messages are read: a token bucket. A member sends a
//! heartbeat a second and a few requests; a client that sends a hundred thousand messages a
//! second is read at this pace instead (QUIC's flow control then holds the sender back), so
//! that it cannot keep a server core busy.

use std::time::{Duration, Instant};

/// Messages a second one connection is read at, past its burst.
pub(crate) const RATE: u32 = 1000;
/// Messages one connection may send at once before the pace applies.
pub(crate) const BURST: u32 = 2000;

/// A connection's token bucket (sans-IO: the caller sleeps).
#[derive(Debug)]
pub(crate) struct Pace {
    tokens: f64,
    at: Instant,
}

impl Pace {
    /// A full bucket at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            tokens: f64::from(BURST),
            at: now,
        }
    }

    /// Takes one message's token at `now`: `None` when it may be read at once, else how long
    /// to wait first (the token is then taken in advance).
    pub(crate) fn take(&mut self, now: Instant) -> Option<Duration> {
        let gained = now.saturating_duration_since(self.at).as_secs_f64() * f64::from(RATE);
        self.tokens = (self.tokens + gained).min(f64::from(BURST)) - 1.0;
        self.at = now;
        (self.tokens < 0.0).then(|| Duration::from_secs_f64(-self.tokens / f64::from(RATE)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_messages_wait_their_turn_at_the_rate() {
        let t = Instant::now();
        let mut p = Pace::new(t);
        assert!((0..BURST).all(|_| p.take(t).is_none()));
        let waits: Vec<Duration> = (0..3).map(|_| p.take(t).unwrap()).collect();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        assert!((ms(waits[0]) - 1.0).abs() < 1e-6, "{waits:?}");
        assert!((ms(waits[2]) - 3.0).abs() < 1e-6, "{waits:?}");
        // A second later the debt is paid and the bucket refills (never past its burst).
        let later = t + Duration::from_secs(10);
        assert!(p.take(later).is_none());
        assert!(p.tokens <= f64::from(BURST));
        // Heartbeats a second apart never wait.
        let mut q = Pace::new(t);
        assert!((1..100).all(|i| q.take(t + Duration::from_secs(i)).is_none()));
    }
}
