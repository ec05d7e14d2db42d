//! The ring: the last `capacity` calls of this process, oldest overwritten first, with the
//! little the summary needs beside it (the calls in flight, the last completed call per rank
//! and group, per-rank counts). Sans-IO: every method takes the time (ns on the recorder's
//! monotonic clock), so the tests drive it with made-up clocks.

use dt_rdzv_proto::native::CallState;
use dt_rdzv_proto::native::progress::MAX_WAITING_FOR;

use super::entry::{CallInfo, Slot};

/// Most (rank, group) pairs whose last completed call is kept (the least recently active go
/// first); a summary carries at most `MAX_GROUPS` of a rank's anyway.
pub(crate) const MAX_TRACKED_GROUPS: usize = 256;

/// The last completed call of one rank in one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupLast {
    pub rank: u32,
    pub group: u64,
    pub group_size: u32,
    pub seq: u64,
    pub op: &'static str,
    pub at: u64,
}

/// Per rank of this process: calls recorded, calls in flight, when the last one ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RankStats {
    pub rank: u32,
    pub calls: u64,
    pub in_flight: u64,
    pub last_end: Option<u64>,
}

/// The recorder's ring.
#[derive(Debug)]
pub(crate) struct Ring {
    cap: usize,
    slots: Vec<Slot>,
    next_id: u64,
    /// Ids of the calls not finished, in submission order.
    pending: Vec<u64>,
    pub(crate) groups: Vec<GroupLast>,
    pub(crate) ranks: Vec<RankStats>,
}

impl Ring {
    /// An empty ring of `cap` slots (`cap > 0`); memory grows as calls come.
    pub(crate) fn new(cap: usize) -> Ring {
        assert!(cap > 0, "a ring has at least one slot");
        Ring {
            cap,
            slots: Vec::with_capacity(cap.min(64)),
            next_id: 0,
            pending: Vec::new(),
            groups: Vec::new(),
            ranks: Vec::new(),
        }
    }

    /// Its capacity.
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    fn rank_mut(&mut self, rank: u32) -> &mut RankStats {
        match self.ranks.iter().position(|r| r.rank == rank) {
            Some(i) => &mut self.ranks[i],
            None => {
                self.ranks.push(RankStats {
                    rank,
                    calls: 0,
                    in_flight: 0,
                    last_end: None,
                });
                self.ranks.last_mut().expect("just pushed")
            }
        }
    }

    /// Records a new call (queued, or started at once with its sequence number); returns its
    /// record id.
    pub(crate) fn push(&mut self, info: CallInfo, seq: u64, state: CallState, now: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let slot = Slot::new(id, info, seq, state, now);
        if self.slots.len() < self.cap {
            self.slots.push(slot);
        } else {
            let i = (id % self.cap as u64) as usize;
            self.slots[i] = slot;
        }
        self.pending.push(id);
        let r = self.rank_mut(info.rank);
        r.calls += 1;
        r.in_flight += 1;
        id
    }

    /// The slot of record `id`, if it was not overwritten.
    pub(crate) fn slot(&self, id: u64) -> Option<&Slot> {
        let s = self.slots.get((id % self.cap as u64) as usize)?;
        (s.id == id).then_some(s)
    }

    fn slot_mut(&mut self, id: u64) -> Option<&mut Slot> {
        let s = self.slots.get_mut((id % self.cap as u64) as usize)?;
        (s.id == id).then_some(s)
    }

    /// A queued call starts, with its sequence number.
    pub(crate) fn start(&mut self, id: u64, seq: u64, now: u64) {
        if let Some(s) = self.slot_mut(id) {
            s.seq = seq;
            s.state = CallState::Started;
            s.started = Some(now);
        }
    }

    /// The ranks (global) a started call waits for, as of now.
    pub(crate) fn waiting(&mut self, id: u64, ranks: impl Iterator<Item = u32>) {
        if let Some(s) = self.slot_mut(id) {
            let mut n = 0usize;
            for r in ranks {
                if n < MAX_WAITING_FOR {
                    s.waiting[n] = r;
                }
                n += 1;
            }
            s.waiting_len = n.min(MAX_WAITING_FOR) as u8;
            s.waiting_total = n as u32;
        }
    }

    /// Call `id` of `info` (sequence number `seq`) ended, successfully or not.
    pub(crate) fn end(&mut self, id: u64, info: &CallInfo, seq: u64, ok: bool, now: u64) {
        if let Some(s) = self.slot_mut(id) {
            s.state = if ok {
                CallState::Completed
            } else {
                CallState::Failed
            };
            s.started.get_or_insert(now);
            s.ended = Some(now);
        }
        if let Some(i) = self.pending.iter().rposition(|p| *p == id) {
            self.pending.remove(i);
        }
        let r = self.rank_mut(info.rank);
        r.in_flight = r.in_flight.saturating_sub(1);
        r.last_end = Some(now);
        if ok && !info.p2p {
            self.completed(info, seq, now);
        }
    }

    fn completed(&mut self, info: &CallInfo, seq: u64, now: u64) {
        let last = GroupLast {
            rank: info.rank,
            group: info.group,
            group_size: info.group_size,
            seq,
            op: info.op,
            at: now,
        };
        match self
            .groups
            .iter()
            .position(|g| g.rank == info.rank && g.group == info.group)
        {
            Some(i) => self.groups[i] = last,
            None if self.groups.len() < MAX_TRACKED_GROUPS => self.groups.push(last),
            None => {
                let oldest = (0..self.groups.len())
                    .min_by_key(|&i| self.groups[i].at)
                    .expect("full");
                self.groups[oldest] = last;
            }
        }
    }

    /// The calls in flight still in the ring, in submission order.
    pub(crate) fn pending(&self) -> impl Iterator<Item = &Slot> {
        self.pending.iter().filter_map(|id| self.slot(*id))
    }

    /// Every slot, oldest first.
    pub(crate) fn slots(&self) -> impl Iterator<Item = &Slot> {
        let split = if self.slots.len() < self.cap {
            0
        } else {
            (self.next_id % self.cap as u64) as usize
        };
        self.slots[split..].iter().chain(&self.slots[..split])
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dtype::DType;

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
        let mut r = Ring::new(3);
        let i = info(0, 0, "all_reduce");
        for n in 0..5u64 {
            let id = r.push(i, n + 1, CallState::Started, n);
            r.end(id, &i, n + 1, true, n);
        }
        let ids: Vec<u64> = r.slots().map(|s| s.id).collect();
        assert_eq!(ids, vec![2, 3, 4]);
        assert!(r.slot(1).is_none());
        assert_eq!(r.slot(4).map(|s| s.seq), Some(5));
        assert_eq!(r.ranks[0].calls, 5);
        assert_eq!(r.ranks[0].in_flight, 0);
    }

    #[test]
    fn states_go_queued_started_completed_or_failed() {
        let mut r = Ring::new(8);
        let i = info(1, 0, "broadcast");
        let a = r.push(i, 0, CallState::Queued, 10);
        let b = r.push(i, 0, CallState::Queued, 11);
        assert_eq!(r.slot(a).unwrap().state, CallState::Queued);
        assert_eq!(r.slot(a).unwrap().started, None);
        r.start(a, 7, 20);
        assert_eq!(r.slot(a).unwrap().state, CallState::Started);
        assert_eq!(r.slot(a).unwrap().seq, 7);
        r.end(a, &i, 7, true, 30);
        r.start(b, 8, 31);
        r.end(b, &i, 8, false, 40);
        let s = r.slot(b).unwrap();
        assert_eq!(
            (s.state, s.started, s.ended),
            (CallState::Failed, Some(31), Some(40))
        );
        assert_eq!(r.pending().count(), 0);
        // The last completed call of the group is the successful one.
        assert_eq!(r.groups[0].seq, 7);
    }

    #[test]
    fn waiting_for_is_bounded_and_counts_the_rest() {
        let mut r = Ring::new(2);
        let i = info(0, 0, "all_reduce");
        let id = r.push(i, 1, CallState::Started, 0);
        r.waiting(id, 1..41);
        let s = r.slot(id).unwrap();
        assert_eq!(s.waiting_for().len(), MAX_WAITING_FOR);
        assert_eq!(s.waiting_for()[0], 1);
        assert_eq!(s.waiting_total, 40);
    }

    #[test]
    fn a_pending_call_overwritten_leaves_no_trace_but_its_end_is_counted() {
        let mut r = Ring::new(1);
        let i = info(0, 0, "all_reduce");
        let stuck = r.push(i, 1, CallState::Started, 0);
        let j = info(0, 5, "barrier");
        let other = r.push(j, 1, CallState::Started, 1);
        r.end(other, &j, 1, true, 2);
        assert_eq!(r.pending().count(), 0);
        assert_eq!(r.ranks[0].in_flight, 1);
        r.end(stuck, &i, 1, true, 3);
        assert_eq!(r.ranks[0].in_flight, 0);
        assert_eq!(r.groups.len(), 2);
    }

    #[test]
    fn tracked_groups_are_bounded() {
        let mut r = Ring::new(4);
        for g in 0..(MAX_TRACKED_GROUPS as u64 + 10) {
            let i = info(0, g, "barrier");
            let id = r.push(i, 1, CallState::Started, g);
            r.end(id, &i, 1, true, g);
        }
        assert_eq!(r.groups.len(), MAX_TRACKED_GROUPS);
        assert!(r.groups.iter().all(|g| g.group >= 10));
    }
}
