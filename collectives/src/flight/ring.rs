//! The shared ring: the calls that start or end away from the thread that made them (queued
//! for a progress thread, or device calls it watches to their end), the last `capacity` of
//! them, oldest overwritten first, with no lock. A call claims number `n` with one
//! `fetch_add` and owns slot `n % slots` (the capacity rounded up to a power of two) until
//! call `n + slots` takes it; each slot is a sequence lock (`seqlock.rs`) taken with a
//! compare-and-swap, whose writers check the slot still holds their call, so a late update of
//! an overwritten call changes nothing and a reader never sees a torn entry. Calls run on
//! their caller's thread go to that thread's ring instead (`local.rs`: no read-modify-write).
//! Sans-IO: every method takes the time (the recorder's ticks).

use std::sync::atomic::{AtomicU64, Ordering};

use dt_rdzv_proto::native::CallState;

use super::entry::{
    CallInfo, Slot, SlotWrite, W_ID, decode, waiting_words, write_end, write_new, write_start,
    write_waiting,
};
use super::slots::Slots;

/// The recorder's shared ring.
#[derive(Debug)]
pub(crate) struct Ring {
    cap: usize,
    next: AtomicU64,
    slots: Slots,
}

impl Ring {
    /// An empty ring of `cap` slots (`cap > 0`); memory grows as calls come.
    pub(crate) fn new(cap: usize) -> Ring {
        Ring {
            cap,
            next: AtomicU64::new(0),
            slots: Slots::new(cap),
        }
    }

    /// Its capacity.
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// The next call's number (how many calls were recorded here).
    pub(crate) fn next_id(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// Records a new call (queued, or started at once with its sequence number); returns its
    /// number.
    pub(crate) fn push(&self, info: &CallInfo, seq: u64, state: CallState, now: u64) -> u64 {
        let id = self.next.fetch_add(1, Ordering::AcqRel);
        let w = self.slots.cell(id).write();
        // A call `capacity` later wrote here first (this thread was preempted): it stays.
        if w.get(W_ID) <= id + 1 {
            write_new(&w, id, info, seq, state, now);
        }
        id
    }

    /// Runs `f` on call `id`'s slot if it still holds it.
    fn update(&self, id: u64, f: impl FnOnce(&SlotWrite<'_>)) {
        let w = self.slots.cell(id).write();
        if w.get(W_ID) == id + 1 {
            f(&w);
        }
    }

    /// A queued call starts, with its sequence number.
    pub(crate) fn start(&self, id: u64, seq: u64, now: u64) {
        self.update(id, |w| write_start(w, seq, now));
    }

    /// The ranks (global) a started call waits for, as of now.
    pub(crate) fn waiting(&self, id: u64, ranks: impl Iterator<Item = u32>) {
        let (named, total) = waiting_words(ranks);
        self.update(id, |w| write_waiting(w, &named, total));
    }

    /// Call `id` ended, successfully or not.
    pub(crate) fn end(&self, id: u64, ok: bool, now: u64) {
        self.update(id, |w| write_end(w, ok, now));
    }

    /// A copy of call `id`'s slot, if it was not overwritten.
    pub(crate) fn slot(&self, id: u64) -> Option<Slot> {
        let next = self.next_id();
        if id >= next || id + (self.cap as u64) < next {
            return None;
        }
        let words = self.slots.cell(id).read()?;
        (words[W_ID] == id + 1).then(|| decode(&words)).flatten()
    }

    /// The calls still in the ring numbered below `end` (at most [`next_id`](Self::next_id)),
    /// oldest first.
    pub(crate) fn slots_before(&self, end: u64) -> Vec<Slot> {
        let first = end.saturating_sub(self.cap as u64);
        (first..end).filter_map(|id| self.slot(id)).collect()
    }

    /// Every call still in the ring, oldest first.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> Vec<Slot> {
        self.slots_before(self.next_id())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dtype::DType;
    use dt_rdzv_proto::native::progress::MAX_WAITING_FOR;

    pub(crate) fn info(rank: u32, group: u64, op: &'static str) -> CallInfo {
        CallInfo {
            group,
            group_size: 4,
            rank,
            group_rank: rank,
            op,
            peer: None,
            group_peer: None,
            p2p: false,
            dtype: DType::F32,
            in_count: 2,
            out_count: 2,
            timeout_ms: 1000,
        }
    }

    #[test]
    fn wraps_around_keeping_the_newest_in_order() {
        let r = Ring::new(3);
        let i = info(0, 0, "all_reduce");
        for n in 0..5u64 {
            let id = r.push(&i, n + 1, CallState::Started, n + 1);
            r.end(id, true, n + 1);
        }
        let ids: Vec<u64> = r.slots().iter().map(|s| s.id).collect();
        assert_eq!(ids, vec![2, 3, 4]);
        assert!(r.slot(1).is_none());
        assert_eq!(r.slot(4).map(|s| s.seq), Some(5));
        assert_eq!(r.slot(4).unwrap().info, i);
        // A late update of an overwritten call changes nothing.
        r.end(1, false, 99);
        assert!(r.slots().iter().all(|s| s.state == CallState::Completed));
    }

    #[test]
    fn states_go_queued_started_completed_or_failed() {
        let r = Ring::new(8);
        let mut i = info(1, 0, "recv");
        i.p2p = true;
        i.peer = Some(3);
        i.group_peer = Some(2);
        i.dtype = DType::I64;
        let a = r.push(&i, 0, CallState::Queued, 10);
        let b = r.push(&i, 0, CallState::Queued, 11);
        assert_eq!(r.slot(a).unwrap().state, CallState::Queued);
        assert_eq!(r.slot(a).unwrap().started, None);
        r.start(a, 7, 20);
        assert_eq!(r.slot(a).unwrap().state, CallState::Started);
        assert_eq!(r.slot(a).unwrap().seq, 7);
        r.end(a, true, 30);
        r.start(b, 8, 31);
        r.end(b, false, 40);
        let s = r.slot(b).unwrap();
        assert_eq!(
            (s.state, s.queued, s.started, s.ended),
            (CallState::Failed, 11, Some(31), Some(40))
        );
        assert_eq!(s.info, i);
    }

    #[test]
    fn waiting_for_is_bounded_and_counts_the_rest() {
        let r = Ring::new(2);
        let i = info(0, 0, "all_reduce");
        let id = r.push(&i, 1, CallState::Started, 1);
        r.waiting(id, 1..41);
        let s = r.slot(id).unwrap();
        assert_eq!(s.waiting_for().len(), MAX_WAITING_FOR);
        assert_eq!(s.waiting_for()[0], 1);
        assert_eq!(s.waiting_for()[15], 16);
        assert_eq!(s.waiting_total, 40);
        r.end(id, true, 2);
        assert_eq!(r.slot(id).unwrap().waiting_total, 40);
    }

    #[test]
    fn writers_on_many_threads_and_a_reader_see_whole_entries() {
        // Each thread's calls carry its number in every field a torn entry would mix up.
        let r = Ring::new(64);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let (r, stop) = (&r, &stop);
                s.spawn(move || {
                    let mut i = info(t, u64::from(t), "all_reduce");
                    i.group_rank = t;
                    i.in_count = u64::from(t);
                    let mut n = 1;
                    while !stop.load(Ordering::Relaxed) {
                        let id = r.push(&i, n, CallState::Started, u64::from(t) + 1);
                        r.waiting(id, std::iter::repeat_n(t, 3));
                        r.end(id, true, u64::from(t) + 1);
                        n += 1;
                    }
                });
            }
            let start = std::time::Instant::now();
            let mut seen = 0usize;
            while seen < 20_000 && start.elapsed() < std::time::Duration::from_secs(5) {
                let all = r.slots();
                assert!(all.windows(2).all(|w| w[0].id < w[1].id));
                for e in &all {
                    let t = e.info.rank;
                    assert_eq!(
                        (e.info.group, e.info.group_rank, e.info.in_count, e.queued),
                        (u64::from(t), t, u64::from(t), u64::from(t) + 1),
                        "{e:?}"
                    );
                    assert!(e.waiting_for().iter().all(|w| *w == t), "{e:?}");
                    if e.state == CallState::Completed {
                        assert_eq!(e.ended, Some(u64::from(t) + 1));
                    }
                }
                seen += all.len();
            }
            stop.store(true, Ordering::Relaxed);
            assert!(seen > 0);
        });
        assert!(r.next_id() > 64);
    }
}
