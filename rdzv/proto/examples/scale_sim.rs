//! The rendezvous server's machine at scale, on a virtual clock: N simulated members form one
//! job, heartbeat for a few virtual seconds, and one is lost (the rest re-form). Prints, per N,
//! the machine's own CPU time per phase (this thread's CPU clock around the machine's calls;
//! the harness's inputs are built before each phase), the CPU to encode what it sent, its
//! memory per member (a counting allocator: live bytes once the round runs), and the
//! welcomes' sizes.
//!
//! ```text
//! cargo run --release -p dt-rdzv-proto --example scale_sim -- 1000,2000,4000,8000,16000,32000,64000,100000
//! cargo run --release -p dt-rdzv-proto --example scale_sim -- 100000 --rounds 3 --json
//! ```

#![warn(clippy::undocumented_unsafe_blocks)]

#[path = "../tests/scale/mod.rs"]
mod scale;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use scale::Scale;

/// The system allocator, counting live bytes and allocations.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        // SAFETY: `p` was allocated by `System` with `l` (every allocation goes through us).
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as i64 - l.size() as i64, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// This thread's CPU time, in seconds.
fn cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` into `ts`, a live local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Runs `f`, returning its CPU seconds and allocations.
fn timed(f: impl FnOnce()) -> (f64, u64) {
    let a = ALLOCS.load(Ordering::Relaxed);
    let t = cpu();
    f();
    (cpu() - t, ALLOCS.load(Ordering::Relaxed) - a)
}

struct Row {
    join: f64,
    complete: f64,
    form: f64,
    form_allocs: u64,
    encode: f64,
    steady_per_s: f64,
    reform: f64,
    reform_allocs: u64,
    mem_per_member: f64,
    welcome_bytes: u64,
    max_peers: usize,
}

fn one(n: u64, steady_secs: u32) -> Row {
    let live0 = LIVE.load(Ordering::Relaxed);
    let mut s = Scale::new(n);
    let mut joins = s.joins();
    // The last member's join completes the round: assignment and the welcomes, apart.
    let last = joins.split_off(joins.len() - 2);
    let (join, join_allocs) = timed(|| s.feed(joins));
    let (complete, complete_allocs) = timed(|| s.feed(last));
    let (form, form_allocs) = (join + complete, join_allocs + complete_allocs);
    let (encode, t) = {
        let mut t = None;
        let (c, _) = timed(|| t = Some(s.tally()));
        (c, t.expect("tallied"))
    };
    assert_eq!(t.welcomes, n, "every member welcomed");
    let mem = (LIVE.load(Ordering::Relaxed) - live0) as f64 / n as f64;
    let (steady, _) = timed(|| s.steady(steady_secs, &[]));
    let st = s.tally();
    assert_eq!(st.welcomes, 0, "no round in steady state: {st:?}");
    let lost = n / 2;
    let (reform, reform_allocs) = timed(|| s.lose(lost));
    let rt = s.tally();
    assert_eq!(rt.welcomes, n - 1, "the survivors re-formed");
    Row {
        join,
        complete,
        form,
        form_allocs,
        encode,
        steady_per_s: steady / f64::from(steady_secs),
        reform,
        reform_allocs,
        mem_per_member: mem,
        welcome_bytes: t.max_welcome_bytes,
        max_peers: t.max_peers,
    }
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut sizes = vec![1000, 2000, 4000, 8000, 16000, 32000, 64000, 100_000];
    let (mut rounds, mut json, mut steady) = (1usize, false, 2u32);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rounds" => rounds = it.next().and_then(|v| v.parse().ok()).expect("--rounds N"),
            "--steady-secs" => steady = it.next().and_then(|v| v.parse().ok()).expect("secs"),
            "--json" => json = true,
            list => {
                sizes = list
                    .split(',')
                    .map(|x| x.parse().expect("member counts"))
                    .collect()
            }
        }
    }
    if !json {
        println!(
            "{:>7} {:>8} {:>10} {:>10} {:>7} {:>10} {:>10} {:>12} {:>10} {:>9} {:>8} {:>9} {:>6}",
            "members",
            "joins_s",
            "complete_s",
            "form_cpu_s",
            "x_prev",
            "allocs/mbr",
            "encode_s",
            "steady_cpu%",
            "reform_s",
            "re_allocs",
            "B/member",
            "welcome_B",
            "peers"
        );
    }
    let mut prev: Option<(u64, f64)> = None;
    for n in sizes {
        let rows: Vec<Row> = (0..rounds).map(|_| one(n, steady)).collect();
        let (form, form_lo, form_hi) = median(rows.iter().map(|r| r.form).collect());
        let (reform, re_lo, re_hi) = median(rows.iter().map(|r| r.reform).collect());
        let (encode, ..) = median(rows.iter().map(|r| r.encode).collect());
        let (join, ..) = median(rows.iter().map(|r| r.join).collect());
        let (complete, ..) = median(rows.iter().map(|r| r.complete).collect());
        let (steady_s, ..) = median(rows.iter().map(|r| r.steady_per_s).collect());
        let r = &rows[0];
        let growth = prev.map(|(pn, pt)| (form / pt) / (n as f64 / pn as f64) * 2.0);
        if json {
            println!(
                "{{\"members\":{n},\"joins_cpu_s\":{join:.4},\"complete_cpu_s\":{complete:.4},\"form_cpu_s\":{form:.4},\"form_range\":[{form_lo:.4},{form_hi:.4}],\
                 \"form_allocs_per_member\":{:.1},\"encode_cpu_s\":{encode:.4},\
                 \"steady_cpu_s_per_s\":{steady_s:.5},\"reform_cpu_s\":{reform:.4},\
                 \"reform_range\":[{re_lo:.4},{re_hi:.4}],\"reform_allocs\":{},\
                 \"bytes_per_member\":{:.0},\"max_welcome_bytes\":{},\"max_peers\":{},\
                 \"growth_per_doubling\":{}}}",
                r.form_allocs as f64 / n as f64,
                r.reform_allocs,
                r.mem_per_member,
                r.welcome_bytes,
                r.max_peers,
                growth.map_or("null".into(), |g| format!("{g:.3}"))
            );
        } else {
            println!(
                "{n:>7} {join:>8.4} {complete:>10.4} {form:>10.4} {:>7} {:>10.1} {encode:>10.4} {:>12.3} {reform:>10.4} {:>9} {:>8.0} {:>9} {:>6}",
                growth.map_or("-".into(), |g| format!("{g:.2}")),
                r.form_allocs as f64 / n as f64,
                steady_s * 100.0,
                r.reform_allocs,
                r.mem_per_member,
                r.welcome_bytes,
                r.max_peers
            );
        }
        prev = Some((n, form));
    }
}
