//! A rank's summary of its calls, for its heartbeats: the oldest pending call per group, the
//! last completed call per group, how long it has been in no call ([`Progress`], already
//! cut to the protocol's bounds). Reads only the calls in flight and the per-group table, not
//! the whole ring: cheap enough for every heartbeat.

use dt_rdzv_proto::native::{GroupProgress, PendingCall, Progress};

use super::entry::{CallId, Slot};
use super::live::RankView;

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

/// Rank `rank`'s summary for round `round` from `view`, as of `now` (ticks); `slot` reads a
/// call from its ring, `ns` turns ticks into nanoseconds.
pub(crate) fn summarize(
    view: &RankView,
    slot: impl Fn(CallId) -> Option<Slot>,
    ns: impl Fn(u64) -> u64,
    rank: u32,
    round: u64,
    now: u64,
) -> Progress {
    let age = |t: u64| ms(ns(now).saturating_sub(ns(t)));
    // Each communicator's oldest open call still in a ring (calls run in submission order
    // per communicator: the oldest is the one its group is stuck in), oldest first.
    let mut oldest: Vec<Slot> = view
        .open
        .iter()
        .filter_map(|ids| {
            ids.iter()
                .filter_map(|id| slot(*id))
                .min_by_key(|s| s.queued)
        })
        .collect();
    oldest.sort_by_key(|s| s.queued);
    let mut pending: Vec<PendingCall> = Vec::new();
    for s in oldest {
        if pending.iter().any(|p| p.group == s.info.group) {
            continue;
        }
        pending.push(PendingCall {
            group: s.info.group,
            group_size: s.info.group_size,
            seq: s.seq,
            op: s.info.op.to_owned(),
            state: s.state,
            age_ms: age(s.queued),
            peer: s.info.peer,
            waiting_for: s.waiting_for().to_vec(),
        });
    }
    let groups = view
        .groups
        .iter()
        .map(|g| GroupProgress {
            group: g.group,
            group_size: g.group_size,
            completed_seq: g.seq,
            completed_op: g.op.to_owned(),
            completed_age_ms: age(g.at),
        })
        .collect();
    let idle_ms = (view.stats.in_flight == 0)
        .then_some(view.stats.last_end)
        .flatten()
        .map(age);
    Progress {
        rank,
        round,
        pending,
        groups,
        idle_ms,
        calls: view.stats.calls,
    }
    .bounded()
}

#[cfg(test)]
mod tests {
    use dt_rdzv_proto::native::CallState;
    use dt_rdzv_proto::native::progress::{MAX_GROUPS, MAX_PENDING, WORLD_GROUP};

    use super::*;
    use crate::flight::entry::CallInfo;
    use std::sync::Arc;

    use crate::flight::live::{Live, Registry};
    use crate::flight::local::{Owner, ThreadRing};
    use crate::flight::ring::Ring;
    use crate::flight::ring::tests::info;

    const MS: u64 = 1_000_000;

    /// The rings (this thread's and the shared one) and a registry driven as the recorder
    /// drives them.
    struct Rec {
        ring: Ring,
        local: Arc<ThreadRing>,
        own: Owner,
        reg: Registry,
    }

    impl Rec {
        fn new(cap: usize) -> Rec {
            let (local, own) = ThreadRing::new(1, cap);
            Rec {
                ring: Ring::new(cap),
                local,
                own,
                reg: Registry::default(),
            }
        }
        fn start(&self, l: &Live, i: &CallInfo, seq: u64, at: u64) -> CallId {
            let index = self.own.push(i, seq, CallState::Started, at);
            let id = CallId::Local { ring: 1, index };
            l.running(id);
            id
        }
        fn queue(&self, l: &Live, i: &CallInfo, at: u64) -> CallId {
            let n = self.ring.push(i, 0, CallState::Queued, at);
            l.listed(n);
            CallId::Shared(n)
        }
        fn slot(&self, id: CallId) -> Option<Slot> {
            match id {
                CallId::Shared(n) => self.ring.slot(n),
                CallId::Local { index, .. } => self.local.slot(index),
            }
        }
        fn ring_end(&self, id: CallId, ok: bool, at: u64) {
            match id {
                CallId::Shared(n) => self.ring.end(n, ok, at),
                CallId::Local { index, .. } => self.own.end(index, ok, at),
            }
        }
        fn waiting(&self, id: CallId, ranks: impl Iterator<Item = u32>) {
            match id {
                CallId::Shared(n) => self.ring.waiting(n, ranks),
                CallId::Local { index, .. } => self.own.waiting(index, ranks),
            }
        }
        fn end(&self, l: &Live, id: CallId, listed: bool, ok: bool, at: u64) {
            let s = self.slot(id).unwrap();
            self.ring_end(id, ok, at);
            let done = (ok && !s.info.p2p).then_some((s.seq, s.info.op));
            l.ended(id, listed, done, at);
        }
        fn summary(&self, rank: u32, now: u64) -> Progress {
            let v = self.reg.view(rank);
            summarize(&v, |id| self.slot(id), |t| t, rank, 7, now)
        }
    }

    #[test]
    fn a_rank_stuck_in_a_collective_names_it_and_whom_it_waits_for() {
        let r = Rec::new(16);
        let l = r.reg.register(2, WORLD_GROUP, 4, None);
        let i = info(2, WORLD_GROUP, "all_reduce");
        for seq in 1..=3 {
            let id = r.start(&l, &i, seq, seq * MS);
            r.end(&l, id, false, true, seq * MS + 10);
        }
        let stuck = r.start(&l, &i, 4, 10 * MS);
        r.waiting(stuck, [3u32, 5].into_iter());
        // Another rank of this process (in-memory groups) is not in rank 2's summary.
        let other = r.reg.register(3, WORLD_GROUP, 4, None);
        r.start(&other, &info(3, WORLD_GROUP, "all_reduce"), 4, 10 * MS);
        let p = r.summary(2, 1500 * MS);
        assert_eq!((p.rank, p.round, p.calls), (2, 7, 4));
        assert_eq!(p.pending.len(), 1);
        let c = &p.pending[0];
        assert_eq!(
            (c.seq, c.op.as_str(), c.state),
            (4, "all_reduce", CallState::Started)
        );
        assert_eq!(c.age_ms, 1490);
        assert_eq!(c.waiting_for, vec![3, 5]);
        assert_eq!(p.groups.len(), 1);
        assert_eq!(p.groups[0].completed_seq, 3);
        assert_eq!(p.idle_ms, None);
        p.check().unwrap();
    }

    #[test]
    fn an_idle_rank_says_since_when() {
        let r = Rec::new(4);
        let l = r.reg.register(0, WORLD_GROUP, 4, None);
        let id = r.start(&l, &info(0, WORLD_GROUP, "barrier"), 1, 1);
        r.end(&l, id, false, true, 2 * MS);
        let p = r.summary(0, 41_002 * MS);
        assert_eq!(p.idle_ms, Some(41_000));
        assert!(p.pending.is_empty());
        // A rank that never called anything: no idle time, no calls.
        let p = r.summary(9, 1);
        assert_eq!((p.idle_ms, p.calls), (None, 0));
    }

    #[test]
    fn groups_and_point_to_point_are_told_apart() {
        let r = Rec::new(16);
        let world_comm = r.reg.register(1, WORLD_GROUP, 4, None);
        let sub_comm = r.reg.register(1, 77, 2, None);
        let world = info(1, WORLD_GROUP, "all_reduce");
        let id = r.start(&world_comm, &world, 1, 1);
        r.end(&world_comm, id, false, true, MS);
        let mut sub = info(1, 77, "broadcast");
        sub.group_size = 2;
        let a = r.start(&sub_comm, &sub, 5, 2 * MS);
        let mut recv = info(1, WORLD_GROUP, "recv");
        recv.p2p = true;
        recv.peer = Some(0);
        let b = r.start(&world_comm, &recv, 3, 3 * MS);
        // A second call queued behind the world's recv is not listed.
        let queued = r.queue(&world_comm, &world, 4 * MS);
        let p = r.summary(1, 10 * MS);
        assert_eq!(p.pending.len(), 2);
        assert_eq!(p.pending[0].group, 77);
        assert_eq!(p.pending[0].group_size, 2);
        assert_eq!(p.pending[1].op, "recv");
        assert_eq!(p.pending[1].peer, Some(0));
        r.end(&world_comm, b, false, true, 11 * MS);
        r.end(&sub_comm, a, false, true, 12 * MS);
        let p = r.summary(1, 13 * MS);
        assert_eq!(p.pending.len(), 1);
        assert_eq!(p.pending[0].state, CallState::Queued);
        assert_eq!(p.pending[0].age_ms, 9);
        // Completed point to point does not count as a group's collective progress.
        let g77 = p.groups.iter().find(|g| g.group == 77).unwrap();
        assert_eq!(
            (g77.completed_seq, g77.completed_op.as_str()),
            (5, "broadcast")
        );
        let world_last = p.groups.iter().find(|g| g.group == WORLD_GROUP).unwrap();
        assert_eq!(world_last.completed_seq, 1);
        let CallId::Shared(n) = queued else {
            unreachable!()
        };
        r.ring.start(n, 2, 13 * MS);
        r.end(&world_comm, queued, true, true, 14 * MS);
        let p = r.summary(1, 15 * MS);
        assert_eq!(p.idle_ms, Some(1));
        assert_eq!(p.calls, 4);
    }

    #[test]
    fn a_pending_call_overwritten_leaves_no_trace_but_is_counted() {
        let r = Rec::new(1);
        let l = r.reg.register(0, WORLD_GROUP, 4, None);
        let m = r.reg.register(0, 5, 4, None);
        let stuck = r.start(&l, &info(0, WORLD_GROUP, "all_reduce"), 1, 1);
        let other = r.start(&m, &info(0, 5, "barrier"), 1, 2);
        r.end(&m, other, false, true, 3);
        let p = r.summary(0, 4);
        assert!(p.pending.is_empty());
        assert_eq!((p.calls, p.idle_ms), (2, None));
        // Its end changes nothing in the ring, but is counted.
        r.ring_end(stuck, true, 5);
        l.ended(stuck, false, Some((1, "all_reduce")), 5);
        assert_eq!(r.summary(0, 6).idle_ms, Some(0));
        assert_eq!(r.slot(other).unwrap().state, CallState::Completed);
    }

    #[test]
    fn the_summary_is_bounded() {
        let r = Rec::new(1000);
        for g in 0..200u64 {
            let l = r.reg.register(0, g, 4, None);
            let id = r.start(&l, &info(0, g, "all_reduce"), 1, g * MS + 1);
            if g >= 100 {
                r.end(&l, id, false, true, g * MS + 1);
            } else {
                r.waiting(id, 0..100);
            }
        }
        let p = r.summary(0, 1000 * MS);
        p.check().unwrap();
        assert_eq!(p.pending.len(), MAX_PENDING);
        // The oldest pending calls are kept.
        assert_eq!(p.pending[0].group, 0);
        assert_eq!(p.groups.len(), MAX_GROUPS);
        assert_eq!(p.calls, 200);
    }
}
