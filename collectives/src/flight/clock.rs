//! The recorder's clock: raw ticks on the call path, nanoseconds for readers. On x86-64 with
//! an invariant TSC a tick is one `rdtsc` (about 20 ns on a VM where `Instant::now` takes 70;
//! a few ns on bare metal), converted by readers against the monotonic clock: the pair read
//! when the recorder started and a pair read by the reader give the rate, so a converted
//! time is off by no more than the few ns between the two reads of a pair. Elsewhere a tick
//! is a nanosecond of `Instant` since the start.

use std::time::Instant;

/// Ticks since the start (never 0: 0 means "not yet" in a ring).
#[derive(Debug)]
pub(crate) struct Clock {
    base: Instant,
    /// The TSC when `base` was read (`None`: ticks are nanoseconds of `Instant`).
    tsc0: Option<u64>,
}

#[cfg(target_arch = "x86_64")]
fn tsc() -> u64 {
    // SAFETY: `rdtsc` has no preconditions; every x86-64 CPU has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    // Leaf 0x8000_0007 EDX bit 8: the TSC runs at a constant rate in every power state
    // (and Linux keeps it in step across CPUs).
    let max = core::arch::x86_64::__cpuid(0x8000_0000).eax;
    max >= 0x8000_0007 && core::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
}

/// A reader's conversion: nanoseconds per tick, from the start to now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rate {
    ns_per_tick: f64,
    /// The reader's now, in ticks and in ns since the start.
    now_ticks: u64,
}

impl Clock {
    /// Starts the clock now.
    pub(crate) fn start() -> Clock {
        #[cfg(target_arch = "x86_64")]
        if invariant_tsc() && std::env::var_os("DTCOMM_FR_NO_TSC").is_none() {
            let base = Instant::now();
            let t = tsc();
            return Clock {
                base,
                tsc0: Some(t.wrapping_sub(1)),
            };
        }
        Clock {
            base: Instant::now(),
            tsc0: None,
        }
    }

    /// Now, in ticks (> 0).
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if let Some(t0) = self.tsc0 {
            return tsc().wrapping_sub(t0).max(1);
        }
        self.base.elapsed().as_nanos() as u64 + 1
    }

    /// The rate for a reader, and its now.
    pub(crate) fn rate(&self) -> Rate {
        if self.tsc0.is_none() {
            return Rate {
                ns_per_tick: 1.0,
                now_ticks: self.now(),
            };
        }
        // The pair read closest together of three (a preemption between the two reads would
        // skew it).
        let mut best: Option<(u64, u64, u64)> = None;
        for _ in 0..3 {
            let a = self.now();
            let ns = self.base.elapsed().as_nanos() as u64;
            let b = self.now();
            if best.is_none_or(|(x, _, y)| b.abs_diff(a) < y.abs_diff(x)) {
                best = Some((a, ns, b));
            }
        }
        let (a, ns, b) = best.expect("three tries");
        // (Read on two CPUs, `b` may trail `a` by a few ticks: never a wrap.)
        let ticks = a.midpoint(b);
        Rate {
            ns_per_tick: if ticks > 1 {
                ns as f64 / (ticks - 1) as f64
            } else {
                1.0
            },
            now_ticks: ticks,
        }
    }
}

impl Rate {
    /// Ticks as nanoseconds since the clock's start.
    pub(crate) fn ns(&self, ticks: u64) -> u64 {
        (ticks.saturating_sub(1) as f64 * self.ns_per_tick) as u64
    }
    /// Nanoseconds since the clock's start, now.
    pub(crate) fn now_ns(&self) -> u64 {
        self.ns(self.now_ticks)
    }
    /// The reader's now in ticks.
    pub(crate) fn now_ticks(&self) -> u64 {
        self.now_ticks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_convert_to_the_monotonic_clock() {
        let c = Clock::start();
        let t0 = c.now();
        let i0 = c.base.elapsed();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let t1 = c.now();
        let i1 = c.base.elapsed();
        assert!(t1 > t0 && t0 > 0);
        let r = c.rate();
        let (ns0, ns1) = (r.ns(t0) as i128, r.ns(t1) as i128);
        // Within 1 ms of what Instant says (the machine may be loaded).
        assert!(
            (ns0 - i0.as_nanos() as i128).abs() < 1_000_000,
            "{ns0} vs {i0:?}"
        );
        assert!(
            (ns1 - i1.as_nanos() as i128).abs() < 1_000_000,
            "{ns1} vs {i1:?}"
        );
        assert!(r.now_ns() as i128 >= ns1);
    }
}
