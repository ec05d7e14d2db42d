//! The thread rings of this process (`local.rs`): made for a thread at its first call run on
//! it, each with a key (from 1, below 2^16, reused once its ring is freed), and kept for
//! readers after the thread is gone while its calls may still be among the process's newest
//! `capacity`: a ring whose thread ended is freed once `capacity` more calls were recorded
//! anywhere. Readers take the table's lock; a thread only at its first call.

use std::sync::{Arc, Mutex, MutexGuard};

use super::local::{Owner, ThreadRing};

/// Most rings held at once (keys fit 16 bits); a thread that finds none left records its
/// calls in the shared ring.
const MAX_RINGS: usize = u16::MAX as usize;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The table of thread rings.
#[derive(Debug)]
pub(crate) struct Threads {
    cap: usize,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    rings: Vec<Kept>,
    /// Calls of the rings freed.
    freed: u64,
}

#[derive(Debug)]
struct Kept {
    ring: Arc<ThreadRing>,
    /// The process's count of calls when its thread was first seen gone.
    retired_at: Option<u64>,
}

/// What readers see: the rings held, and the calls of those freed.
#[derive(Debug, Default)]
pub(crate) struct Held {
    pub rings: Vec<Arc<ThreadRing>>,
    pub freed: u64,
}

impl Table {
    /// Calls recorded in the thread rings, freed ones included.
    fn calls(&self) -> u64 {
        self.freed + self.rings.iter().map(|h| h.ring.next_id()).sum::<u64>()
    }

    /// Frees the rings of ended threads that `cap` calls were recorded after (`shared`: the
    /// shared ring's calls).
    fn prune(&mut self, cap: usize, shared: u64) {
        let total = shared + self.calls();
        let mut i = 0;
        while i < self.rings.len() {
            let h = &mut self.rings[i];
            // Only the table holds it: its thread (the owner) is gone.
            if Arc::strong_count(&h.ring) == 1 {
                let at = *h.retired_at.get_or_insert(total);
                if total - at >= cap as u64 {
                    let h = self.rings.swap_remove(i);
                    self.freed += h.ring.next_id();
                    continue;
                }
            }
            i += 1;
        }
    }
}

impl Threads {
    /// No rings yet; each will hold `cap` calls.
    pub(crate) fn new(cap: usize) -> Threads {
        Threads {
            cap,
            table: Mutex::new(Table::default()),
        }
    }

    /// A ring for the calling thread, and the right to write it (`None`: [`MAX_RINGS`] are
    /// held). `shared`: the shared ring's calls, to count calls since a thread ended.
    pub(crate) fn open(&self, shared: u64) -> Option<Owner> {
        let mut t = lock(&self.table);
        t.prune(self.cap, shared);
        if t.rings.len() >= MAX_RINGS {
            return None;
        }
        let mut keys: Vec<u32> = t.rings.iter().map(|h| h.ring.key()).collect();
        keys.sort_unstable();
        // The smallest key not in use.
        let key = keys
            .iter()
            .zip(1u32..)
            .find(|(k, want)| **k != *want)
            .map_or(keys.len() as u32 + 1, |(_, want)| want);
        let (ring, owner) = ThreadRing::new(key, self.cap);
        t.rings.push(Kept {
            ring,
            retired_at: None,
        });
        Some(owner)
    }

    /// The rings held now, oldest key first, and the calls of those freed (`shared`: as for
    /// [`open`](Self::open)).
    pub(crate) fn held(&self, shared: u64) -> Held {
        let mut t = lock(&self.table);
        t.prune(self.cap, shared);
        let mut rings: Vec<_> = t.rings.iter().map(|h| h.ring.clone()).collect();
        rings.sort_by_key(|r| r.key());
        Held {
            rings,
            freed: t.freed,
        }
    }
}

#[cfg(test)]
mod tests {
    use dt_rdzv_proto::native::CallState;

    use super::*;
    use crate::flight::ring::tests::info;

    #[test]
    fn rings_of_ended_threads_go_after_capacity_more_calls_and_their_keys_return() {
        let t = Threads::new(4);
        let a = t.open(0).unwrap();
        let b = t.open(0).unwrap();
        assert_eq!((a.key(), b.key()), (1, 2));
        let i = info(0, 0, "barrier");
        for _ in 0..3 {
            a.push(&i, 1, CallState::Started, 1);
        }
        drop(a);
        // Seen gone at 3 calls; kept until 4 more were recorded.
        assert_eq!(t.held(0).rings.len(), 2);
        for _ in 0..3 {
            b.push(&i, 1, CallState::Started, 2);
        }
        let h = t.held(0);
        assert_eq!((h.rings.len(), h.freed), (2, 0));
        drop(h);
        // One more, in the shared ring.
        let h = t.held(1);
        assert_eq!(h.rings.iter().map(|r| r.key()).collect::<Vec<_>>(), vec![2]);
        assert_eq!(h.freed, 3);
        let c = t.open(1).unwrap();
        assert_eq!(c.key(), 1, "a freed ring's key is used again");
        let d = t.open(1).unwrap();
        assert_eq!(d.key(), 3);
    }
}
