//! The deadline of one call: a warning at half of it naming the ranks not heard from, and the
//! timeout error at the end.

use std::time::{Duration, Instant};

use crate::call::CallDesc;
use crate::error::CommError;
use crate::interrupt::{Cancel, cancelled};

pub(crate) struct Deadline {
    rank: usize,
    /// Read at the first [`check`](Self::check), not at the call's start: a call that never
    /// waits (most small ones) reads no clock (~25 ns on a VM). A wait checks once its spin
    /// is over, so the deadline counts from at most a spin (microseconds) after the start.
    start: Option<Instant>,
    timeout: Duration,
    warned: bool,
    /// The communicator's cancel flag.
    cancel: Cancel,
}

impl Deadline {
    pub(crate) fn new(rank: usize, timeout: Duration, cancel: &Cancel) -> Deadline {
        Deadline {
            rank,
            start: None,
            timeout,
            warned: false,
            cancel: cancel.clone(),
        }
    }

    /// The same deadline counted from now (a call that is watched, not waited for: a device
    /// call the progress thread polls).
    pub(crate) fn counting_now(mut self) -> Deadline {
        self.start = Some(Instant::now());
        self
    }

    /// Time since the first check (zero before it).
    pub(crate) fn elapsed(&self) -> Duration {
        self.start.map_or(Duration::ZERO, |s| s.elapsed())
    }

    /// Checks the clock: warns once past half the deadline (naming `waiting_for`). Asks this
    /// thread's interrupt check and the communicator's cancel flag first (`interrupt.rs`):
    /// callers come back at least every 100 ms, so a signal, or `dtcomm_comm_destroy` on
    /// another thread, stops the call within that.
    pub(crate) fn check(&mut self, call: &CallDesc, waiting_for: &[usize]) -> Phase {
        // The call waits: the recorder reads the clock at its end.
        crate::flight::note_wait();
        let elapsed = self.start.get_or_insert_with(Instant::now).elapsed();
        if let Some(reason) = crate::interrupt::requested().or_else(|| cancelled(&self.cancel)) {
            return Phase::Interrupted(CommError::Interrupted {
                rank: self.rank,
                call: *call,
                elapsed,
                reason,
            });
        }
        if elapsed >= self.timeout {
            return Phase::Expired(elapsed);
        }
        let half = self.timeout / 2;
        if !self.warned && elapsed >= half {
            self.warned = true;
            tracing::warn!(
                rank = self.rank,
                %call,
                ?elapsed,
                timeout = ?self.timeout,
                ?waiting_for,
                "dtcomm: call has run for half its deadline; not heard from ranks {waiting_for:?}"
            );
            return Phase::Half((self.timeout - elapsed).min(Duration::from_millis(100)));
        }
        let next = if self.warned {
            self.timeout - elapsed
        } else {
            half - elapsed
        };
        Phase::Wait(next.min(Duration::from_millis(100)))
    }
}

/// Where a call stands against its deadline.
pub(crate) enum Phase {
    /// Park at most this long.
    Wait(Duration),
    /// Just crossed half the deadline (warned); park at most this long.
    Half(Duration),
    /// Past the deadline, after this long.
    Expired(Duration),
    /// Interrupted on this rank ([`CommError::Interrupted`]).
    Interrupted(CommError),
}

/// The likely culprits of a stall: follow "A waits for B" reports from `mine` until reaching
/// ranks that did not report waiting themselves.
pub(crate) fn suspects(rank: usize, mine: &[usize], reports: &[(usize, Vec<usize>)]) -> Vec<usize> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = std::collections::BTreeSet::new();
    let mut stack: Vec<usize> = mine.to_vec();
    while let Some(x) = stack.pop() {
        if x == rank || !seen.insert(x) {
            continue;
        }
        match reports.iter().find(|(o, _)| *o == x) {
            Some((_, w)) => stack.extend(w.iter().copied()),
            None => {
                out.insert(x);
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn suspects_follow_the_chain() {
        let reports = vec![(1, vec![2]), (3, vec![1, 0])];
        assert_eq!(super::suspects(0, &[1], &reports), vec![2]);
        assert_eq!(super::suspects(0, &[3], &reports), vec![2]);
        assert_eq!(super::suspects(0, &[4], &reports), vec![4]);
    }
}
