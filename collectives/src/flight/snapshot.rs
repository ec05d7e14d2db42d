//! A snapshot of every recorded call of this process: the shared ring's and each thread
//! ring's, merged in the order the calls were made (the time each was queued or started, in
//! the recorder's ticks), the newest `capacity` of them, numbered.
//!
//! Record ids are given here: the calls counted (every ring's count, read before its slots,
//! and those of the rings freed) number the process's calls from 0, so the newest call
//! counted is `count - 1` and the ones before it count down in time order. A call keeps its
//! id from one snapshot to the next, except where calls of two threads raced (one read the
//! clock first and published its call after another's was read): then their ids may swap.

use std::sync::Arc;

use super::entry::Slot;
use super::local::ThreadRing;
use super::ring::Ring;

/// Every call still held in `shared` and `rings` (`freed`: the calls of rings freed), oldest
/// first, at most `cap` (the newest), each with its record id.
pub(crate) fn merge(
    shared: &Ring,
    rings: &[Arc<ThreadRing>],
    freed: u64,
    cap: usize,
) -> Vec<(u64, Slot)> {
    // The counts first: a call recorded after them is neither numbered nor copied.
    let shared_end = shared.next_id();
    let ends: Vec<u64> = rings.iter().map(|r| r.next_id()).collect();
    let total = shared_end + freed + ends.iter().sum::<u64>();
    // (when, ring, number in it): ring 0 is the shared one.
    let mut all: Vec<(u64, u32, Slot)> = shared
        .slots_before(shared_end)
        .into_iter()
        .map(|s| (s.queued, 0, s))
        .collect();
    for (r, end) in rings.iter().zip(ends) {
        all.extend(
            r.slots_before(end)
                .into_iter()
                .map(|s| (s.queued, r.key(), s)),
        );
    }
    all.sort_unstable_by_key(|(t, ring, s)| (*t, *ring, s.id));
    let keep = all.len().min(cap);
    let first = total - keep as u64;
    all.drain(..all.len() - keep);
    all.into_iter()
        .zip(first..)
        .map(|((_, _, s), id)| (id, s))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use dt_rdzv_proto::native::CallState;

    use super::*;
    use crate::flight::ring::tests::info;
    use crate::flight::threads::Threads;

    #[test]
    fn calls_of_every_ring_merge_in_time_order_numbered_from_the_count() {
        let shared = Ring::new(3);
        let threads = Threads::new(3);
        let (a, b) = (threads.open(0).unwrap(), threads.open(0).unwrap());
        let i = info(0, 0, "all_reduce");
        // Times 1..=9 spread over the three rings; a keeps its last 3.
        a.push(&i, 1, CallState::Started, 1);
        shared.push(&i, 0, CallState::Queued, 2);
        b.push(&i, 1, CallState::Started, 3);
        a.push(&i, 2, CallState::Started, 4);
        a.push(&i, 3, CallState::Started, 5);
        a.push(&i, 4, CallState::Started, 6);
        b.push(&i, 2, CallState::Started, 7);
        shared.push(&i, 0, CallState::Queued, 8);
        let h = threads.held(shared.next_id());
        let m = merge(&shared, &h.rings, h.freed, 100);
        let times: Vec<u64> = m.iter().map(|(_, s)| s.queued).collect();
        assert_eq!(
            times,
            vec![2, 3, 4, 5, 6, 7, 8],
            "a's first call was overwritten"
        );
        let ids: Vec<u64> = m.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, (1..8).collect::<Vec<_>>());
        // The newest `cap` of the process.
        let m = merge(&shared, &h.rings, h.freed, 3);
        assert_eq!(
            m.iter().map(|(id, s)| (*id, s.queued)).collect::<Vec<_>>(),
            vec![(5, 6), (6, 7), (7, 8)]
        );
        // A ring freed still counts.
        let m = merge(&shared, &h.rings[1..], h.freed + 4, 100);
        assert_eq!(m.last().map(|(id, _)| *id), Some(7));
    }

    #[test]
    fn writers_on_many_threads_and_a_reader_see_whole_entries() {
        // Each thread runs its calls as a communicator's caller does (its own ring, and every
        // fourth call queued in the shared ring), its number in every field a torn entry would
        // mix up; a reader merges snapshots meanwhile.
        let shared = Ring::new(64);
        let threads = Threads::new(64);
        let clock = AtomicU64::new(1);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let (shared, threads, clock, stop) = (&shared, &threads, &clock, &stop);
                s.spawn(move || {
                    let own = threads.open(shared.next_id()).unwrap();
                    let mut i = info(t, u64::from(t), "all_reduce");
                    i.group_rank = t;
                    i.in_count = u64::from(t);
                    let mut n = 1;
                    while !stop.load(Ordering::Relaxed) {
                        let now = clock.fetch_add(1, Ordering::Relaxed) * 8 + u64::from(t);
                        if n % 4 == 0 {
                            let id = shared.push(&i, 0, CallState::Queued, now);
                            shared.start(id, n, now);
                            shared.waiting(id, std::iter::repeat_n(t, 3));
                            shared.end(id, true, now);
                        } else {
                            let id = own.push(&i, n, CallState::Started, now);
                            own.waiting(id, std::iter::repeat_n(t, 3));
                            own.end(id, true, now);
                        }
                        n += 1;
                    }
                });
            }
            let start = std::time::Instant::now();
            let mut seen = 0usize;
            while seen < 20_000 && start.elapsed() < std::time::Duration::from_secs(5) {
                let h = threads.held(shared.next_id());
                let all = merge(&shared, &h.rings, h.freed, 64);
                assert!(all.len() <= 64);
                assert!(all.windows(2).all(|w| w[0].0 + 1 == w[1].0));
                assert!(all.windows(2).all(|w| w[0].1.queued <= w[1].1.queued));
                for (_, e) in &all {
                    let t = e.info.rank;
                    assert_eq!(
                        (
                            e.info.group,
                            e.info.group_rank,
                            e.info.in_count,
                            e.queued % 8
                        ),
                        (u64::from(t), t, u64::from(t), u64::from(t)),
                        "{e:?}"
                    );
                    assert!(e.waiting_for().iter().all(|w| *w == t), "{e:?}");
                    if e.state == CallState::Completed {
                        assert_eq!(e.ended, Some(e.queued));
                    }
                }
                seen += all.len();
            }
            stop.store(true, Ordering::Relaxed);
            assert!(seen > 0);
        });
        let h = threads.held(shared.next_id());
        assert!(h.rings.iter().map(|r| r.next_id()).sum::<u64>() + shared.next_id() > 64);
    }
}
