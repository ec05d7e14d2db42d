//! A thread's ring: the calls one thread runs from start to end itself (a blocking call run
//! on its caller's thread under the communicator's state lock: the fast path), the last
//! `capacity` of them. One writer, the thread, holds the ring's [`Owner`] (not `Send`, not
//! `Clone`, made once with the ring), so a call takes its number with a plain load and store
//! and writes its slot under a sequence lock taken with plain stores
//! ([`SeqCell::write_alone`](super::seqlock::SeqCell::write_alone)): no atomic
//! read-modify-write on the fast path. Readers ([`ThreadRing::slot`], [`ThreadRing::slots`])
//! copy slots as in the shared ring and never see a torn entry. Sans-IO: every method takes
//! the time (the recorder's ticks).

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dt_rdzv_proto::native::CallState;

use super::entry::{
    CallInfo, Slot, SlotWrite, W_ID, decode, waiting_words, write_end, write_new, write_waiting,
};
use super::slots::Slots;

/// One thread's ring, as readers share it.
#[derive(Debug)]
pub(crate) struct ThreadRing {
    /// Its key among the rings of this process (from 1).
    key: u32,
    cap: usize,
    /// Calls recorded: stored (release) after the call's slot is written.
    next: AtomicU64,
    slots: Slots,
}

/// The right to write a [`ThreadRing`]: one per ring, kept by its thread.
#[derive(Debug)]
pub(crate) struct Owner {
    ring: Arc<ThreadRing>,
    /// Not `Send` or `Sync`: the writes stay on the thread that owns the ring.
    _here: PhantomData<*const ()>,
}

impl ThreadRing {
    /// A new ring of `cap` calls (`cap > 0`) with key `key`, and its one [`Owner`].
    pub(crate) fn new(key: u32, cap: usize) -> (Arc<ThreadRing>, Owner) {
        let ring = Arc::new(ThreadRing {
            key,
            cap,
            next: AtomicU64::new(0),
            slots: Slots::new(cap),
        });
        let owner = Owner {
            ring: ring.clone(),
            _here: PhantomData,
        };
        (ring, owner)
    }

    /// Its key.
    pub(crate) fn key(&self) -> u32 {
        self.key
    }

    /// The next call's number (how many calls were recorded here).
    pub(crate) fn next_id(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// A copy of call `n`'s slot, if it was not overwritten.
    pub(crate) fn slot(&self, n: u64) -> Option<Slot> {
        let next = self.next_id();
        if n >= next || n + (self.cap as u64) < next {
            return None;
        }
        let words = self.slots.cell(n).read()?;
        (words[W_ID] == n + 1).then(|| decode(&words)).flatten()
    }

    /// The calls still in the ring numbered below `end` (at most [`next_id`](Self::next_id)),
    /// oldest first.
    pub(crate) fn slots_before(&self, end: u64) -> Vec<Slot> {
        let first = end.saturating_sub(self.cap as u64);
        (first..end).filter_map(|n| self.slot(n)).collect()
    }
}

impl Owner {
    /// Its ring's key.
    #[inline]
    pub(crate) fn key(&self) -> u32 {
        self.ring.key
    }

    /// Records a new call (started, with its sequence number); returns its number.
    #[inline]
    pub(crate) fn push(&self, info: &CallInfo, seq: u64, state: CallState, now: u64) -> u64 {
        let r = &*self.ring;
        // The one writer: nobody else moves `next`.
        let n = r.next.load(Ordering::Relaxed);
        write_new(&r.slots.cell(n).write_alone(), n, info, seq, state, now);
        r.next.store(n + 1, Ordering::Release);
        n
    }

    /// Runs `f` on call `n`'s slot if it still holds it.
    #[inline]
    fn update(&self, n: u64, f: impl FnOnce(&SlotWrite<'_>)) {
        let w = self.ring.slots.cell(n).write_alone();
        if w.get(W_ID) == n + 1 {
            f(&w);
        }
    }

    /// The ranks (global) call `n` waits for, as of now.
    pub(crate) fn waiting(&self, n: u64, ranks: impl Iterator<Item = u32>) {
        let (named, total) = waiting_words(ranks);
        self.update(n, |w| write_waiting(w, &named, total));
    }

    /// Call `n` ended, successfully or not.
    #[inline]
    pub(crate) fn end(&self, n: u64, ok: bool, now: u64) {
        self.update(n, |w| write_end(w, ok, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flight::ring::tests::info;

    #[test]
    fn wraps_around_keeping_the_newest_in_order() {
        let (r, o) = ThreadRing::new(1, 3);
        let i = info(0, 0, "all_reduce");
        for n in 0..5u64 {
            let id = o.push(&i, n + 1, CallState::Started, n + 1);
            o.end(id, true, n + 1);
        }
        let ids: Vec<u64> = r.slots_before(r.next_id()).iter().map(|s| s.id).collect();
        assert_eq!(ids, vec![2, 3, 4]);
        assert!(r.slot(1).is_none());
        assert_eq!(r.slot(4).map(|s| s.seq), Some(5));
        assert_eq!(r.slot(4).unwrap().info, i);
        assert_eq!(
            r.slots_before(4).len(),
            2,
            "only the calls before the count"
        );
        // A late update of an overwritten call changes nothing.
        o.end(1, false, 99);
        assert!(
            r.slots_before(5)
                .iter()
                .all(|s| s.state == CallState::Completed)
        );
    }

    #[test]
    fn a_call_starts_waits_and_fails() {
        let (r, o) = ThreadRing::new(7, 8);
        assert_eq!(o.key(), 7);
        let i = info(2, 0, "all_reduce");
        let n = o.push(&i, 4, CallState::Started, 10);
        assert_eq!(r.slot(n).unwrap().state, CallState::Started);
        o.waiting(n, [3u32, 1].into_iter());
        o.end(n, false, 20);
        let s = r.slot(n).unwrap();
        assert_eq!(
            (s.state, s.seq, s.queued, s.started, s.ended),
            (CallState::Failed, 4, 10, Some(10), Some(20))
        );
        assert_eq!((s.waiting_for(), s.waiting_total), (&[3u32, 1][..], 2));
    }
}
