//! The deadline of one call: a warning at half of it naming the ranks not heard from, and the
//! timeout error at the end.

use std::time::{Duration, Instant};

use crate::error::{CallDesc, CommError};

pub(crate) struct Deadline {
    rank: usize,
    start: Instant,
    timeout: Duration,
    warned: bool,
}

impl Deadline {
    pub(crate) fn new(rank: usize, timeout: Duration) -> Deadline {
        Deadline { rank, start: Instant::now(), timeout, warned: false }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Checks the clock: warns once past half the deadline, fails past it. Returns how long
    /// the caller may park before it must check again.
    pub(crate) fn check(&mut self, call: &CallDesc, waiting_for: impl Fn() -> Vec<usize>) -> Result<Duration, CommError> {
        let elapsed = self.start.elapsed();
        if elapsed >= self.timeout {
            return Err(CommError::Timeout { rank: self.rank, call: *call, elapsed, waiting_for: waiting_for() });
        }
        let half = self.timeout / 2;
        if !self.warned && elapsed >= half {
            self.warned = true;
            tracing::warn!(
                rank = self.rank,
                %call,
                ?elapsed,
                timeout = ?self.timeout,
                waiting_for = ?waiting_for(),
                "dtcomm: call has run for half its deadline; not heard from ranks {:?}",
                waiting_for()
            );
        }
        let next = if self.warned { self.timeout - elapsed } else { half - elapsed };
        Ok(next.min(Duration::from_millis(100)))
    }
}
