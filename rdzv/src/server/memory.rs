//! The server's one memory budget (`--max-memory-bytes`): every byte a client can make the
//! server hold, whichever door it came through, is counted against it.
//!
//! Each door keeps its own accounts and bounds (the TCPStore and etcd v2 doors' store quota,
//! the native door's partial frames and queues) and registers what it holds here as a gauge
//! ([`Held`]), read without a lock. Before a door lets a client add bytes it asks
//! [`ServerMemory::room`] (or, for the two stores' engines, is told what the rest of the
//! server holds, [`ServerMemory::elsewhere`]), so that the doors together stay within the one
//! budget, and a refusal names it with what each door holds.
//!
//! Partly received frames, which anyone who reaches a port can make the server hold, have a
//! quarter of the budget to themselves ([`ServerMemory::frame_room`]), shared out among the
//! doors ([`Door::frame_share`]: three eighths each for the TCPStore and native doors' frames,
//! a quarter for the etcd door's request bodies), and the rest (stored values,
//! bookkeeping, queued answers, published configuration) the other three quarters: strangers
//! holding frames cannot get a client's writes refused, nor one door's the other's frames,
//! and all of it together never passes the budget.
//!
//! The budget defaults to three quarters of the process's cgroup memory limit (a container's
//! `resources.limits.memory`), leaving the rest for the runtime, buffers and allocator slack;
//! without a cgroup limit there is none unless one is given.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// A door whose holdings count against the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Door {
    /// The TCPStore port: keys and values, bookkeeping, waits, queued replies, partial frames.
    TcpStore,
    /// The etcd v2 port: keys and values, run bookkeeping, answers being sent.
    EtcdV2,
    /// The native port: partly received frames, queued messages, published configuration.
    Native,
}

impl Door {
    const ALL: [Door; 3] = [Door::TcpStore, Door::EtcdV2, Door::Native];

    fn index(self) -> usize {
        self as usize
    }

    /// Its share of the partial frames' quarter, in eighths: what it may hold of requests
    /// still arriving (the TCPStore and native doors' frames, the etcd door's bodies).
    fn frame_share(self) -> u64 {
        match self {
            Door::TcpStore | Door::Native => 3,
            Door::EtcdV2 => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Door::TcpStore => "TCPStore",
            Door::EtcdV2 => "etcd v2",
            Door::Native => "native",
        }
    }
}

/// What a door holds for its clients now, in bytes (a gauge of atomics: read often).
pub(crate) trait Held: Send + Sync {
    /// Bytes held now, partly received frames apart.
    fn held(&self) -> u64;
    /// Bytes of partly received frames now.
    fn frames(&self) -> u64;
}

/// The budget and the doors' gauges.
pub(crate) struct ServerMemory {
    limit: Option<u64>,
    doors: [OnceLock<Arc<dyn Held>>; 3],
}

impl fmt::Debug for ServerMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerMemory({})", self.describe())
    }
}

/// The flag that sets the budget, as refusals name it.
pub(crate) const FLAG: &str = "--max-memory-bytes";

impl ServerMemory {
    /// A budget of `limit` bytes (`None`: none, only the doors' own bounds).
    pub(crate) fn new(limit: Option<u64>) -> Arc<Self> {
        Arc::new(Self {
            limit,
            doors: Default::default(),
        })
    }

    /// The budget.
    pub(crate) fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// The part of the budget for everything but partly received frames: three quarters.
    pub(crate) fn data_limit(&self) -> Option<u64> {
        self.limit.map(|l| l - l / 4)
    }

    /// The part of the budget for partly received frames, over every door: a quarter.
    pub(crate) fn frame_limit(&self) -> Option<u64> {
        self.limit.map(|l| l / 4)
    }

    /// `door` counts its holdings with `held` (once per door; a second is ignored).
    pub(crate) fn register(&self, door: Door, held: Arc<dyn Held>) {
        let _ = self.doors[door.index()].set(held);
    }

    /// What `door` holds now, partly received frames apart.
    pub(crate) fn held(&self, door: Door) -> u64 {
        self.doors[door.index()].get().map_or(0, |h| h.held())
    }

    /// What `door` holds in partly received frames now.
    pub(crate) fn frames(&self, door: Door) -> u64 {
        self.doors[door.index()].get().map_or(0, |h| h.frames())
    }

    /// What every door holds now, partly received frames apart.
    pub(crate) fn total(&self) -> u64 {
        Door::ALL.iter().map(|d| self.held(*d)).sum()
    }

    /// What the doors other than `door` hold now, partly received frames apart: for a store
    /// engine, beside [`data_limit`](Self::data_limit).
    pub(crate) fn elsewhere(&self, door: Door) -> u64 {
        Door::ALL
            .iter()
            .filter(|d| **d != door)
            .map(|d| self.held(*d))
            .sum()
    }

    /// Whether `door` may hold `more` bytes (not of a partial frame) beside what every door
    /// holds, within [`data_limit`](Self::data_limit); `Err` names the budget and what each
    /// door holds.
    pub(crate) fn room(&self, door: Door, more: u64) -> Result<(), String> {
        let Some(limit) = self.data_limit() else {
            return Ok(());
        };
        if self.total().saturating_add(more) <= limit {
            return Ok(());
        }
        Err(format!(
            "the server's memory budget is spent: the {} door needs {more} bytes more, and \
             three quarters of the budget ({limit} bytes) is what all but partial frames may \
             hold; {}",
            door.name(),
            self.describe()
        ))
    }

    /// Whether `door` may hold `more` bytes of partly received frames beside its others,
    /// within its share of [`frame_limit`](Self::frame_limit) ([`Door::frame_share`]); `Err`
    /// names the budget.
    pub(crate) fn frame_room(&self, door: Door, more: u64) -> Result<(), String> {
        let Some(limit) = self
            .frame_limit()
            .map(|l| l.saturating_mul(door.frame_share()) / 8)
        else {
            return Ok(());
        };
        let held = self.frames(door);
        if held.saturating_add(more) <= limit {
            return Ok(());
        }
        Err(format!(
            "the server's memory budget for partly received frames is spent: the {} door needs \
             {more} bytes more, and its partial frames hold {held} of their {limit} bytes ({}/32 \
             of the server's budget, {FLAG})",
            door.name(),
            door.frame_share(),
        ))
    }

    /// What each door holds against the budget, in words.
    pub(crate) fn describe(&self) -> String {
        let doors: Vec<String> = Door::ALL
            .iter()
            .map(|d| {
                format!(
                    "{} {} + {} of partial frames",
                    d.name(),
                    self.held(*d),
                    self.frames(*d)
                )
            })
            .collect();
        match self.limit {
            Some(l) => format!(
                "the doors hold {} bytes ({}) of the server's {l}-byte budget ({FLAG})",
                self.total(),
                doors.join(", ")
            ),
            None => format!(
                "the doors hold {} bytes ({}); no server-wide budget ({FLAG})",
                self.total(),
                doors.join(", ")
            ),
        }
    }

    /// Each door's holdings and partial frames, for `/metrics`.
    pub(crate) fn by_door(&self) -> impl Iterator<Item = (&'static str, u64, u64)> + '_ {
        Door::ALL
            .iter()
            .map(|d| (d.name(), self.held(*d), self.frames(*d)))
    }
}

/// Takes `n` from a gauge, stopping at zero (a release counted twice must not wrap it).
pub(crate) fn release(gauge: &AtomicU64, n: u64) {
    let _ = gauge.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(n))
    });
}

/// The budget when none is given: three quarters of the cgroup's memory limit, with where it
/// came from; `None` without a limit.
pub(crate) fn default_budget() -> Option<(u64, String)> {
    let (limit, source) = cgroup_limit()?;
    Some((limit / 4 * 3, format!("3/4 of {source} ({limit} bytes)")))
}

/// The memory limit of this process's cgroup (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`), if it has one.
fn cgroup_limit() -> Option<(u64, String)> {
    for path in [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ] {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Some(limit) = parse_limit(&text)
        {
            return Some((limit, path.to_owned()));
        }
    }
    None
}

/// A cgroup limit file's value: `None` for `max` (v2) or v1's "no limit" (a page-rounded
/// `i64::MAX`, anything past 2^62).
fn parse_limit(text: &str) -> Option<u64> {
    let v: u64 = text.trim().parse().ok()?;
    (v > 0 && v < 1 << 62).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Gauge(AtomicU64, AtomicU64);
    impl Held for Gauge {
        fn held(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
        fn frames(&self) -> u64 {
            self.1.load(Ordering::Relaxed)
        }
    }

    fn gauge(held: u64, frames: u64) -> Arc<Gauge> {
        Arc::new(Gauge(AtomicU64::new(held), AtomicU64::new(frames)))
    }

    #[test]
    fn the_doors_share_one_budget_and_a_refusal_names_each() {
        let m = ServerMemory::new(Some(1000));
        let store = gauge(400, 10);
        let native = gauge(300, 200);
        m.register(Door::TcpStore, store.clone());
        m.register(Door::Native, native.clone());
        assert_eq!((m.total(), m.elsewhere(Door::TcpStore)), (700, 300));
        // Three quarters for all but frames: 750.
        assert!(m.room(Door::EtcdV2, 50).is_ok());
        let why = m.room(Door::EtcdV2, 51).unwrap_err();
        for part in [
            "etcd v2 door needs 51",
            "TCPStore 400 + 10 of partial frames",
            "native 300 + 200",
            "1000-byte budget",
            FLAG,
        ] {
            assert!(why.contains(part), "{why}");
        }
        // A quarter for partial frames (250), three eighths of it for the TCPStore's (93) and
        // the native door's, a quarter for the etcd door's bodies (62).
        assert!(m.frame_room(Door::TcpStore, 83).is_ok());
        let why = m.frame_room(Door::TcpStore, 84).unwrap_err();
        assert!(why.contains("hold 10 of their 93 bytes (3/32"), "{why}");
        assert!(m.frame_room(Door::EtcdV2, 62).is_ok());
        assert!(m.frame_room(Door::EtcdV2, 63).is_err());
        assert!(
            m.frame_room(Door::Native, 1).is_err(),
            "the native door's 200 are over"
        );
        // Strangers' frames do not take from the data's share, and the gauges are read live.
        native.1.store(250, Ordering::Relaxed);
        store.0.store(0, Ordering::Relaxed);
        assert!(m.room(Door::EtcdV2, 450).is_ok());
        assert!(ServerMemory::new(None).room(Door::Native, u64::MAX).is_ok());
        assert!(
            ServerMemory::new(None)
                .frame_room(Door::Native, u64::MAX)
                .is_ok()
        );
    }

    #[test]
    fn cgroup_limits_parse() {
        assert_eq!(parse_limit("2147483648\n"), Some(2 << 30));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712"), None);
        assert_eq!(parse_limit("0"), None);
    }
}
