//! Byte pipes between the ranks of one host, in their segment: one ring per ordered pair, so
//! any schedule (send/recv, the v-collectives, whatever is not shared-memory native) reaches a
//! host peer through memory instead of loopback TCP.
//!
//! A pipe is single-producer single-consumer: the writer copies into the ring and then
//! publishes its `head` (bytes written, release), the reader copies out and then publishes its
//! `tail` (bytes consumed, release); `head - tail` is what waits. After moving bytes each side
//! rings the other's *bell* (a futex word in its slot), waking it only if it sleeps there.
//! [`Pipes::wait`] sleeps on this rank's own bell, so one wait covers every pipe it cares about.
//!
//! A peer that closed its communicator (its `closed` word) ends its pipes gracefully once
//! they are drained; one whose process exited (pidfd) without closing is lost. A rank that
//! fails marks its `aborted` word and rings everyone: host peers hear of it even when no TCP
//! link joins them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::futex;
use super::layout::{Layout, PAGE, PIPE, slot};
use super::segment::Mapping;
use super::watch::Watch;
use crate::transport::LinkError;

/// Longest sleep on the bell before the caller looks at the control plane again.
const NAP: Duration = Duration::from_millis(2);

/// This rank's ends of its host's pipes.
pub(crate) struct Pipes {
    map: Arc<Mapping>,
    layout: Layout,
    me: usize,
    /// Indexed by global rank: the local index of a host peer.
    local: Vec<Option<usize>>,
    /// Indexed by local rank.
    ranks: Vec<usize>,
    watches: Vec<Option<Watch>>,
}

impl std::fmt::Debug for Pipes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pipes(local {} of {:?})", self.me, self.ranks)
    }
}

impl Pipes {
    /// This rank (`me`, a local index) among `ranks` (global ranks of the host, ascending) of a
    /// `world`; `pids[i]` is local rank `i`'s pid when it lives in this pid namespace.
    pub(crate) fn new(
        map: Arc<Mapping>,
        layout: Layout,
        me: usize,
        ranks: Vec<usize>,
        world: usize,
        pids: &[Option<u32>],
    ) -> Pipes {
        let mut local = vec![None; world];
        for (i, &r) in ranks.iter().enumerate() {
            if i != me {
                local[r] = Some(i);
            }
        }
        let watches = pids
            .iter()
            .enumerate()
            .map(|(i, p)| p.filter(|_| i != me).map(Watch::new))
            .collect();
        Pipes {
            map,
            layout,
            me,
            local,
            ranks,
            watches,
        }
    }

    /// The local index of `peer` when it is reached through a pipe.
    pub(crate) fn route(&self, peer: usize) -> Option<usize> {
        self.local.get(peer).copied().flatten()
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off + 8 <= self.map.len() && off.is_multiple_of(8));
        // SAFETY: in bounds by the layout, 8-aligned, only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.map.ptr().add(off).cast()) }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= self.map.len() && off.is_multiple_of(4));
        // SAFETY: as above, 4-aligned.
        unsafe { AtomicU32::from_ptr(self.map.ptr().add(off).cast()) }
    }

    fn head(&self, from: usize, to: usize) -> &AtomicU64 {
        self.u64_at(self.layout.pipe(from, to))
    }

    fn tail(&self, from: usize, to: usize) -> &AtomicU64 {
        self.u64_at(self.layout.pipe(from, to) + 64)
    }

    fn ring(&self, from: usize, to: usize) -> *mut u8 {
        // SAFETY: the ring lies inside the mapping by the layout.
        unsafe { self.map.ptr().add(self.layout.pipe(from, to) + PAGE) }
    }

    fn bell(&self, i: usize) -> &AtomicU32 {
        self.u32_at(self.layout.slot(i) + slot::BELL)
    }

    fn bell_waiters(&self, i: usize) -> &AtomicU32 {
        self.u32_at(self.layout.slot(i) + slot::BELL_WAITERS)
    }

    fn closed(&self, i: usize) -> bool {
        self.u32_at(self.layout.slot(i) + slot::CLOSED)
            .load(Ordering::SeqCst)
            == 1
    }

    fn ring_bell(&self, i: usize) {
        let b = self.bell(i);
        b.fetch_add(1, Ordering::SeqCst);
        if self.bell_waiters(i).load(Ordering::SeqCst) > 0 {
            futex::wake_all(b);
        }
    }

    /// Writes a prefix of `a ++ b` into the pipe to local rank `to`.
    /// A reader that failed (its `aborted` word) or closed is an error at once, not a ring
    /// that keeps taking bytes nobody will read.
    pub(crate) fn try_send(&self, to: usize, a: &[u8], b: &[u8]) -> Result<usize, LinkError> {
        if let Some(e) = self.peer_abort(to) {
            return Err(e);
        }
        if self.closed(to) {
            return Err(self.gone(to, true));
        }
        let me = self.me;
        let head = self.head(me, to).load(Ordering::Relaxed);
        let tail = self.tail(me, to).load(Ordering::Acquire);
        let free = PIPE - self.in_flight(to, head, tail)?;
        if free == 0 {
            return Ok(0);
        }
        let ring = self.ring(me, to);
        let mut at = head;
        let mut left = free;
        for src in [a, b] {
            let n = src.len().min(left);
            copy_in(ring, at, &src[..n]);
            at += n as u64;
            left -= n;
        }
        let n = (at - head) as usize;
        if n > 0 {
            self.head(me, to).store(at, Ordering::Release);
            self.ring_bell(to);
        }
        Ok(n)
    }

    /// Reads into `a ++ b` from the pipe from local rank `from`; `consume: false` peeks.
    fn read(
        &self,
        from: usize,
        a: &mut [u8],
        b: &mut [u8],
        consume: bool,
    ) -> Result<usize, LinkError> {
        let me = self.me;
        let head = self.head(from, me).load(Ordering::Acquire);
        let tail = self.tail(from, me).load(Ordering::Relaxed);
        let avail = self.in_flight(from, head, tail)?;
        if avail == 0 {
            if a.len() + b.len() > 0 && self.closed(from) {
                return Err(self.gone(from, true));
            }
            return Ok(0);
        }
        let ring = self.ring(from, me);
        let mut at = tail;
        let mut left = avail;
        for dst in [a, b] {
            let n = dst.len().min(left);
            copy_out(ring, at, &mut dst[..n]);
            at += n as u64;
            left -= n;
        }
        if consume && at > tail {
            self.tail(from, me).store(at, Ordering::Release);
            self.ring_bell(from);
        }
        Ok((at - tail) as usize)
    }

    /// Reads into `a ++ b` from local rank `from`.
    pub(crate) fn try_recv(
        &self,
        from: usize,
        a: &mut [u8],
        b: &mut [u8],
    ) -> Result<usize, LinkError> {
        self.read(from, a, b, true)
    }

    /// Copies what waits from local rank `from` into `buf` without consuming it.
    pub(crate) fn peek(&self, from: usize, buf: &mut [u8]) -> Result<usize, LinkError> {
        self.read(from, buf, &mut [], false)
    }

    fn can_send(&self, to: usize) -> bool {
        let (h, t) = (
            self.head(self.me, to).load(Ordering::SeqCst),
            self.tail(self.me, to).load(Ordering::SeqCst),
        );
        (h - t) < PIPE as u64 || self.closed(to)
    }

    fn can_recv(&self, from: usize) -> bool {
        let (h, t) = (
            self.head(from, self.me).load(Ordering::SeqCst),
            self.tail(from, self.me).load(Ordering::SeqCst),
        );
        h > t || self.closed(from)
    }

    /// Bytes in the pipe between this rank and local rank `i` by its counters, or an error
    /// naming `i` when they cannot be (the tail past the head, or more than the ring holds:
    /// the segment was written by something other than dtcomm's pipe code).
    fn in_flight(&self, i: usize, head: u64, tail: u64) -> Result<usize, LinkError> {
        queued(head, tail).ok_or_else(|| LinkError::Closed {
            peer: self.ranks[i],
            graceful: false,
            detail: format!(
                "the shared-memory pipe's counters are inconsistent (head {head}, tail {tail}, \
                 ring {PIPE} bytes): its segment is corrupt"
            ),
        })
    }

    fn gone(&self, i: usize, graceful: bool) -> LinkError {
        LinkError::Closed {
            peer: self.ranks[i],
            graceful,
            detail: if graceful {
                "it closed its communicator (shared-memory pipe)".into()
            } else {
                format!(
                    "its process (pid {}) on this host exited (shared-memory pipe)",
                    self.watches[i].as_ref().map_or(0, |w| w.pid)
                )
            },
        }
    }

    /// Marks this rank failed in the segment (`lost`: the peer whose loss caused it, `reason`:
    /// its own error) and wakes every host peer, so one waiting on it with no link to it hears
    /// of the abort, and why, at once.
    pub(crate) fn abort(&self, lost: Option<usize>, reason: &str) {
        let slot_at = self.layout.slot(self.me);
        let len = self.u32_at(slot_at + slot::REASON_LEN);
        if len
            .compare_exchange(0, u32::MAX, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            let bytes = cut(reason, slot::REASON_MAX).as_bytes();
            // SAFETY: `REASON..REASON + REASON_MAX` lies in this rank's own slot (layout test);
            // only this rank writes it, once (the claim above), and readers copy it only after
            // they saw the length stored below.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.map.ptr().add(slot_at + slot::REASON),
                    bytes.len(),
                );
            }
            len.store(bytes.len() as u32, Ordering::Release);
        }
        let v = lost.map_or(1, |l| l as u32 + 2);
        let _ = self.u32_at(slot_at + slot::ABORTED).compare_exchange(
            0,
            v,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        futex::wake_all(self.u32_at(slot_at + slot::POSTED));
        for i in (0..self.ranks.len()).filter(|&i| i != self.me) {
            self.ring_bell(i);
        }
    }

    /// The abort of a host peer that failed, if one did.
    pub(crate) fn aborted(&self) -> Option<LinkError> {
        (0..self.ranks.len())
            .filter(|&i| i != self.me)
            .find_map(|i| self.peer_abort(i))
    }

    /// The abort of local rank `i`, if it failed. When the rank it lost is on this host and
    /// closed its communicator, that goodbye is told first-hand instead (the segment shows it
    /// to every host peer): "rank 2 closed its communicator", not "rank 1 failed".
    fn peer_abort(&self, i: usize) -> Option<LinkError> {
        let v = self
            .u32_at(self.layout.slot(i) + slot::ABORTED)
            .load(Ordering::Acquire);
        if v >= 2
            && let Some(j) = self.route((v - 2) as usize)
            && self.closed(j)
        {
            return Some(self.gone(j, true));
        }
        (v != 0).then(|| LinkError::Aborted {
            origin: self.ranks[i],
            lost: (v >= 2).then(|| (v - 2) as usize),
            reason: self.reason(i).unwrap_or_else(|| {
                format!(
                    "rank {} failed (said through shared memory; its own error says why)",
                    self.ranks[i]
                )
            }),
        })
    }

    /// The error local rank `i` wrote when it failed, if it finished writing it.
    fn reason(&self, i: usize) -> Option<String> {
        let at = self.layout.slot(i);
        let n = self.u32_at(at + slot::REASON_LEN).load(Ordering::Acquire) as usize;
        if n == 0 || n > slot::REASON_MAX {
            return None;
        }
        let mut buf = vec![0u8; n];
        // SAFETY: in bounds (n <= REASON_MAX, layout test); written once before the length.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.ptr().add(at + slot::REASON),
                buf.as_mut_ptr(),
                n,
            );
        }
        Some(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Sleeps (at most `timeout`, and a short nap) until a pipe to a local rank in `sends`
    /// has room or one from a local rank in `recvs` has bytes; fails when such a peer's process
    /// exited without closing.
    pub(crate) fn wait(
        &self,
        sends: &[usize],
        recvs: &[usize],
        timeout: Duration,
    ) -> Result<(), LinkError> {
        let waiters = self.bell_waiters(self.me);
        waiters.fetch_add(1, Ordering::SeqCst);
        let bell = self.bell(self.me);
        let v = bell.load(Ordering::SeqCst);
        let ready =
            sends.iter().any(|&i| self.can_send(i)) || recvs.iter().any(|&i| self.can_recv(i));
        let r = if ready {
            Ok(())
        } else if let Some(&i) = sends
            .iter()
            .chain(recvs)
            .find(|&&i| !self.closed(i) && self.watches[i].as_ref().is_some_and(Watch::exited))
        {
            Err(self.gone(i, false))
        } else {
            futex::wait(bell, v, timeout.min(NAP));
            Ok(())
        };
        waiters.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

/// `s` cut to at most `max` bytes at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Bytes queued in a ring whose writer is at `head` and reader at `tail`, when the counters are
/// consistent (`tail <= head <= tail + PIPE`).
fn queued(head: u64, tail: u64) -> Option<usize> {
    head.checked_sub(tail)
        .filter(|&n| n <= PIPE as u64)
        .map(|n| n as usize)
}

/// Copies `src` into the ring at stream position `at` (wrapping).
fn copy_in(ring: *mut u8, at: u64, src: &[u8]) {
    let off = (at % PIPE as u64) as usize;
    let first = src.len().min(PIPE - off);
    // SAFETY: both ranges lie inside the ring (PIPE bytes); the writer owns the free space it
    // copies into until it publishes `head`.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), ring.add(off), first);
        std::ptr::copy_nonoverlapping(src.as_ptr().add(first), ring, src.len() - first);
    }
}

/// Copies from the ring at stream position `at` (wrapping) into `dst`.
fn copy_out(ring: *const u8, at: u64, dst: &mut [u8]) {
    let off = (at % PIPE as u64) as usize;
    let first = dst.len().min(PIPE - off);
    // SAFETY: both ranges lie inside the ring; the bytes were published by the writer's
    // `head` (acquired) and are not overwritten before the reader publishes `tail`.
    unsafe {
        std::ptr::copy_nonoverlapping(ring.add(off), dst.as_mut_ptr(), first);
        std::ptr::copy_nonoverlapping(ring, dst.as_mut_ptr().add(first), dst.len() - first);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_past_the_ring_or_backwards_are_refused() {
        assert_eq!(queued(10, 10), Some(0));
        assert_eq!(queued(PIPE as u64 + 5, 5), Some(PIPE));
        assert_eq!(queued(PIPE as u64 + 6, 5), None, "more than the ring holds");
        assert_eq!(queued(4, 5), None, "the tail past the head");
        assert_eq!(queued(u64::MAX, 0), None);
    }

    #[test]
    fn an_abort_for_a_host_peer_that_closed_is_told_as_that_goodbye() {
        let layout = Layout::new(3, 4096);
        let (_seg, map) =
            super::super::segment::Created::new(layout.len(), None, "dtcomm-pipe-test").unwrap();
        let map = Arc::new(map);
        let end = |me| Pipes::new(map.clone(), layout, me, vec![5, 7, 9], 10, &[None; 3]);
        let (a, b, c) = (end(0), end(1), end(2));
        // Rank 9 failed (no goodbye): rank 7's abort naming it stays an abort.
        b.abort(Some(9), "rank 7: all_reduce(seq 3) lost rank 9");
        match a.aborted() {
            Some(LinkError::Aborted {
                origin,
                lost,
                reason,
            }) => {
                assert_eq!((origin, lost), (7, Some(9)));
                assert_eq!(
                    reason, "rank 7: all_reduce(seq 3) lost rank 9",
                    "its own words"
                );
            }
            other => panic!("{other:?}"),
        }
        // Rank 9 closed its communicator: rank 5 says so itself.
        c.u32_at(c.layout.slot(2) + slot::CLOSED)
            .store(1, Ordering::SeqCst);
        match a.aborted() {
            Some(LinkError::Closed {
                peer,
                graceful,
                detail,
            }) => {
                assert_eq!((peer, graceful), (9, true));
                assert!(detail.contains("closed its communicator"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_long_reason_is_cut_at_a_character_boundary_and_only_the_first_abort_writes() {
        let (a, b) = pair();
        b.abort(None, &"é".repeat(600));
        b.abort(None, "a second abort");
        match a.aborted() {
            Some(LinkError::Aborted { reason, .. }) => {
                assert_eq!(reason, "é".repeat(slot::REASON_MAX / 2));
            }
            other => panic!("{other:?}"),
        }
    }

    /// Two ends of one host's pipes over one segment: local ranks 0 and 1 (global 5 and 7).
    fn pair() -> (Pipes, Pipes) {
        let layout = Layout::new(2, 4096);
        let (_seg, map) =
            super::super::segment::Created::new(layout.len(), None, "dtcomm-pipe-test").unwrap();
        let map = Arc::new(map);
        let end = |me| Pipes::new(map.clone(), layout, me, vec![5, 7], 8, &[None, None]);
        (end(0), end(1))
    }

    #[test]
    fn a_writer_stops_at_once_when_its_reader_failed_or_closed() {
        let (a, b) = pair();
        assert_eq!(a.try_send(1, b"hello", b"").unwrap(), 5);
        b.abort(Some(3), "boom");
        match a.try_send(1, b"more", b"") {
            Err(LinkError::Aborted { origin, lost, .. }) => {
                assert_eq!((origin, lost), (7, Some(3)));
            }
            other => panic!("wrote into a failed reader: {other:?}"),
        }

        let (a, b) = pair();
        b.u32_at(b.layout.slot(1) + slot::CLOSED)
            .store(1, Ordering::SeqCst);
        match a.try_send(1, b"x", b"") {
            Err(LinkError::Closed { peer, graceful, .. }) => {
                assert_eq!((peer, graceful), (7, true))
            }
            other => panic!("wrote into a closed reader: {other:?}"),
        }
    }
}
