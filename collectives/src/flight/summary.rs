//! A rank's summary of its calls, for its heartbeats: the oldest pending call per group, the
//! last completed call per group, how long it has been in no call ([`Progress`], already
//! cut to the protocol's bounds). Reads only the calls in flight and the per-group table, not
//! the whole ring: cheap enough for every heartbeat.

use dt_rdzv_proto::native::{GroupProgress, PendingCall, Progress};

use super::ring::Ring;

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

/// Rank `rank`'s summary for round `round`, as of `now` (the ring's clock).
pub(crate) fn summarize(ring: &Ring, rank: u32, round: u64, now: u64) -> Progress {
    let mut pending: Vec<PendingCall> = Vec::new();
    for s in ring.pending().filter(|s| s.info.rank == rank) {
        // Calls run in submission order per communicator: the first one of a group seen is
        // the oldest, the one the group is stuck in.
        if pending.iter().any(|p| p.group == s.info.group) {
            continue;
        }
        pending.push(PendingCall {
            group: s.info.group,
            group_size: s.info.group_size,
            seq: s.seq,
            op: s.info.op.to_owned(),
            state: s.state,
            age_ms: ms(now.saturating_sub(s.queued)),
            peer: s.info.peer,
            waiting_for: s.waiting_for().to_vec(),
        });
    }
    let groups = ring
        .groups
        .iter()
        .filter(|g| g.rank == rank)
        .map(|g| GroupProgress {
            group: g.group,
            group_size: g.group_size,
            completed_seq: g.seq,
            completed_op: g.op.to_owned(),
            completed_age_ms: ms(now.saturating_sub(g.at)),
        })
        .collect();
    let stats = ring.ranks.iter().find(|r| r.rank == rank);
    let idle_ms = stats
        .filter(|r| r.in_flight == 0)
        .and_then(|r| r.last_end)
        .map(|t| ms(now.saturating_sub(t)));
    Progress {
        rank,
        round,
        pending,
        groups,
        idle_ms,
        calls: stats.map_or(0, |r| r.calls),
    }
    .bounded()
}

#[cfg(test)]
mod tests {
    use dt_rdzv_proto::native::CallState;
    use dt_rdzv_proto::native::progress::{MAX_GROUPS, MAX_PENDING, WORLD_GROUP};

    use super::*;
    use crate::flight::ring::tests::info;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_rank_stuck_in_a_collective_names_it_and_whom_it_waits_for() {
        let mut r = Ring::new(16);
        let i = info(2, WORLD_GROUP, "all_reduce");
        for seq in 1..=3 {
            let id = r.push(i, seq, CallState::Started, seq * MS);
            r.end(id, &i, seq, true, seq * MS + 10);
        }
        let stuck = r.push(i, 4, CallState::Started, 10 * MS);
        r.waiting(stuck, [3u32, 5].into_iter());
        // Another rank of this process (in-memory groups) is not in rank 2's summary.
        let other = info(3, WORLD_GROUP, "all_reduce");
        r.push(other, 4, CallState::Started, 10 * MS);
        let p = summarize(&r, 2, 7, 1500 * MS);
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
        let mut r = Ring::new(4);
        let i = info(0, WORLD_GROUP, "barrier");
        let id = r.push(i, 1, CallState::Started, 0);
        r.end(id, &i, 1, true, 2 * MS);
        let p = summarize(&r, 0, 1, 41_002 * MS);
        assert_eq!(p.idle_ms, Some(41_000));
        assert!(p.pending.is_empty());
        // A rank that never called anything: no idle time, no calls.
        let p = summarize(&r, 9, 1, 0);
        assert_eq!((p.idle_ms, p.calls), (None, 0));
    }

    #[test]
    fn groups_and_point_to_point_are_told_apart() {
        let mut r = Ring::new(16);
        let world = info(1, WORLD_GROUP, "all_reduce");
        let id = r.push(world, 1, CallState::Started, 0);
        r.end(id, &world, 1, true, MS);
        let mut sub = info(1, 77, "broadcast");
        sub.group_size = 2;
        let a = r.push(sub, 5, CallState::Started, 2 * MS);
        let mut recv = info(1, WORLD_GROUP, "recv");
        recv.p2p = true;
        recv.peer = Some(0);
        let b = r.push(recv, 3, CallState::Started, 3 * MS);
        // A second call queued behind the world's recv is not listed.
        let queued = r.push(world, 0, CallState::Queued, 4 * MS);
        let p = summarize(&r, 1, 1, 10 * MS);
        assert_eq!(p.pending.len(), 2);
        assert_eq!(p.pending[0].group, 77);
        assert_eq!(p.pending[0].group_size, 2);
        assert_eq!(p.pending[1].op, "recv");
        assert_eq!(p.pending[1].peer, Some(0));
        r.end(b, &recv, 3, true, 11 * MS);
        r.end(a, &sub, 5, true, 12 * MS);
        let p = summarize(&r, 1, 1, 13 * MS);
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
        r.end(queued, &world, 2, true, 14 * MS);
        assert_eq!(summarize(&r, 1, 1, 15 * MS).idle_ms, Some(1));
    }

    #[test]
    fn the_summary_is_bounded() {
        let mut r = Ring::new(1000);
        for g in 0..200u64 {
            let i = info(0, g, "all_reduce");
            let id = r.push(i, 1, CallState::Started, g * MS);
            if g >= 100 {
                r.end(id, &i, 1, true, g * MS);
            } else {
                r.waiting(id, 0..100);
            }
        }
        let p = summarize(&r, 0, 1, 1000 * MS);
        p.check().unwrap();
        assert_eq!(p.pending.len(), MAX_PENDING);
        // The oldest pending calls are kept.
        assert_eq!(p.pending[0].group, 0);
        assert_eq!(p.groups.len(), MAX_GROUPS);
        assert_eq!(p.calls, 200);
    }
}
