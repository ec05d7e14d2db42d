//! The flight recorder: every call of every communicator of this process, in fixed rings,
//! cheap enough to stay on. A call run on its caller's thread from start to end (the fast
//! path: a blocking call) goes to that thread's ring (`local.rs`, one writer: a plain store
//! numbers it, a sequence lock taken with plain stores keeps readers from torn entries, no
//! atomic read-modify-write); a call queued for a progress thread or watched by it goes to
//! the shared ring (`ring.rs`: a `fetch_add` claims a slot, a compare-and-swap takes its
//! sequence lock). Readers merge the rings by time and number the calls (`snapshot.rs`).
//! One TSC read per call on the fast path (`clock.rs`), no allocation; each communicator
//! keeps its open calls and counts for the summary (`live.rs`); the peers a call waits for
//! are written only where a wait parks, after its spin budget.
//!
//! * [`summary`]: a rank's compact summary for its heartbeats ([`Progress`]);
//! * [`entries`]: a snapshot of the rings, merged in time order;
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

mod asks;
mod clock;
pub mod config;
mod entry;
mod fr;
mod live;
mod local;
mod pickle;
mod ring;
mod seqlock;
mod slots;
mod snapshot;
mod summary;
mod threads;

use std::cell::{Cell, OnceCell};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

pub use asks::{DumpAsk, take_dump_ask};
pub use dt_rdzv_proto::native::progress::WORLD_GROUP;
pub use dt_rdzv_proto::native::{CallState, Progress};
pub use entry::{CallInfo, Entry};
pub use fr::{MAX_DUMP_ENTRIES, dump, dump_bytes};
pub(crate) use live::Live;

use clock::Clock;
use entry::CallId;
use live::Registry;
use local::Owner;
use ring::Ring;
use threads::Threads;

/// The recorder of this process.
struct Recorder {
    clock: Clock,
    /// Wall-clock ns when the clock started.
    base_wall_ns: u64,
    /// The calls queued for or watched by a progress thread.
    ring: Ring,
    /// Each thread's calls run from start to end on it.
    threads: Threads,
    /// The communicators, for summaries and the peers a call waits for.
    registry: Registry,
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
            (cap > 0).then(|| {
                let clock = Clock::start();
                Recorder {
                    base_wall_ns: SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64),
                    clock,
                    ring: Ring::new(cap),
                    threads: Threads::new(cap),
                    registry: Registry::default(),
                    groups: Mutex::new(Vec::new()),
                }
            })
        })
        .as_ref()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether the recorder is on (`DTCOMM_FR_BUFFER_SIZE` is not 0).
pub fn enabled() -> bool {
    recorder().is_some()
}

/// The ring's capacity (0: off).
pub fn capacity() -> usize {
    recorder().map_or(0, |r| r.ring.capacity())
}

/// Rank `rank`'s summary for round `round`: its pending calls (the oldest per group, oldest
/// first), its last completed collective per group, how long it has been in no call, cut to
/// the protocol's bounds. Reads each communicator's open calls and counts, not the rings:
/// meant for every heartbeat. Empty when the recorder is off.
pub fn summary(rank: u32, round: u64) -> Progress {
    match recorder() {
        Some(r) => {
            let rate = r.clock.rate();
            let view = r.registry.view(rank);
            let held = r.threads.held(r.ring.next_id());
            summary::summarize(
                &view,
                |id| match id {
                    CallId::Shared(n) => r.ring.slot(n),
                    CallId::Local { ring, index } => {
                        held.rings.iter().find(|x| x.key() == ring)?.slot(index)
                    }
                },
                |t| rate.ns(t),
                rank,
                round,
                rate.now_ticks(),
            )
        }
        None => Progress {
            rank,
            round,
            ..Progress::default()
        },
    }
}

/// A snapshot of the recorder, oldest first (every rank of this process; the newest
/// [`capacity`] calls). Each entry is a consistent copy (never half of one state change and
/// half of the next); record ids are given here (`snapshot.rs`).
pub fn entries() -> Vec<Entry> {
    let Some(r) = recorder() else {
        return Vec::new();
    };
    let rate = r.clock.rate();
    let wall = |t: u64| r.base_wall_ns.saturating_add(rate.ns(t));
    let now = rate.now_ns();
    let held = r.threads.held(r.ring.next_id());
    snapshot::merge(&r.ring, &held.rings, held.freed, r.ring.capacity())
        .into_iter()
        .map(|(record_id, s)| Entry {
            record_id,
            info: s.info,
            seq: s.seq,
            state: s.state,
            time_queued_ns: wall(s.queued),
            time_started_ns: s.started.map(wall),
            time_ended_ns: s.ended.map(wall),
            duration_ns: s
                .ended
                .map_or(now, |t| rate.ns(t))
                .saturating_sub(rate.ns(s.queued)),
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

/// A communicator in the recorder: `group`'s rank `local` (`None` when the recorder is off).
pub(crate) fn register(group: &Group, local: usize, size: usize) -> Option<Arc<Live>> {
    let r = recorder()?;
    Some(r.registry.register(
        group.global(local),
        group.id,
        size as u32,
        group.globals.clone(),
    ))
}

/// A call being recorded: what [`queued`], [`started`] and [`ended`] pass along.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    /// Where it is: a call of this thread's ring ends on this thread (under the
    /// communicator's state lock), one of the shared ring anywhere.
    id: CallId,
    seq: u64,
    op: &'static str,
    p2p: bool,
    /// In the shared ring and the communicator's list of open calls (queued or watched, or
    /// no thread ring was left), not its running slot.
    listed: bool,
    /// When it started (ticks; when it was queued, until it starts).
    at: u64,
    /// Its end reads the clock whatever happens (queued, watched, or big): see [`ended`].
    timed: bool,
}

/// Calls moving at least this many bytes read the clock at their end even when they never
/// wait: copying and reducing them takes microseconds.
const TIMED_BYTES: u64 = 64 << 10;

thread_local! {
    /// The call this thread runs now: its [`CallId::pack`] (0: none), its communicator's key
    /// (for [`waiting`]), and whether it has waited ([`note_wait`]).
    static CURRENT: Cell<(u64, u64, bool)> = const { Cell::new((0, 0, false)) };
    /// This thread's ring, made at its first call run here (`None`: no ring was left; its
    /// calls go to the shared ring).
    static OWN: OnceCell<Option<Owner>> = const { OnceCell::new() };
}

/// `f` on this thread's ring, made now if it has none yet (`None`: none, or the thread is
/// ending and its thread-locals are gone).
#[inline]
fn with_own<T>(r: &Recorder, f: impl FnOnce(&Owner) -> T) -> Option<T> {
    OWN.try_with(|o| {
        o.get_or_init(|| r.threads.open(r.ring.next_id()))
            .as_ref()
            .map(f)
    })
    .ok()
    .flatten()
}

/// `f` on this thread's ring if it is the one with key `ring` (a call in a thread ring is
/// written by its thread only).
#[inline]
fn on_own(ring: u32, f: impl FnOnce(&Owner)) {
    let _ = OWN.try_with(|o| {
        if let Some(Some(own)) = o.get()
            && own.key() == ring
        {
            f(own);
        }
    });
}

/// Records a call of `live` submitted behind others (its sequence number comes when it
/// starts).
pub(crate) fn queued(live: &Live, info: &CallInfo) -> Option<Record> {
    let r = recorder()?;
    let now = r.clock.now();
    let n = r.ring.push(info, 0, CallState::Queued, now);
    live.listed(n);
    Some(Record {
        id: CallId::Shared(n),
        seq: 0,
        op: info.op,
        p2p: info.p2p,
        listed: true,
        at: now,
        timed: true,
    })
}

/// The call `queued` (or a new one of `info`) of `live` starts on this thread with sequence
/// number `seq`, under the communicator's state lock. A new one that is `watched` (a device
/// call the progress thread follows to its end) goes to the shared ring and the list of open
/// calls; any other new one (it ends on this thread, under the same lock) to this thread's
/// ring: the fast path.
pub(crate) fn started(
    live: &Live,
    queued: Option<Record>,
    info: impl FnOnce() -> CallInfo,
    seq: u64,
    watched: bool,
) -> Option<Record> {
    let r = recorder()?;
    let now = r.clock.now();
    let rec = match queued {
        Some(q) => {
            if let CallId::Shared(n) = q.id {
                r.ring.start(n, seq, now);
            }
            Record { seq, at: now, ..q }
        }
        None => {
            let info = info();
            let local = (!watched)
                .then(|| {
                    with_own(r, |o| CallId::Local {
                        ring: o.key(),
                        index: o.push(&info, seq, CallState::Started, now),
                    })
                })
                .flatten();
            let (id, listed) = match local {
                Some(id) => {
                    live.running(id);
                    (id, false)
                }
                None => {
                    let n = r.ring.push(&info, seq, CallState::Started, now);
                    live.listed(n);
                    (CallId::Shared(n), true)
                }
            };
            let bytes = info.in_count.max(info.out_count) * info.dtype.size() as u64;
            Record {
                id,
                seq,
                op: info.op,
                p2p: info.p2p,
                listed,
                at: now,
                timed: watched || bytes >= TIMED_BYTES,
            }
        }
    };
    CURRENT.with(|c| c.set((rec.id.pack(), live.key(), false)));
    Some(rec)
}

/// The call ended (failed when `ok` is false). A call that ran on the caller's thread ends
/// there, under the communicator's state lock.
///
/// Its end time is a clock read only when the call may have taken long: it waited for a peer
/// ([`note_wait`]: it checked its deadline, which a wait does once its spin is over), it moved
/// [`TIMED_BYTES`] or more, or it was queued or watched. Otherwise (a small call that never
/// waited: a few microseconds at most, the spin included) it ends when it started, which
/// saves the fast path one clock read (~10-20 ns on a VM); like torch's "discovered
/// completed" time, a call's end is then known to within its spin.
pub(crate) fn ended(live: &Live, rec: Record, ok: bool) {
    let Some(r) = recorder() else {
        return;
    };
    let waited = CURRENT.with(|c| {
        let (id, _, waited) = c.get();
        if id == rec.id.pack() {
            c.set((0, 0, false));
            waited
        } else {
            true
        }
    });
    let now = if rec.timed || waited {
        r.clock.now()
    } else {
        rec.at
    };
    match rec.id {
        CallId::Shared(n) => r.ring.end(n, ok, now),
        CallId::Local { ring, index } => on_own(ring, |o| o.end(index, ok, now)),
    }
    let done = (ok && !rec.p2p).then_some((rec.seq, rec.op));
    live.ended(rec.id, rec.listed, done, now);
}

/// The call this thread runs waits for a peer (its spin is over and it checks its deadline):
/// its end reads the clock ([`ended`]). One thread-local store.
#[inline]
pub(crate) fn note_wait() {
    CURRENT.with(|c| {
        let (id, key, _) = c.get();
        c.set((id, key, true));
    });
}

/// The call this thread runs waits for `ranks` (its group's ranks): called where a wait
/// parks, not on every spin.
pub(crate) fn waiting(ranks: &[usize]) {
    let Some(r) = recorder() else {
        return;
    };
    note_wait();
    let (id, key, _) = CURRENT.with(Cell::get);
    let (Some(id), Some(live)) = (CallId::unpack(id), r.registry.get(key)) else {
        return;
    };
    let globals = ranks.iter().map(|l| live.global(*l));
    match id {
        CallId::Shared(n) => r.ring.waiting(n, globals),
        CallId::Local { ring, index } => on_own(ring, |o| o.waiting(index, globals)),
    }
}

/// How long after a dump of its own a rank ignores a peer's ask to dump: the same hang.
const ASKED_DUMP_QUIET: std::time::Duration = std::time::Duration::from_secs(30);

/// When this process last dumped on a timeout (its own call's or a peer's ask).
static LAST_TIMEOUT_DUMP: Mutex<Option<std::time::Instant>> = Mutex::new(None);

/// A call of global rank `rank` timed out: dumps this rank's trace if the environment asks
/// (`TORCH_FR_DUMP_ON_TIMEOUT`), to `TORCH_FR_DUMP_TEMP_FILE` + rank. Logs where it went.
/// Whether the environment asks (then the caller asks the other ranks to dump too).
pub(crate) fn on_timeout(rank: u32) -> bool {
    if !enabled() || !config::dump_on_timeout() {
        return false;
    }
    timeout_dump(rank, "a call timed out");
    true
}

/// Rank `asker` of this rank's round timed out (`why`) and asked every rank to dump: dumps
/// global rank `rank`'s trace if the environment asks for dumps on a timeout, unless this
/// process dumped on a timeout within the last 30 s (its own timeout in the same hang). The
/// rank in no call, the usual culprit, leaves its trace this way.
pub fn on_peer_timeout(rank: u32, asker: Option<u32>, why: &str) {
    if !dumps_on_timeout() {
        return;
    }
    let recent = LAST_TIMEOUT_DUMP
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_some_and(|t| t.elapsed() < ASKED_DUMP_QUIET);
    if !recent {
        let who = asker.map_or_else(|| "a rank".to_owned(), |a| format!("rank {a}"));
        timeout_dump(rank, &format!("{who} asked: {why}"));
    }
}

/// Whether a timeout dumps the trace (the recorder is on and `TORCH_FR_DUMP_ON_TIMEOUT` or
/// its twins say so): a front end polls a store for the others' asks only then.
pub fn dumps_on_timeout() -> bool {
    enabled() && config::dump_on_timeout()
}

/// A call of global rank `rank` timed out and it dumped: leaves the ask for the others for a
/// front end that meets through a store to post ([`take_dump_ask`]).
pub(crate) fn post_dump_ask(rank: u32, why: &str) {
    asks::OUTBOX.post(rank, why);
}

fn timeout_dump(rank: u32, cause: &str) {
    *LAST_TIMEOUT_DUMP.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
    let path = config::dump_file(rank);
    match dump(std::path::Path::new(&path), Some(rank)) {
        Ok(n) => {
            tracing::warn!(
                rank,
                "dtcomm: flight recorder: {n} calls dumped to {path} ({cause})"
            )
        }
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
