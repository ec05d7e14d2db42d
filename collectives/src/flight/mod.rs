//! The flight recorder: every call of every communicator of this process, in a fixed ring
//! (`ring.rs`), cheap enough to stay on (one uncontended lock per state change; the peers a
//! call waits for are written only where a wait parks, after its spin budget).
//!
//! * [`summary`]: a rank's compact summary for its heartbeats ([`Progress`]);
//! * [`entries`]: a snapshot of the ring;
//! * [`dump`] / [`dump_bytes`]: this process's trace in torch's Flight Recorder format
//!   (`fr.rs`, a pickle `torchfrtrace` reads), and a dump when a call times out if
//!   `TORCH_FR_DUMP_ON_TIMEOUT` (or `DTCOMM_FR_DUMP_ON_TIMEOUT`) is set;
//! * `config.rs`: the variables (`DTCOMM_FR_BUFFER_SIZE`, default 2,000; 0 turns it off).
//!
//! Groups: a world communicator is group 0 ([`WORLD_GROUP`]); a subgroup made by
//! [`Communicator::subset`](crate::Communicator::subset) gets an id every member derives
//! alike (its parent's id, its creation count and its sorted global ranks), below 2^53 so
//! that JSON readers keep it exact. Ranks are global ranks: a world communicator's own, or
//! what [`Communicator::set_flight_group`](crate::Communicator::set_flight_group) says.

pub mod config;
mod entry;
mod fr;
mod pickle;
mod ring;
mod summary;

use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub use dt_rdzv_proto::native::progress::WORLD_GROUP;
pub use dt_rdzv_proto::native::{CallState, Progress};
pub use entry::{CallInfo, Entry};
pub use fr::{MAX_DUMP_ENTRIES, dump, dump_bytes};

use ring::Ring;

/// The recorder of this process.
struct Recorder {
    base: Instant,
    base_wall_ns: u64,
    ring: Mutex<Ring>,
    /// The global ranks of the groups made here: (group, ranks), for the dumps' `pg_config`.
    groups: Mutex<Vec<(u64, Arc<[u32]>)>>,
}

/// Most subgroups whose ranks are remembered for dumps.
const MAX_REGISTERED_GROUPS: usize = 4096;

static RECORDER: OnceLock<Option<Recorder>> = OnceLock::new();

fn recorder() -> Option<&'static Recorder> {
    RECORDER
        .get_or_init(|| {
            let cap = config::capacity();
            (cap > 0).then(|| Recorder {
                base: Instant::now(),
                base_wall_ns: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
                ring: Mutex::new(Ring::new(cap)),
                groups: Mutex::new(Vec::new()),
            })
        })
        .as_ref()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Recorder {
    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }
    fn wall(&self, mono: u64) -> u64 {
        self.base_wall_ns.saturating_add(mono)
    }
}

/// Whether the recorder is on (`DTCOMM_FR_BUFFER_SIZE` is not 0).
pub fn enabled() -> bool {
    recorder().is_some()
}

/// The ring's capacity (0: off).
pub fn capacity() -> usize {
    recorder().map_or(0, |r| lock(&r.ring).capacity())
}

/// Rank `rank`'s summary for round `round`: its pending calls (the oldest per group, oldest
/// first), its last completed collective per group, how long it has been in no call, cut to
/// the protocol's bounds. Reads the calls in flight and a small table, not the ring: meant
/// for every heartbeat. Empty when the recorder is off.
pub fn summary(rank: u32, round: u64) -> Progress {
    match recorder() {
        Some(r) => {
            let ring = lock(&r.ring);
            summary::summarize(&ring, rank, round, r.now())
        }
        None => Progress {
            rank,
            round,
            ..Progress::default()
        },
    }
}

/// A snapshot of the ring, oldest first (every rank of this process).
pub fn entries() -> Vec<Entry> {
    let Some(r) = recorder() else {
        return Vec::new();
    };
    let now = r.now();
    let ring = lock(&r.ring);
    ring.slots()
        .map(|s| Entry {
            record_id: s.id,
            info: s.info,
            seq: s.seq,
            state: s.state,
            time_queued_ns: r.wall(s.queued),
            time_started_ns: s.started.map(|t| r.wall(t)),
            time_ended_ns: s.ended.map(|t| r.wall(t)),
            duration_ns: s.ended.unwrap_or(now).saturating_sub(s.queued),
            waiting_for: s.waiting_for().to_vec(),
            waiting_total: s.waiting_total,
        })
        .collect()
}

/// The global ranks of group `group` (registered subgroups; a world group's are `0..size`).
pub(crate) fn group_ranks(group: u64, size: u32) -> Vec<u32> {
    if group != WORLD_GROUP
        && let Some(r) = recorder()
        && let Some((_, ranks)) = lock(&r.groups).iter().find(|(g, _)| *g == group)
    {
        return ranks.to_vec();
    }
    (0..size).collect()
}

/// Who a communicator is to the recorder: its group id and its ranks' global ranks.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    /// The group's id ([`WORLD_GROUP`] for a world communicator).
    pub id: u64,
    /// Global rank of each rank (`None`: the same numbers).
    pub globals: Option<Arc<[u32]>>,
}

impl Group {
    /// A world communicator's.
    pub(crate) const WORLD: Group = Group {
        id: WORLD_GROUP,
        globals: None,
    };
    /// The same, to borrow from.
    pub(crate) fn world() -> &'static Group {
        static W: Group = Group::WORLD;
        &W
    }

    /// A group with id `id` whose rank `i` is global rank `globals[i]` (remembered for dumps).
    pub(crate) fn named(id: u64, globals: Vec<u32>) -> Group {
        let globals: Arc<[u32]> = globals.into();
        if let Some(r) = recorder() {
            let mut g = lock(&r.groups);
            if !g.iter().any(|(x, _)| *x == id) {
                if g.len() >= MAX_REGISTERED_GROUPS {
                    g.remove(0);
                }
                g.push((id, globals.clone()));
            }
        }
        Group {
            id,
            globals: Some(globals),
        }
    }

    /// The global rank of rank `local`.
    pub(crate) fn global(&self, local: usize) -> u32 {
        match &self.globals {
            Some(g) => g.get(local).copied().unwrap_or(local as u32),
            None => local as u32,
        }
    }

    /// The group of the `count`-th subgroup made from this one, of `ranks` (ranks of this
    /// group): every member computes the same id.
    pub(crate) fn subgroup(&self, count: u64, ranks: &[usize]) -> Group {
        let globals: Vec<u32> = ranks.iter().map(|r| self.global(*r)).collect();
        let mut sorted = globals.clone();
        sorted.sort_unstable();
        Group::named(subgroup_id(self.id, count, &sorted), globals)
    }
}

/// FNV-1a of the parent, the creation count and the sorted global ranks, in `1..2^53`.
pub(crate) fn subgroup_id(parent: u64, count: u64, sorted: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for x in b {
            h ^= u64::from(*x);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(&parent.to_le_bytes());
    eat(&count.to_le_bytes());
    for r in sorted {
        eat(&r.to_le_bytes());
    }
    let id = h & ((1 << 53) - 1);
    if id == WORLD_GROUP { 1 } else { id }
}

/// A call being recorded: what [`queued`], [`started`] and [`ended`] pass along.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    id: u64,
    info: CallInfo,
    seq: u64,
}

/// A call running on this thread: its record id and its group's global ranks.
type Current = (u64, Option<Arc<[u32]>>);

thread_local! {
    /// The call this thread runs now, and its group's global ranks (for [`waiting`]).
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// Records a call submitted behind others (its sequence number comes when it starts).
pub(crate) fn queued(info: CallInfo) -> Option<Record> {
    let r = recorder()?;
    let now = r.now();
    let id = lock(&r.ring).push(info, 0, CallState::Queued, now);
    Some(Record { id, info, seq: 0 })
}

/// The call `queued` (or a new one of `info`) starts on this thread with sequence number
/// `seq`; `globals` maps its group's ranks to global ranks for [`waiting`].
pub(crate) fn started(
    queued: Option<Record>,
    info: CallInfo,
    seq: u64,
    globals: Option<&Arc<[u32]>>,
) -> Option<Record> {
    let r = recorder()?;
    let now = r.now();
    let id = {
        let mut ring = lock(&r.ring);
        match queued {
            Some(q) => {
                ring.start(q.id, seq, now);
                q.id
            }
            None => ring.push(info, seq, CallState::Started, now),
        }
    };
    CURRENT.with(|c| *c.borrow_mut() = Some((id, globals.cloned())));
    Some(Record { id, info, seq })
}

/// The call ended (failed when `ok` is false).
pub(crate) fn ended(rec: Option<Record>, ok: bool) {
    let (Some(r), Some(rec)) = (recorder(), rec) else {
        return;
    };
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        if c.as_ref().is_some_and(|(id, _)| *id == rec.id) {
            *c = None;
        }
    });
    let now = r.now();
    lock(&r.ring).end(rec.id, &rec.info, rec.seq, ok, now);
}

/// The call this thread runs waits for `ranks` (its group's ranks): called where a wait
/// parks, not on every spin.
pub(crate) fn waiting(ranks: &[usize]) {
    let Some(r) = recorder() else {
        return;
    };
    CURRENT.with(|c| {
        if let Some((id, globals)) = &*c.borrow() {
            let global = |l: usize| match globals {
                Some(g) => g.get(l).copied().unwrap_or(l as u32),
                None => l as u32,
            };
            lock(&r.ring).waiting(*id, ranks.iter().map(|l| global(*l)));
        }
    });
}

/// A call of global rank `rank` timed out: dumps this rank's trace if the environment asks
/// (`TORCH_FR_DUMP_ON_TIMEOUT`), to `TORCH_FR_DUMP_TEMP_FILE` + rank. Logs where it went.
pub(crate) fn on_timeout(rank: u32) {
    if !enabled() || !config::dump_on_timeout() {
        return;
    }
    let path = config::dump_file(rank);
    match dump(std::path::Path::new(&path), Some(rank)) {
        Ok(n) => tracing::warn!(rank, "dtcomm: flight recorder: {n} calls dumped to {path}"),
        Err(e) => tracing::error!(rank, "dtcomm: flight recorder: cannot dump to {path}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subgroup_ids_agree_and_differ() {
        let a = subgroup_id(0, 1, &[0, 2]);
        assert_eq!(a, subgroup_id(0, 1, &[0, 2]));
        assert_ne!(a, subgroup_id(0, 2, &[0, 2]));
        assert_ne!(a, subgroup_id(0, 1, &[0, 3]));
        assert!(a > 0 && a < 1 << 53);
        let s = Group::WORLD.subgroup(1, &[2, 0]);
        assert_eq!(s.global(0), 2);
        assert_eq!(s.id, subgroup_id(0, 1, &[0, 2]));
        // The subgroup's own subgroups map through to global ranks.
        assert_eq!(s.subgroup(1, &[0]).global(0), 2);
    }
}
