//! Who gets a connection slot on a door (TCPStore, etcd v2, HTTP): silent connections must not
//! lock real clients out.
//!
//! A connection is *unproven* until its first bytes arrive, which must happen within
//! [`FIRST_BYTES`]. When the door is full, a new connection evicts the oldest unproven one
//! that has had [`GRACE`] to speak, instead of being refused (so a burst cannot evict a real
//! client before its request arrives); only when every slot holds a proven connection is the newest
//! refused (logged at a limited rate). Past its share of the slots held unproven, a source's
//! new connection replaces that source's own oldest silent one (a burst of real clients from
//! one host is still admitted while there is room). So 4,100 silent connections
//! neither fill the etcd door for 300 s nor keep `/healthz` from answering.
//!
//! [`Admission`] is the sans-IO rule; [`Gate`] drives it for an accept loop (eviction through a
//! oneshot per connection, the first-bytes wait on the socket).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::ratelog;

/// How long a new connection may stay silent.
pub(crate) const FIRST_BYTES: Duration = Duration::from_secs(5);
/// How long a new connection is safe from eviction: time for its first bytes to arrive.
pub(crate) const GRACE: Duration = Duration::from_millis(250);

/// What [`Admission::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Admitted as connection `id`; close connection `evict` first, if any.
    Admit { id: u64, evict: Option<u64> },
    /// Every slot holds a proven connection or one still in its grace: close the new one.
    Refuse,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    source: IpAddr,
    proven: bool,
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

    fn oldest_unproven(&self, from: Option<IpAddr>, now: Instant) -> Option<u64> {
        self.conns
            .iter()
            .find(|(_, e)| {
                !e.proven
                    && from.is_none_or(|s| e.source == s)
                    && now.saturating_duration_since(e.since) >= GRACE
            })
            .map(|(id, _)| *id)
    }

    /// A connection from `source` arrived at `now`.
    pub(crate) fn admit(&mut self, source: IpAddr, now: Instant) -> Decision {
        let from_source = self
            .conns
            .values()
            .filter(|e| !e.proven && e.source == source)
            .count();
        // Past its share, a source makes room from its own silent connections, if one has had
        // its grace (a burst of real clients from one host is never refused for it); a full
        // door makes room from anyone's.
        let own = (from_source >= self.per_source)
            .then(|| self.oldest_unproven(Some(source), now))
            .flatten();
        let evict = match own {
            Some(id) => Some(id),
            None if self.conns.len() >= self.max => match self.oldest_unproven(None, now) {
                Some(id) => Some(id),
                None => return Decision::Refuse,
            },
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
                proven: false,
                since: now,
            },
        );
        Decision::Admit { id, evict }
    }

    /// Connection `id` sent its first bytes.
    pub(crate) fn prove(&mut self, id: u64) {
        if let Some(e) = self.conns.get_mut(&id) {
            e.proven = true;
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

struct GateState {
    rule: Admission,
    evict: HashMap<u64, oneshot::Sender<()>>,
}

/// [`Admission`] for one accept loop.
pub(crate) struct Gate {
    what: &'static str,
    max: usize,
    state: Mutex<GateState>,
}

/// An admitted connection's slot: freed when dropped.
pub(crate) struct Ticket {
    id: u64,
    gate: Arc<Gate>,
    evicted: Option<oneshot::Receiver<()>>,
}

impl Gate {
    /// A gate of `max` slots for the door `what`.
    pub(crate) fn new(what: &'static str, max: usize) -> Arc<Self> {
        Arc::new(Self {
            what,
            max,
            state: Mutex::new(GateState {
                rule: Admission::new(max, Admission::default_per_source(max)),
                evict: HashMap::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection from `peer` arrived: its ticket, or `None` (refused, logged at a limited
    /// rate) when every slot holds a proven connection.
    pub(crate) fn admit(self: &Arc<Self>, peer: SocketAddr) -> Option<Ticket> {
        let mut st = self.lock();
        match st.rule.admit(peer.ip(), Instant::now()) {
            Decision::Refuse => {
                drop(st);
                ratelog::limited!(warn,
                    "connection refused: at the connection limit (every slot holds a client that spoke or is new)",
                    door = self.what, %peer, limit = self.max);
                None
            }
            Decision::Admit { id, evict } => {
                if let Some(old) = evict
                    && let Some(tx) = st.evict.remove(&old)
                {
                    let _ = tx.send(());
                    drop(st);
                    ratelog::limited!(info, "closed a silent connection to make room",
                        door = self.what, %peer);
                    st = self.lock();
                }
                let (tx, rx) = oneshot::channel();
                st.evict.insert(id, tx);
                Some(Ticket {
                    id,
                    gate: self.clone(),
                    evicted: Some(rx),
                })
            }
        }
    }
}

impl Ticket {
    /// Waits until `stream` has bytes to read (the connection is then proven), at most
    /// [`FIRST_BYTES`]; false when it stayed silent or was evicted meanwhile (close it).
    pub(crate) async fn first_bytes(&mut self, stream: &TcpStream) -> bool {
        let Some(mut evicted) = self.evicted.take() else {
            return true;
        };
        // `peek`, not `readable`: readiness may be reported spuriously; a byte may not.
        let mut first = [0u8; 1];
        let arrived = tokio::select! {
            r = tokio::time::timeout(FIRST_BYTES, stream.peek(&mut first)) => {
                matches!(r, Ok(Ok(n)) if n > 0)
            }
            _ = &mut evicted => false,
        };
        let mut st = self.gate.lock();
        st.evict.remove(&self.id);
        if arrived {
            st.rule.prove(self.id);
        }
        arrived
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.gate.lock();
        st.evict.remove(&self.id);
        st.rule.close(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn later(t: Instant) -> Instant {
        t + GRACE
    }

    #[test]
    fn full_of_silent_connections_evicts_the_oldest_not_the_newest() {
        let t = Instant::now();
        let mut a = Admission::new(3, 3);
        let ids: Vec<u64> = (0..3)
            .map(|_| match a.admit(ip(1), t) {
                Decision::Admit { id, evict: None } => id,
                d => panic!("{d:?}"),
            })
            .collect();
        // Within their grace nobody is evicted: the newest is refused.
        assert_eq!(a.admit(ip(2), t), Decision::Refuse);
        assert_eq!(
            a.admit(ip(2), later(t)),
            Decision::Admit {
                id: 4,
                evict: Some(ids[0])
            }
        );
        assert_eq!(a.len(), 3);
        // The new one is safe during its own grace, whoever comes next.
        let Decision::Admit { evict, .. } = a.admit(ip(3), later(t)) else {
            panic!()
        };
        assert_eq!(evict, Some(ids[1]));
    }

    #[test]
    fn proven_connections_are_never_evicted_and_then_the_newest_is_refused() {
        let t = Instant::now();
        let mut a = Admission::new(2, 2);
        for _ in 0..2 {
            let Decision::Admit { id, .. } = a.admit(ip(1), t) else {
                panic!()
            };
            a.prove(id);
        }
        assert_eq!(a.admit(ip(2), later(t)), Decision::Refuse);
        a.close(1);
        assert!(matches!(
            a.admit(ip(2), later(t)),
            Decision::Admit { evict: None, .. }
        ));
    }

    #[test]
    fn one_source_holds_at_most_its_share_unproven() {
        let t = Instant::now();
        let mut a = Admission::new(100, 2);
        let first = a.admit(ip(1), t);
        a.admit(ip(1), t);
        // A third silent one from the same source replaces that source's oldest.
        assert_eq!(
            a.admit(ip(1), later(t)),
            Decision::Admit {
                id: 3,
                evict: Some(1)
            }
        );
        assert!(matches!(first, Decision::Admit { id: 1, .. }));
        // Another source is not affected.
        assert!(matches!(
            a.admit(ip(2), later(t)),
            Decision::Admit { evict: None, .. }
        ));
        // A burst from one source (every rank of a node connecting at once) is admitted while
        // the door has room, share or not.
        let mut b = Admission::new(100, 2);
        for _ in 0..10 {
            assert!(matches!(
                b.admit(ip(1), t),
                Decision::Admit { evict: None, .. }
            ));
        }
        assert_eq!(Admission::default_per_source(4096), 512);
        assert_eq!(Admission::default_per_source(16), 8);
    }
}
