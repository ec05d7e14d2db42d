//! Who gets a connection slot on a door (TCPStore, etcd v2, HTTP, torchft): silent or idle
//! connections must not lock real clients (or a liveness probe) out.
//!
//! A connection is *unproven* until its first bytes arrive, which must happen within
//! [`FIRST_BYTES`]. On a door that reports its connections' activity (HTTP), a proven
//! connection is *idle* whenever no request of it is being handled (its head still arriving,
//! or kept alive between requests) and *busy* while one is; on the other doors a proven
//! connection is *held* (torch's TCPStore clients keep an idle connection for the whole job and
//! never reconnect).
//!
//! When the door is full, a new connection evicts the evictable connection (unproven or idle)
//! that has been so the longest, once it has had [`GRACE`] (time for its first bytes, or for
//! its head to be handled), instead of being refused. When every evictable connection is
//! within its grace but they fill more than half the door (a flood: more than `max / 2` new
//! connections within [`GRACE`]), the oldest of them is evicted anyway: a real client has
//! spoken long before half a door of newer connections arrived. Only when the door is full of
//! busy or held connections (or fewer than half are new) is the newest refused (unless one
//! other source holds more than half the door: then that source's newest held connection
//! goes, so that one host's proven-then-silent connections cannot lock out every other
//! host), and on a door
//! with reserved slots ([`Gate::with_reserve`]: `/healthz` on the HTTP port) it gets one of
//! those instead. Past its share of the slots held unproven, a source's new connection
//! replaces that source's own oldest silent one (a burst of real clients from one host is
//! still admitted while there is room).
//!
//! [`Admission`] is the sans-IO rule; [`Gate`] drives it for an accept loop (`gate.rs`).

mod gate;

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

pub(crate) use gate::{Activity, Gate, stop_or_evicted};

/// How long a new connection may stay silent.
pub(crate) const FIRST_BYTES: Duration = Duration::from_secs(5);
/// How long a new (or newly idle) connection is safe from eviction outside a flood.
pub(crate) const GRACE: Duration = Duration::from_millis(250);

/// Fewest held connections of one source that can make it evict its own for another source.
pub(crate) const HOG_MIN: usize = 64;

/// What [`Admission::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Admitted as connection `id`; close connection `evict` first, if any.
    Admit { id: u64, evict: Option<u64> },
    /// Every slot holds a busy or held connection, or one still in its grace: close the new one.
    Refuse,
}

/// Where a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No byte yet.
    Unproven,
    /// Proven, and no request being handled (doors that report activity only).
    Idle,
    /// Proven and handling a request, or proven on a door that does not report activity.
    Held,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    source: IpAddr,
    state: State,
    /// When it arrived (unproven) or last became idle.
    since: Instant,
}

/// The slot rule of one door. Ids grow, so the smallest unproven id of a source is its oldest.
///
/// Every decision is O(log n) in the door's connections: beside the connections themselves it
/// keeps each source's unproven ids, the evictable ones by age, and each source's held ids with
/// their counts, so a door of 100,000 torch ranks' store connections admits each in
/// logarithmic time, not by a scan of all of them.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    max: usize,
    per_source: usize,
    conns: HashMap<u64, Entry>,
    /// Unproven ids per source (ascending: oldest first).
    unproven: HashMap<IpAddr, BTreeSet<u64>>,
    /// Unproven or idle connections, by (since, id): oldest first.
    evictable: BTreeSet<(Instant, u64)>,
    /// Held ids per source (ascending: newest last).
    held: HashMap<IpAddr, BTreeSet<u64>>,
    /// (held count, source) for every source holding any: the largest last.
    held_counts: BTreeSet<(usize, IpAddr)>,
    next: u64,
}

impl Admission {
    /// At most `max` connections; one source holds at most `per_source` unproven ones.
    pub(crate) fn new(max: usize, per_source: usize) -> Self {
        Self {
            max: max.max(1),
            per_source: per_source.max(1),
            ..Self::default()
        }
    }

    /// A share of `max` for one source's unproven connections: an eighth, at least 8.
    pub(crate) fn default_per_source(max: usize) -> usize {
        (max / 8).max(8)
    }

    /// Files connection `id` under its state's indexes.
    fn index(&mut self, id: u64, e: Entry) {
        match e.state {
            State::Unproven => {
                self.unproven.entry(e.source).or_default().insert(id);
                self.evictable.insert((e.since, id));
            }
            State::Idle => {
                self.evictable.insert((e.since, id));
            }
            State::Held => {
                let ids = self.held.entry(e.source).or_default();
                self.held_counts.remove(&(ids.len(), e.source));
                ids.insert(id);
                self.held_counts.insert((ids.len(), e.source));
            }
        }
    }

    /// Takes connection `id` out of its state's indexes.
    fn unindex(&mut self, id: u64, e: Entry) {
        match e.state {
            State::Unproven => {
                if let Some(ids) = self.unproven.get_mut(&e.source) {
                    ids.remove(&id);
                    if ids.is_empty() {
                        self.unproven.remove(&e.source);
                    }
                }
                self.evictable.remove(&(e.since, id));
            }
            State::Idle => {
                self.evictable.remove(&(e.since, id));
            }
            State::Held => {
                if let Some(ids) = self.held.get_mut(&e.source) {
                    self.held_counts.remove(&(ids.len(), e.source));
                    ids.remove(&id);
                    if ids.is_empty() {
                        self.held.remove(&e.source);
                    } else {
                        self.held_counts.insert((ids.len(), e.source));
                    }
                }
            }
        }
    }

    /// Moves connection `id` to `state` as of `since` (kept when `None`).
    fn set(&mut self, id: u64, state: State, since: Option<Instant>) {
        let Some(&old) = self.conns.get(&id) else {
            return;
        };
        self.unindex(id, old);
        let e = Entry {
            state,
            since: since.unwrap_or(old.since),
            ..old
        };
        self.conns.insert(id, e);
        self.index(id, e);
    }

    /// The oldest unproven connection of `from`, once it has had its grace (its oldest is
    /// the first to have had it).
    fn oldest_unproven(&self, from: IpAddr, now: Instant) -> Option<u64> {
        let id = *self.unproven.get(&from)?.first()?;
        let e = self.conns.get(&id)?;
        (now.saturating_duration_since(e.since) >= GRACE).then_some(id)
    }

    /// The connection unproven or idle the longest: past its grace, or within it during a
    /// flood (evictable ones fill more than half the door).
    fn oldest_evictable(&self, now: Instant) -> Option<u64> {
        let &(since, id) = self.evictable.first()?;
        let flood = self.evictable.len() * 2 > self.max;
        (flood || now.saturating_duration_since(since) >= GRACE).then_some(id)
    }

    /// The newest held connection of the source other than `newcomer` that holds the most of
    /// them, if it holds more than half the door (and more than [`HOG_MIN`]): one host's pile
    /// of proven-then-silent connections must not lock every other host out. The newest, so
    /// that a long-lived client on that host (a torch rank's store connection) stays.
    fn hog(&self, newcomer: IpAddr) -> Option<u64> {
        let &(count, source) = self.held_counts.last()?;
        let newest = *self.held.get(&source)?.last()?;
        (source != newcomer && count > (self.max / 2).max(HOG_MIN)).then_some(newest)
    }

    /// A connection from `source` arrived at `now`.
    pub(crate) fn admit(&mut self, source: IpAddr, now: Instant) -> Decision {
        let from_source = self.unproven.get(&source).map_or(0, BTreeSet::len);
        // Past its share, a source makes room from its own silent connections, if one has had
        // its grace (a burst of real clients from one host is never refused for it); a full
        // door makes room from anyone's.
        let own = (from_source >= self.per_source)
            .then(|| self.oldest_unproven(source, now))
            .flatten();
        let evict = match own {
            Some(id) => Some(id),
            None if self.conns.len() >= self.max => {
                match self.oldest_evictable(now).or_else(|| self.hog(source)) {
                    Some(id) => Some(id),
                    None => return Decision::Refuse,
                }
            }
            None => None,
        };
        if let Some(old) = evict {
            self.close(old);
        }
        self.next += 1;
        let id = self.next;
        let e = Entry {
            source,
            state: State::Unproven,
            since: now,
        };
        self.conns.insert(id, e);
        self.index(id, e);
        Decision::Admit { id, evict }
    }

    /// Connection `id` sent its first bytes at `now`: idle (`idle`: the door reports its
    /// activity) or held.
    pub(crate) fn prove(&mut self, id: u64, idle: bool, now: Instant) {
        let state = if idle { State::Idle } else { State::Held };
        self.set(id, state, Some(now));
    }

    /// Connection `id` started handling a request.
    pub(crate) fn busy(&mut self, id: u64) {
        self.set(id, State::Held, None);
    }

    /// Connection `id` finished handling a request at `now`.
    pub(crate) fn idle(&mut self, id: u64, now: Instant) {
        self.set(id, State::Idle, Some(now));
    }

    /// Connection `id` closed (or was evicted).
    pub(crate) fn close(&mut self, id: u64) {
        if let Some(e) = self.conns.remove(&id) {
            self.unindex(id, e);
        }
    }

    /// Connections holding a slot.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.conns.len()
    }

    /// Every index agrees with the connections (tests).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut evictable = 0;
        for (id, e) in &self.conns {
            match e.state {
                State::Unproven => {
                    assert!(self.unproven[&e.source].contains(id));
                    assert!(self.evictable.contains(&(e.since, *id)));
                    evictable += 1;
                }
                State::Idle => {
                    assert!(self.evictable.contains(&(e.since, *id)));
                    evictable += 1;
                }
                State::Held => assert!(self.held[&e.source].contains(id)),
            }
        }
        assert_eq!(self.evictable.len(), evictable);
        let unproven: usize = self.unproven.values().map(BTreeSet::len).sum();
        let held: usize = self.held.values().map(BTreeSet::len).sum();
        assert_eq!(unproven + held + (evictable - unproven), self.conns.len());
        assert_eq!(self.held_counts.len(), self.held.len());
        for (n, source) in &self.held_counts {
            assert_eq!(self.held[source].len(), *n);
        }
    }
}

#[cfg(test)]
mod tests;
