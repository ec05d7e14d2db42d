//! The ranks of one host joined by a segment, and the one protocol all shared-memory
//! collectives use: **epochs**.
//!
//! In an epoch every rank writes (part of) its current buffer, then *posts* (bumps its `posted`
//! counter), and waits until every peer has posted as often as it has; it may then read the
//! peers' buffers. An epoch may post more than once (write, post, wait, write more, post,
//! wait). Buffers alternate by epoch parity, and a rank starts epoch `e + 2` (overwriting the
//! buffer of epoch `e`) only after seeing every peer's last post of epoch `e + 1`, which each
//! peer makes after its last read of epoch `e`: no buffer is written while it is read, with
//! counters alone. Each epoch's first post also publishes the call's header
//! (op, dtype, count, seq), so mismatched calls fail at once naming both ranks.
//!
//! Waiting spins for as long as the rank's spin policy allows (`spin.rs`: never while the
//! host's compute threads outnumber its cores, else about twice what recent waits took), then
//! sleeps on the peer's counter (futex) in short naps, between which
//! it reads the control plane (aborts, lost peers), the peers' liveness (pidfd: a SIGKILLed
//! rank sends no TCP reset when no socket joins it) and the deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::call::CallDesc;
use crate::engine::error::EngineError;
use crate::error::CommError;
use crate::spin::SpinPolicy;
use crate::transport::frame::{self, HEADER_LEN};
use crate::transport::links::Links;
use crate::transport::shm::futex;
use crate::transport::shm::layout::{Layout, slot};
use crate::transport::shm::segment::Mapping;
use crate::transport::shm::watch::Watch;
use crate::transport::{ControlPlane, LinkError};
use crate::watchdog::{Deadline, Phase};

/// How long one nap on a futex lasts before the liveness checks run again.
const NAP: Duration = Duration::from_millis(2);

/// Spins between two reads of the clock while a wait spins (a power of two, dividing the 128
/// spins between yields).
const SPINS_PER_CLOCK: u32 = 16;

/// Times a wait on an oversubscribed host gives its core away (`sched_yield`) before it
/// sleeps: the peer it waits for is likely runnable, waiting for a core (what Open MPI's
/// shared-memory waits do); a few microseconds each.
const YIELDS_WHEN_OVERSUBSCRIBED: u32 = 16;

/// This rank's view of its host's segment.
pub(crate) struct ShmGroup {
    map: Arc<Mapping>,
    layout: Layout,
    /// This rank's index among the host's ranks.
    pub me: usize,
    /// Global rank of each local rank, ascending.
    pub ranks: Vec<usize>,
    /// When every host shares memory and holds as many ranks as this one: this rank's host
    /// index and, per host, the rank with this rank's local index (the cross-host subgroup).
    pub across: Option<(usize, Vec<usize>)>,
    watches: Vec<Option<Watch>>,
    /// Every local rank's pid, when the whole host may read each other's memory in one copy
    /// (`cma.rs`; probed at set-up).
    pub single_copy: Option<Vec<u32>>,
    posted: u32,
    epoch: u64,
    spin: SpinPolicy,
}

fn reached(v: u32, target: u32) -> bool {
    v.wrapping_sub(target) as i32 >= 0
}

impl ShmGroup {
    /// Joins an attached, checked segment. `pids[i]` is local rank `i`'s pid when it lives in
    /// this pid namespace.
    pub(crate) fn new(
        map: Arc<Mapping>,
        layout: Layout,
        me: usize,
        ranks: Vec<usize>,
        pids: &[Option<u32>],
        spin: Duration,
    ) -> ShmGroup {
        let watches = pids
            .iter()
            .enumerate()
            .map(|(i, p)| p.filter(|_| i != me).map(Watch::new))
            .collect();
        let spin = SpinPolicy::new(spin, ranks.len(), crate::spin::usable_cores());
        let g = ShmGroup {
            map,
            layout,
            me,
            ranks,
            across: None,
            watches,
            single_copy: None,
            posted: 0,
            epoch: 0,
            spin,
        };
        g.word(me, slot::PID)
            .store(std::process::id(), Ordering::Relaxed);
        g
    }

    fn u64_at(&self, i: usize, field: usize) -> &AtomicU64 {
        let off = self.layout.slot(i) + field;
        debug_assert!(off + 8 <= self.map.len() && off.is_multiple_of(8));
        // SAFETY: in bounds, 8-aligned, only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.map.ptr().add(off).cast()) }
    }

    /// Publishes this call's input and output addresses (before the call's first post).
    pub(crate) fn publish_addrs(&self, input: u64, output: u64) {
        self.u64_at(self.me, slot::ADDR_IN)
            .store(input, Ordering::Relaxed);
        self.u64_at(self.me, slot::ADDR_OUT)
            .store(output, Ordering::Relaxed);
    }

    /// Local rank `i`'s published (input, output) addresses (after a post of it was seen).
    pub(crate) fn addrs(&self, i: usize) -> (u64, u64) {
        (
            self.u64_at(i, slot::ADDR_IN).load(Ordering::Relaxed),
            self.u64_at(i, slot::ADDR_OUT).load(Ordering::Relaxed),
        )
    }

    /// Ranks on this host.
    pub(crate) fn size(&self) -> usize {
        self.ranks.len()
    }

    /// Bytes of one buffer.
    pub(crate) fn chunk(&self) -> usize {
        self.layout.chunk
    }

    fn word(&self, i: usize, field: usize) -> &AtomicU32 {
        let off = self.layout.slot(i) + field;
        debug_assert!(off + 4 <= self.map.len());
        // SAFETY: in bounds (the layout fits the mapping), 4-aligned, and only ever accessed
        // atomically by every process.
        unsafe { AtomicU32::from_ptr(self.map.ptr().add(off).cast()) }
    }

    /// Local rank `i`'s buffer of the current epoch.
    pub(crate) fn buf(&self, i: usize) -> *mut u8 {
        // SAFETY: in bounds of the mapping by the layout.
        unsafe {
            self.map
                .ptr()
                .add(self.layout.buf(i, (self.epoch & 1) as usize))
        }
    }

    /// Starts an epoch of `call`: publishes its header in this epoch's slot.
    pub(crate) fn begin(&mut self, call: &CallDesc) {
        // The header's length field carries the epoch's low bits: peers check that every rank
        // is in the same epoch (the buffers' parity depends on it).
        let h = frame::encode(call, self.epoch as u32 as usize);
        let off = self.layout.desc(self.me, (self.epoch & 1) as usize);
        // SAFETY: our own header slot; peers read it only after our next post.
        unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), self.map.ptr().add(off), HEADER_LEN) };
    }

    /// Ends the current epoch (the next one uses the other buffers).
    pub(crate) fn end(&mut self) {
        self.epoch += 1;
    }

    /// Publishes everything written so far and wakes sleeping peers.
    pub(crate) fn post(&mut self) {
        self.posted = self.posted.wrapping_add(1);
        let w = self.word(self.me, slot::POSTED);
        w.store(self.posted, Ordering::SeqCst);
        if self.word(self.me, slot::WAITERS).load(Ordering::SeqCst) > 0 {
            futex::wake_all(w);
        }
    }

    fn peer_desc(&self, i: usize) -> [u8; HEADER_LEN] {
        let off = self.layout.desc(i, (self.epoch & 1) as usize);
        let mut h = [0u8; HEADER_LEN];
        // SAFETY: in bounds; the peer wrote it before the post we have seen (SeqCst load).
        unsafe {
            std::ptr::copy_nonoverlapping(self.map.ptr().add(off), h.as_mut_ptr(), HEADER_LEN)
        };
        h
    }

    /// Waits until every peer has posted as often as this rank, checking the peers' call
    /// headers when `check` (the epoch's first wait).
    pub(crate) fn wait_all(
        &mut self,
        t: &mut Links,
        call: &CallDesc,
        deadline: &mut Deadline,
        check: bool,
    ) -> Result<(), EngineError> {
        let target = self.posted;
        // The clock is read once a peer is found not ready, and then only every
        // `SPINS_PER_CLOCK` spins: a wait whose peers all posted already (the small-message
        // common case) costs no clock read, and a peer that posts within a few spins (ranks in
        // step) none either. A clock read is 20-70 ns on a VM: read on every spin it was a
        // third of an 8-byte all_reduce at world 2 (`docs/shared-memory.md`).
        let mut start: Option<Instant> = None;
        let spin = self.spin.budget();
        let yields = if spin.is_zero() && self.spin.oversubscribed() {
            YIELDS_WHEN_OVERSUBSCRIBED
        } else {
            0
        };
        let mut spins = 0u32;
        let mut next = 0;
        while next < self.size() {
            if next == self.me
                || reached(self.word(next, slot::POSTED).load(Ordering::SeqCst), target)
            {
                if check && next != self.me {
                    self.check_desc(next, call)?;
                }
                next += 1;
                continue;
            }
            spins += 1;
            // Spinning at all (a budget): between clock reads, only the peer's word is read.
            if !spin.is_zero() && !spins.is_multiple_of(SPINS_PER_CLOCK) {
                std::hint::spin_loop();
                continue;
            }
            if spins <= yields {
                std::thread::yield_now();
                continue;
            }
            if start.get_or_insert_with(Instant::now).elapsed() < spin {
                std::hint::spin_loop();
                if spins.is_multiple_of(128) {
                    std::thread::yield_now();
                }
                continue;
            }
            self.watch(t, call, deadline, target)?;
            let waiters = self.word(next, slot::WAITERS);
            waiters.fetch_add(1, Ordering::SeqCst);
            let w = self.word(next, slot::POSTED);
            let v = w.load(Ordering::SeqCst);
            if !reached(v, target) {
                futex::wait(w, v, NAP);
            }
            waiters.fetch_sub(1, Ordering::SeqCst);
        }
        self.spin
            .record(start.map_or(Duration::ZERO, |s| s.elapsed()));
        Ok(())
    }

    fn check_desc(&self, i: usize, call: &CallDesc) -> Result<(), EngineError> {
        let peer = self.ranks[i];
        let rank = self.ranks[self.me];
        let (theirs, epoch) = frame::decode(&self.peer_desc(i)).map_err(|detail| {
            EngineError::Comm(CommError::Protocol {
                rank,
                peer,
                call: *call,
                detail: format!("shared-memory call header: {detail}"),
            })
        })?;
        if theirs != *call {
            return Err(EngineError::Comm(CommError::Mismatch {
                rank,
                peer,
                ours: *call,
                theirs,
            }));
        }
        if epoch != self.epoch as u32 as usize {
            return Err(EngineError::Comm(CommError::Protocol {
                rank,
                peer,
                call: *call,
                detail: format!(
                    "shared-memory epoch {epoch} where this rank is in epoch {} (ranks disagree \
                     on how many steps an earlier call took)",
                    self.epoch as u32
                ),
            }));
        }
        Ok(())
    }

    /// The checks between naps: the control plane, the peers' processes, the deadline.
    fn watch(
        &mut self,
        t: &mut Links,
        call: &CallDesc,
        deadline: &mut Deadline,
        target: u32,
    ) -> Result<(), EngineError> {
        t.check()?;
        for i in 0..self.size() {
            if i != self.me
                && self.word(i, slot::CLOSED).load(Ordering::SeqCst) == 1
                && !reached(self.word(i, slot::POSTED).load(Ordering::SeqCst), target)
            {
                return Err(EngineError::Link(LinkError::Closed {
                    peer: self.ranks[i],
                    graceful: true,
                    detail: "it closed its communicator".into(),
                }));
            }
        }
        for (i, w) in self.watches.iter().enumerate() {
            if let Some(w) = w
                && !reached(self.word(i, slot::POSTED).load(Ordering::SeqCst), target)
                && w.exited()
            {
                return Err(EngineError::Link(LinkError::Closed {
                    peer: self.ranks[i],
                    graceful: false,
                    detail: format!(
                        "its process (pid {}) on this host exited (shared memory)",
                        w.pid
                    ),
                }));
            }
        }
        let missing: Vec<usize> = (0..self.size())
            .filter(|&i| {
                i != self.me && !reached(self.word(i, slot::POSTED).load(Ordering::SeqCst), target)
            })
            .map(|i| self.ranks[i])
            .collect();
        crate::flight::waiting(&missing);
        match deadline.check(call, &missing) {
            Phase::Wait(_) => Ok(()),
            Phase::Half(_) => {
                t.report_stall(call.op as u8, call.seq, &missing);
                Ok(())
            }
            Phase::Expired(elapsed) => Err(EngineError::Comm(CommError::Timeout {
                rank: self.ranks[self.me],
                call: *call,
                elapsed,
                waiting_for: missing,
                suspects: Box::default(),
                strangers: Box::new(t.strangers()),
            })),
            Phase::Interrupted(e) => Err(EngineError::Comm(e)),
        }
    }

    /// Says goodbye: this rank closed its communicator on purpose (peers waiting for it fail
    /// at once, naming it, instead of at their deadline).
    pub(crate) fn close(&self) {
        self.word(self.me, slot::CLOSED).store(1, Ordering::SeqCst);
        self.wake_everyone();
    }

    /// Wakes every rank asleep on any counter (after a failure, so they look at the control
    /// plane now rather than after their nap).
    pub(crate) fn wake_everyone(&self) {
        for i in 0..self.size() {
            futex::wake_all(self.word(i, slot::POSTED));
        }
    }
}
