//! How long a wait spins before it sleeps in the kernel: spinning only while it is likely to
//! pay.
//!
//! A wait that spins keeps a core busy. That buys a few microseconds when the awaited peer
//! runs on another core and answers soon; it costs the model's own threads (torch's OpenMP
//! team) a core when they need it, and costs the awaited peer its core when there are more
//! runnable threads than cores. So a wait spins at most the configured budget
//! (`DTCOMM_SPIN_US`), and less, down to nothing:
//!
//! * **never** while this host's compute threads (ranks on the host × threads a rank computes
//!   with, see [`set_compute_threads`]) outnumber the cores this process may run on
//!   (`sched_getaffinity`): the peer needs the core the spinner would take;
//! * otherwise for about twice what recent waits took, learned from their lengths
//!   (`SpinPolicy::record`): waits that mostly outlast the budget stop spinning (and try it
//!   again every `PROBE_EVERY` waits, in case the pattern changed).
//!
//! Sans-IO: the policy only sees durations; the waits measure them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How many waits that did not spin pass before one spins its full budget again.
pub(crate) const PROBE_EVERY: u32 = 32;

/// Threads each rank of this process computes with (torch's intra-op threads), as the front
/// end reported it; 1 until told.
static COMPUTE_THREADS: AtomicUsize = AtomicUsize::new(1);

/// Tells dtcomm how many threads this process computes with besides its waits (the Python
/// package passes torch's intra-op thread count). Waits never spin while the host's ranks
/// times this number exceed the cores this process may use.
pub fn set_compute_threads(n: usize) {
    COMPUTE_THREADS.store(n.max(1), Ordering::Relaxed);
}

/// The number last given to [`set_compute_threads`] (1 by default).
pub fn compute_threads() -> usize {
    COMPUTE_THREADS.load(Ordering::Relaxed)
}

/// The cores this process may run on: its CPU affinity (and cgroup quota), at least 1.
pub fn usable_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Whether `host_ranks` ranks computing with `threads` threads each need more cores than
/// `cores`.
pub fn oversubscribed(host_ranks: usize, threads: usize, cores: usize) -> bool {
    host_ranks.saturating_mul(threads.max(1)) > cores
}

/// The spin budget of one kind of wait of one rank.
#[derive(Debug, Clone)]
pub(crate) struct SpinPolicy {
    /// The configured most (`DTCOMM_SPIN_US`).
    max: Duration,
    /// Ranks on this host.
    host_ranks: usize,
    /// Cores this process may use.
    cores: usize,
    /// Recent waits' length, smoothed (nanoseconds; a wait counts at most twice `max`).
    recent_ns: u64,
    /// Waits since the last one that spun.
    dry: u32,
}

impl SpinPolicy {
    /// A policy spinning at most `max`, for a rank with `host_ranks` ranks on its host
    /// (itself included) and `cores` usable cores. Starts optimistic: the first waits spin.
    pub(crate) fn new(max: Duration, host_ranks: usize, cores: usize) -> SpinPolicy {
        SpinPolicy {
            max,
            host_ranks: host_ranks.max(1),
            cores: cores.max(1),
            recent_ns: 0,
            dry: 0,
        }
    }

    /// This rank's host has `n` ranks (known once the host's peers were found).
    pub(crate) fn set_host_ranks(&mut self, n: usize) {
        self.host_ranks = n.max(1);
    }

    /// How long the next wait may spin, given the compute threads each rank uses.
    pub(crate) fn budget_for(&mut self, threads: usize) -> Duration {
        if self.max.is_zero() || oversubscribed(self.host_ranks, threads, self.cores) {
            return Duration::ZERO;
        }
        let max = self.max.as_nanos() as u64;
        if self.recent_ns <= max {
            return Duration::from_nanos((2 * self.recent_ns).clamp(max / 8, max));
        }
        // Recent waits outlast the budget: spinning would only burn the core. Probe now and
        // then.
        self.dry += 1;
        if self.dry >= PROBE_EVERY {
            self.dry = 0;
            return self.max;
        }
        Duration::ZERO
    }

    /// Whether this host's compute threads outnumber the cores (with the process's reported
    /// compute threads): a wait then gives its core away (`sched_yield`) a few times before
    /// it sleeps, since the peer it waits for is likely runnable and waiting for a core.
    pub(crate) fn oversubscribed(&self) -> bool {
        oversubscribed(self.host_ranks, compute_threads(), self.cores)
    }

    /// How long the next wait may spin (with the process's reported compute threads).
    pub(crate) fn budget(&mut self) -> Duration {
        self.budget_for(compute_threads())
    }

    /// A wait ended after `waited` (spinning and sleeping together).
    pub(crate) fn record(&mut self, waited: Duration) {
        let cap = 2 * self.max.as_nanos() as u64;
        let w = (waited.as_nanos() as u64).min(cap);
        // Exponential smoothing over about eight waits.
        self.recent_ns = self.recent_ns - self.recent_ns / 8 + w / 8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn no_spin_when_threads_outnumber_cores() {
        let mut p = SpinPolicy::new(200 * US, 2, 2);
        assert_eq!(p.budget_for(1), 200 * US / 8, "a fresh policy spins");
        assert_eq!(
            p.budget_for(2),
            Duration::ZERO,
            "2 ranks x 2 threads on 2 cores"
        );
        let mut p = SpinPolicy::new(200 * US, 4, 2);
        assert_eq!(p.budget_for(1), Duration::ZERO, "4 ranks on 2 cores");
        assert!(oversubscribed(3, 1, 2));
        assert!(!oversubscribed(2, 1, 2));
    }

    #[test]
    fn zero_configured_never_spins() {
        let mut p = SpinPolicy::new(Duration::ZERO, 1, 8);
        p.record(US);
        assert_eq!(p.budget_for(1), Duration::ZERO);
    }

    #[test]
    fn short_waits_spin_about_twice_their_length() {
        let mut p = SpinPolicy::new(200 * US, 2, 8);
        for _ in 0..64 {
            p.record(40 * US);
        }
        let b = p.budget_for(1);
        assert!(b >= 70 * US && b <= 80 * US, "{b:?}");
        for _ in 0..64 {
            p.record(150 * US);
        }
        assert_eq!(p.budget_for(1), 200 * US, "capped at the configured most");
    }

    #[test]
    fn long_waits_stop_spinning_and_probe_now_and_then() {
        let mut p = SpinPolicy::new(200 * US, 2, 8);
        for _ in 0..64 {
            p.record(Duration::from_millis(5));
        }
        let budgets: Vec<Duration> = (0..2 * PROBE_EVERY).map(|_| p.budget_for(1)).collect();
        let spun = budgets.iter().filter(|b| !b.is_zero()).count();
        assert_eq!(spun, 2, "one probe every {PROBE_EVERY} waits: {budgets:?}");
        // Waits turn short again: spinning resumes once the average falls under the budget.
        for _ in 0..64 {
            p.record(10 * US);
        }
        assert!(!p.budget_for(1).is_zero());
    }
}
