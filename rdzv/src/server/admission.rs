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

use std::collections::{BTreeMap, HashMap};
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

/// The slot rule of one door. Ids grow, so the smallest unproven id is the oldest.
#[derive(Debug)]
pub(crate) struct Admission {
    max: usize,
    per_source: usize,
    conns: BTreeMap<u64, Entry>,
    next: u64,
}

impl Admission {
    /// At most `max` connections; one source holds at most `per_source` unproven ones.
    pub(crate) fn new(max: usize, per_source: usize) -> Self {
        Self {
            max: max.max(1),
            per_source: per_source.max(1),
            conns: BTreeMap::new(),
            next: 0,
        }
    }

    /// A share of `max` for one source's unproven connections: an eighth, at least 8.
    pub(crate) fn default_per_source(max: usize) -> usize {
        (max / 8).max(8)
    }

    fn oldest_unproven(&self, from: IpAddr, now: Instant) -> Option<u64> {
        self.conns
            .iter()
            .find(|(_, e)| {
                e.state == State::Unproven
                    && e.source == from
                    && now.saturating_duration_since(e.since) >= GRACE
            })
            .map(|(id, _)| *id)
    }

    /// The connection unproven or idle the longest: past its grace, or within it during a
    /// flood (evictable ones fill more than half the door).
    fn oldest_evictable(&self, now: Instant) -> Option<u64> {
        let evictable = self.conns.iter().filter(|(_, e)| e.state != State::Held);
        let (count, oldest) =
            evictable.fold((0usize, None::<(u64, Instant)>), |(n, o), (id, e)| {
                let older = o.is_none_or(|(_, t)| e.since < t);
                (n + 1, if older { Some((*id, e.since)) } else { o })
            });
        let (id, since) = oldest?;
        let flood = count * 2 > self.max;
        (flood || now.saturating_duration_since(since) >= GRACE).then_some(id)
    }

    /// The newest held connection of the source other than `newcomer` that holds the most of
    /// them, if it holds more than half the door (and more than [`HOG_MIN`]): one host's pile
    /// of proven-then-silent connections must not lock every other host out. The newest, so
    /// that a long-lived client on that host (a torch rank's store connection) stays.
    fn hog(&self, newcomer: IpAddr) -> Option<u64> {
        let mut held: HashMap<IpAddr, (usize, u64)> = HashMap::new();
        for (id, e) in self.conns.iter().filter(|(_, e)| e.state == State::Held) {
            // Ids grow: the last seen per source is its newest.
            let h = held.entry(e.source).or_insert((0, *id));
            *h = (h.0 + 1, *id);
        }
        let (source, (count, newest)) = held.into_iter().max_by_key(|(_, (n, _))| *n)?;
        (source != newcomer && count > (self.max / 2).max(HOG_MIN)).then_some(newest)
    }

    /// A connection from `source` arrived at `now`.
    pub(crate) fn admit(&mut self, source: IpAddr, now: Instant) -> Decision {
        let from_source = self
            .conns
            .values()
            .filter(|e| e.state == State::Unproven && e.source == source)
            .count();
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
            self.conns.remove(&old);
        }
        self.next += 1;
        let id = self.next;
        self.conns.insert(
            id,
            Entry {
                source,
                state: State::Unproven,
                since: now,
            },
        );
        Decision::Admit { id, evict }
    }

    /// Connection `id` sent its first bytes at `now`: idle (`idle`: the door reports its
    /// activity) or held.
    pub(crate) fn prove(&mut self, id: u64, idle: bool, now: Instant) {
        if let Some(e) = self.conns.get_mut(&id) {
            e.state = if idle { State::Idle } else { State::Held };
            e.since = now;
        }
    }

    /// Connection `id` started handling a request.
    pub(crate) fn busy(&mut self, id: u64) {
        if let Some(e) = self.conns.get_mut(&id) {
            e.state = State::Held;
        }
    }

    /// Connection `id` finished handling a request at `now`.
    pub(crate) fn idle(&mut self, id: u64, now: Instant) {
        if let Some(e) = self.conns.get_mut(&id) {
            e.state = State::Idle;
            e.since = now;
        }
    }

    /// Connection `id` closed (or was evicted).
    pub(crate) fn close(&mut self, id: u64) {
        self.conns.remove(&id);
    }

    /// Connections holding a slot.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.conns.len()
    }
}

#[cfg(test)]
mod tests;
