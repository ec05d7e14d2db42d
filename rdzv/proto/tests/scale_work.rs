//! The rendezvous machine's work grows linearly with the job: formation, steady heartbeats
//! and the re-formation after one loss, at N and 2N simulated members (5,000 and 10,000; 500 and 1,000 all on one node), on a
//! virtual clock. Work is counted, not timed: the machine's steps, the actions it gives, the
//! bytes of what it sends (encoded), and the allocations and bytes it allocates (a counting
//! allocator, per thread). Each must at most double (2.1×) when the job doubles; a welcome's
//! size must not grow at all, also when every member shares one node.

#[path = "scale/mod.rs"]
mod scale;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use scale::{Scale, Tally};

/// The system allocator, counting this thread's allocations and allocated bytes.
struct Counting;

thread_local! {
    static ALLOCS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

fn count(bytes: usize) {
    // `try_with`: nothing to count while the thread's locals are being torn down.
    let _ = ALLOCS.try_with(|c| {
        let (n, b) = c.get();
        c.set((n + 1, b + bytes as u64));
    });
}

// SAFETY: every call is passed to the system allocator unchanged; counting touches only a
// `Cell` in a const-initialized thread local (no allocation, no destructor).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size());
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` was allocated by `System` with `l` (every allocation goes through us).
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new);
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Work of one phase.
#[derive(Debug, Clone, Copy)]
struct Work {
    steps: u64,
    allocs: u64,
    alloc_bytes: u64,
}

fn measure(s: &mut Scale, f: impl FnOnce(&mut Scale)) -> Work {
    let (a0, b0) = ALLOCS.with(Cell::get);
    let steps = s.steps;
    f(s);
    let (a1, b1) = ALLOCS.with(Cell::get);
    Work {
        steps: s.steps - steps,
        allocs: a1 - a0,
        alloc_bytes: b1 - b0,
    }
}

/// (formation, its tally, steady state, re-formation, its tally) for `n` members, `per_node`
/// to a node.
fn run(n: u64, per_node: u64) -> [(Work, Tally); 3] {
    let mut s = Scale::new(n).per_node(per_node);
    let joins = s.joins();
    let form = measure(&mut s, |s| s.feed(joins));
    let form_t = s.tally();
    assert_eq!(form_t.welcomes, n, "every member welcomed: {form_t:?}");
    let steady = measure(&mut s, |s| s.steady(1, &[]));
    let steady_t = s.tally();
    assert_eq!(steady_t.welcomes, 0, "a steady round: {steady_t:?}");
    let reform = measure(&mut s, |s| s.lose(n / 2));
    let reform_t = s.tally();
    assert_eq!(
        reform_t.welcomes,
        n - 1,
        "the survivors re-formed: {reform_t:?}"
    );
    [(form, form_t), (steady, steady_t), (reform, reform_t)]
}

fn linear(what: &str, phase: &str, a: u64, b: u64) {
    let r = b as f64 / a.max(1) as f64;
    assert!(
        r <= 2.1,
        "{phase}: {what} grew {r:.2}× for twice the members ({a} -> {b})"
    );
}

fn check(n: u64, per_node: u64) {
    let m = 2 * n;
    let small = run(n, per_node);
    let big = run(m, per_node);
    for (phase, (a, b)) in ["formation", "steady state", "re-formation"]
        .into_iter()
        .zip(small.iter().zip(&big))
    {
        let ((wa, ta), (wb, tb)) = (a, b);
        linear("machine steps", phase, wa.steps, wb.steps);
        linear("allocations", phase, wa.allocs, wb.allocs);
        linear("bytes allocated", phase, wa.alloc_bytes, wb.alloc_bytes);
        linear("actions", phase, ta.actions, tb.actions);
        linear("bytes sent", phase, ta.bytes, tb.bytes);
        // A welcome's size does not depend on the job's: its peers are neighbours and look-ups.
        assert!(
            tb.max_welcome_bytes <= ta.max_welcome_bytes + 64,
            "{phase}: the largest welcome grew from {} to {} bytes",
            ta.max_welcome_bytes,
            tb.max_welcome_bytes
        );
        assert!(
            tb.max_peers <= 16,
            "{phase}: {} peers in a welcome",
            tb.max_peers
        );
    }
}

#[test]
fn work_grows_linearly_with_eight_members_to_a_node() {
    check(5_000, 8);
}

#[test]
fn work_grows_linearly_with_every_member_on_one_node() {
    // Fewer: a welcome that listed the whole node would make this quadratic in memory too.
    check(500, u64::MAX);
}
