//! Each communicator's part of the recorder ([`Live`]): who it is (group, ranks), the calls
//! it has open and its counts, written by the communicator's own calls with no global lock
//! (and, for a call run on its caller's thread, with no atomic read-modify-write either: it
//! runs under the communicator's state lock, one writer at a time), read by the heartbeat
//! summary through the [`Registry`] of this process. A communicator
//! dropped leaves its counts and last completed call behind (`Retired`), so a rank's summary
//! still counts them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::entry::{CallId, op_code, op_name};
use super::seqlock::{SeqCell, Write};

/// Most (rank, group) pairs of dropped communicators whose last completed call is kept (the
/// least recently active go first); a summary carries at most `MAX_GROUPS` of a rank's.
pub(crate) const MAX_TRACKED_GROUPS: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The last completed collective of one rank in one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupLast {
    pub rank: u32,
    pub group: u64,
    pub group_size: u32,
    pub seq: u64,
    pub op: &'static str,
    /// When (ticks).
    pub at: u64,
}

/// A rank's counts: calls recorded, calls open, when the last one ended (ticks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RankStats {
    pub calls: u64,
    pub in_flight: u64,
    pub last_end: Option<u64>,
}

// Words of `Live::fast` and `Live::slow`.
const S_ENDED: usize = 0;
const S_LAST_END: usize = 1;
const S_DONE_SEQ: usize = 2;
const S_DONE_OP: usize = 3;
const S_DONE_AT: usize = 4;

/// One communicator in the recorder.
#[derive(Debug)]
pub(crate) struct Live {
    key: u64,
    /// Its rank's global rank.
    pub rank: u32,
    /// Its group's id.
    pub group: u64,
    /// Its size.
    pub group_size: u32,
    /// Global rank of each rank (`None`: the same numbers).
    pub globals: Option<Arc<[u32]>>,
    /// The call running on the caller's thread ([`CallId::pack`]ed; 0: none): one at a
    /// time, written under the communicator's state lock.
    running: AtomicU64,
    /// The shared ring's numbers of the calls queued for the progress thread or watched there
    /// (device calls): slower paths, under a lock.
    open: Mutex<Vec<u64>>,
    /// Ended calls, last end, last completed collective (seq, op, when) of the calls run on
    /// the caller's thread: written under the communicator's state lock, one writer at a
    /// time ([`SeqCell::write_alone`]).
    fast: SeqCell<5>,
    /// The same of the queued and watched calls (which may end outside that lock): written
    /// under the cell's own compare-and-swap.
    slow: SeqCell<5>,
}

/// Counts call ended at `now` in `w`, and `done` (a completed collective's seq and op).
#[inline]
fn count_end(w: &Write<'_, 5>, done: Option<(u64, &str)>, now: u64) {
    w.set(S_ENDED, w.get(S_ENDED) + 1);
    w.set(S_LAST_END, now);
    if let Some((seq, op)) = done {
        w.set(S_DONE_SEQ, seq);
        w.set(S_DONE_OP, op_code(op));
        w.set(S_DONE_AT, now);
    }
}

impl Live {
    /// The global rank of rank `local`.
    pub(crate) fn global(&self, local: usize) -> u32 {
        match &self.globals {
            Some(g) => g.get(local).copied().unwrap_or(local as u32),
            None => local as u32,
        }
    }

    /// Call `id` runs on the caller's thread, under the communicator's state lock.
    #[inline]
    pub(crate) fn running(&self, id: CallId) {
        self.running.store(id.pack(), Ordering::Release);
    }

    /// Call `n` of the shared ring is queued or watched (it ends with `listed`).
    pub(crate) fn listed(&self, n: u64) {
        lock(&self.open).push(n);
    }

    /// Call `id` ended (`listed`: it was [`listed`](Self::listed), else it was
    /// [`running`](Self::running) and ends under the communicator's state lock); a completed
    /// collective (`done`: its seq and op) becomes the group's last.
    #[inline]
    pub(crate) fn ended(&self, id: CallId, listed: bool, done: Option<(u64, &str)>, now: u64) {
        if listed {
            count_end(&self.slow.write(), done, now);
            if let CallId::Shared(n) = id {
                let mut open = lock(&self.open);
                if let Some(i) = open.iter().position(|x| *x == n) {
                    open.remove(i);
                }
            }
        } else {
            // One writer: the thread that holds the communicator's state lock.
            count_end(&self.fast.write_alone(), done, now);
            if self.running.load(Ordering::Relaxed) == id.pack() {
                self.running.store(0, Ordering::Release);
            }
        }
    }

    /// Its open calls: the listed ones (oldest first), then the running one.
    pub(crate) fn open(&self) -> Vec<CallId> {
        let mut ns = lock(&self.open).clone();
        ns.sort_unstable();
        let mut ids: Vec<CallId> = ns.into_iter().map(CallId::Shared).collect();
        ids.extend(CallId::unpack(self.running.load(Ordering::Acquire)));
        ids
    }

    /// Its counts and its last completed collective.
    pub(crate) fn stats(&self) -> (RankStats, Option<GroupLast>) {
        let open = self.open().len() as u64;
        let f = self.fast.read().unwrap_or_default();
        let s = self.slow.read().unwrap_or_default();
        // The sum of the counts, the later end, the later completed collective.
        let mut w = if s[S_DONE_AT] > f[S_DONE_AT] { s } else { f };
        w[S_ENDED] = f[S_ENDED] + s[S_ENDED];
        w[S_LAST_END] = f[S_LAST_END].max(s[S_LAST_END]);
        let stats = RankStats {
            calls: w[S_ENDED] + open,
            in_flight: open,
            last_end: (w[S_LAST_END] != 0).then_some(w[S_LAST_END]),
        };
        let last = (w[S_DONE_AT] != 0).then(|| GroupLast {
            rank: self.rank,
            group: self.group,
            group_size: self.group_size,
            seq: w[S_DONE_SEQ],
            op: op_name(w[S_DONE_OP]),
            at: w[S_DONE_AT],
        });
        (stats, last)
    }
}

/// The communicators of this process, and what dropped ones left.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    inner: Mutex<Lives>,
}

#[derive(Debug, Default)]
struct Lives {
    next_key: u64,
    all: Vec<Arc<Live>>,
    /// Dropped communicators' counts, per global rank.
    retired_ranks: Vec<(u32, RankStats)>,
    /// Dropped communicators' last completed collectives.
    retired_groups: Vec<GroupLast>,
}

impl Lives {
    /// Folds the communicators dropped with no call open into the retired tables.
    fn prune(&mut self) {
        let mut i = 0;
        while i < self.all.len() {
            let l = &self.all[i];
            if Arc::strong_count(l) > 1 || !l.open().is_empty() {
                i += 1;
                continue;
            }
            let l = self.all.swap_remove(i);
            let (s, last) = l.stats();
            match self.retired_ranks.iter_mut().find(|(r, _)| *r == l.rank) {
                Some((_, r)) => {
                    r.calls += s.calls;
                    r.last_end = r.last_end.max(s.last_end);
                }
                None => self.retired_ranks.push((l.rank, s)),
            }
            if let Some(last) = last {
                merge_group(&mut self.retired_groups, last);
            }
        }
    }
}

/// `last` into `groups`: replaces the same (rank, group) if newer, else is added (the least
/// recently active pair goes when there are [`MAX_TRACKED_GROUPS`]).
fn merge_group(groups: &mut Vec<GroupLast>, last: GroupLast) {
    match groups
        .iter()
        .position(|g| g.rank == last.rank && g.group == last.group)
    {
        Some(i) if groups[i].at <= last.at => groups[i] = last,
        Some(_) => {}
        None if groups.len() < MAX_TRACKED_GROUPS => groups.push(last),
        None => {
            if let Some(oldest) = groups.iter_mut().min_by_key(|g| g.at)
                && oldest.at < last.at
            {
                *oldest = last;
            }
        }
    }
}

/// What a rank's summary reads: its communicators' open calls (per communicator), its last
/// completed collective per group (in the order the groups first appeared), its counts.
#[derive(Debug, Default)]
pub(crate) struct RankView {
    pub open: Vec<Vec<CallId>>,
    pub groups: Vec<GroupLast>,
    pub stats: RankStats,
}

impl Registry {
    /// A communicator: rank `rank` (global) of group `group` of `group_size`.
    pub(crate) fn register(
        &self,
        rank: u32,
        group: u64,
        group_size: u32,
        globals: Option<Arc<[u32]>>,
    ) -> Arc<Live> {
        let mut g = lock(&self.inner);
        g.prune();
        g.next_key += 1;
        let live = Arc::new(Live {
            key: g.next_key,
            rank,
            group,
            group_size,
            globals,
            running: AtomicU64::new(0),
            open: Mutex::new(Vec::new()),
            fast: SeqCell::default(),
            slow: SeqCell::default(),
        });
        g.all.push(live.clone());
        live
    }

    /// The communicator `key` names, if it is alive.
    pub(crate) fn get(&self, key: u64) -> Option<Arc<Live>> {
        lock(&self.inner).all.iter().find(|l| l.key == key).cloned()
    }

    /// Rank `rank`'s view.
    pub(crate) fn view(&self, rank: u32) -> RankView {
        let mut g = lock(&self.inner);
        g.prune();
        let mut v = RankView::default();
        if let Some((_, s)) = g.retired_ranks.iter().find(|(r, _)| *r == rank) {
            v.stats = *s;
        }
        v.groups = g
            .retired_groups
            .iter()
            .filter(|x| x.rank == rank)
            .copied()
            .collect();
        for l in g.all.iter().filter(|l| l.rank == rank) {
            let (s, last) = l.stats();
            v.stats.calls += s.calls;
            v.stats.in_flight += s.in_flight;
            v.stats.last_end = v.stats.last_end.max(s.last_end);
            if let Some(last) = last {
                merge_group(&mut v.groups, last);
            }
            let open = l.open();
            if !open.is_empty() {
                v.open.push(open);
            }
        }
        v
    }
}

impl Live {
    /// Its key in the registry.
    pub(crate) fn key(&self) -> u64 {
        self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_last_calls_outlive_their_communicator() {
        let reg = Registry::default();
        let local = |index| CallId::Local { ring: 1, index };
        let a = reg.register(3, 0, 4, None);
        a.running(local(0));
        assert_eq!(reg.view(3).open, vec![vec![local(0)]]);
        assert_eq!(reg.view(3).stats.in_flight, 1);
        a.ended(local(0), false, Some((1, "all_reduce")), 10);
        a.listed(1);
        a.listed(2);
        a.ended(CallId::Shared(1), true, None, 11);
        let v = reg.view(3);
        assert_eq!(v.open, vec![vec![CallId::Shared(2)]]);
        assert_eq!(
            (v.stats.calls, v.stats.in_flight, v.stats.last_end),
            (3, 1, Some(11))
        );
        assert_eq!((v.groups[0].seq, v.groups[0].op), (1, "all_reduce"));
        a.ended(CallId::Shared(2), true, Some((2, "barrier")), 12);
        drop(a);
        let b = reg.register(3, 9, 2, None);
        b.running(local(3));
        b.ended(local(3), false, Some((1, "broadcast")), 13);
        let v = reg.view(3);
        assert_eq!(lock(&reg.inner).all.len(), 1, "the dropped one was folded");
        assert_eq!((v.stats.calls, v.stats.last_end), (4, Some(13)));
        let groups: Vec<_> = v.groups.iter().map(|g| (g.group, g.seq, g.op)).collect();
        assert_eq!(groups, vec![(0, 2, "barrier"), (9, 1, "broadcast")]);
        assert_eq!(reg.view(4).stats, RankStats::default());
    }

    #[test]
    fn tracked_groups_are_bounded() {
        let mut groups = Vec::new();
        for g in 0..(MAX_TRACKED_GROUPS as u64 + 10) {
            let last = GroupLast {
                rank: 0,
                group: g,
                group_size: 2,
                seq: 1,
                op: "barrier",
                at: g + 1,
            };
            merge_group(&mut groups, last);
        }
        assert_eq!(groups.len(), MAX_TRACKED_GROUPS);
        assert!(groups.iter().all(|g| g.group >= 10));
    }
}
