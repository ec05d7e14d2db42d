//! The in-memory twin of the TCP transport: bounded byte pipes between threads of one process,
//! with the same partial reads and writes, goodbyes, aborts and lost peers. Pipes are small
//! on purpose, so frames cross them in pieces as they do over sockets; control messages travel
//! as the bytes of `control.rs`, the codec TCP uses.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::control::{self, Control};
use super::{ControlPlane, DataPlane, LinkError, StreamId};

const ALIVE: u8 = 0;
const GOODBYE: u8 = 1;
const DEAD: u8 = 2;

#[derive(Default)]
struct Notify {
    generation: Mutex<u64>,
    cv: Condvar,
}

impl Notify {
    fn bump(&self) {
        *lock(&self.generation) += 1;
        self.cv.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A control message as it travels: its sender and its bytes (`control.rs`, the codec TCP's
/// control sockets carry too).
type Wire = (usize, Vec<u8>);

struct Shared {
    world: usize,
    streams: usize,
    capacity: usize,
    /// Index: (from * world + to) * streams + stream.
    pipes: Vec<Mutex<VecDeque<u8>>>,
    status: Vec<AtomicU8>,
    /// The first abort each rank received.
    inbox: Vec<Mutex<Option<Wire>>>,
    /// Stall reports received, per rank.
    stalls: Vec<Mutex<Vec<Wire>>>,
    notify: Vec<Notify>,
}

impl Shared {
    fn pipe(&self, from: usize, to: usize, stream: usize) -> &Mutex<VecDeque<u8>> {
        &self.pipes[(from * self.world + to) * self.streams + stream]
    }
}

/// One rank's end of an in-memory group.
pub(crate) struct MemTransport {
    rank: usize,
    shared: Arc<Shared>,
    seen: u64,
}

/// Builds the transports of a whole group: `streams` streams per peer, pipes of `capacity`
/// bytes.
pub(crate) fn group(world: usize, streams: usize, capacity: usize) -> Vec<MemTransport> {
    let shared = Arc::new(Shared {
        world,
        streams,
        capacity,
        pipes: (0..world * world * streams)
            .map(|_| Mutex::new(VecDeque::new()))
            .collect(),
        status: (0..world).map(|_| AtomicU8::new(ALIVE)).collect(),
        inbox: (0..world).map(|_| Mutex::new(None)).collect(),
        stalls: (0..world).map(|_| Mutex::new(Vec::new())).collect(),
        notify: (0..world).map(|_| Notify::default()).collect(),
    });
    (0..world)
        .map(|rank| MemTransport {
            rank,
            shared: shared.clone(),
            seen: 0,
        })
        .collect()
}

/// One whole control message from `from`'s bytes (the twin passes messages whole).
fn decode(from: usize, bytes: &[u8]) -> Result<Control, LinkError> {
    match control::decode(bytes) {
        Ok(Some((m, n))) if n == bytes.len() => Ok(m),
        Ok(_) => Err(LinkError::Closed {
            peer: from,
            graceful: false,
            detail: "a control message cut short or with bytes after it".into(),
        }),
        Err(e) => Err(LinkError::Closed {
            peer: from,
            graceful: false,
            detail: e.to_string(),
        }),
    }
}

impl MemTransport {
    fn closed(&self, peer: usize) -> Option<LinkError> {
        match self.shared.status[peer].load(Ordering::Acquire) {
            ALIVE => None,
            s => Some(LinkError::Closed {
                peer,
                graceful: s == GOODBYE,
                detail: if s == GOODBYE {
                    "peer closed its communicator"
                } else {
                    "peer thread is gone"
                }
                .into(),
            }),
        }
    }

    fn set_status(&self, s: u8) {
        self.shared.status[self.rank].store(s, Ordering::Release);
        for n in &self.shared.notify {
            n.bump();
        }
    }
}

impl DataPlane for MemTransport {
    fn streams(&self, _peer: usize) -> usize {
        self.shared.streams
    }

    fn try_send(
        &mut self,
        peer: usize,
        stream: usize,
        a: &[u8],
        b: &[u8],
    ) -> Result<usize, LinkError> {
        if let Some(e) = self.closed(peer) {
            return Err(e);
        }
        let mut q = lock(self.shared.pipe(self.rank, peer, stream));
        let room = self.shared.capacity.saturating_sub(q.len());
        let na = a.len().min(room);
        q.extend(&a[..na]);
        let nb = b.len().min(room - na);
        q.extend(&b[..nb]);
        drop(q);
        if na + nb > 0 {
            self.shared.notify[peer].bump();
        }
        Ok(na + nb)
    }

    fn peek(&mut self, peer: usize, stream: usize, buf: &mut [u8]) -> Result<usize, LinkError> {
        let q = lock(self.shared.pipe(peer, self.rank, stream));
        if q.is_empty() {
            drop(q);
            return match self.closed(peer) {
                Some(e) => Err(e),
                None => Ok(0),
            };
        }
        let k = buf.len().min(q.len());
        for (d, s) in buf[..k].iter_mut().zip(q.iter()) {
            *d = *s;
        }
        Ok(k)
    }

    fn try_recv(
        &mut self,
        peer: usize,
        stream: usize,
        a: &mut [u8],
        b: &mut [u8],
    ) -> Result<usize, LinkError> {
        let mut q = lock(self.shared.pipe(peer, self.rank, stream));
        if q.is_empty() {
            drop(q);
            return match self.closed(peer) {
                Some(e) => Err(e),
                None => Ok(0),
            };
        }
        let mut n = 0;
        for dst in [a, b] {
            let k = dst.len().min(q.len());
            for (d, s) in dst[..k].iter_mut().zip(q.drain(..k)) {
                *d = s;
            }
            n += k;
        }
        drop(q);
        self.shared.notify[peer].bump();
        Ok(n)
    }

    fn park(
        &mut self,
        _sends: &[StreamId],
        _recvs: &[StreamId],
        timeout: Duration,
    ) -> Result<(), LinkError> {
        let n = &self.shared.notify[self.rank];
        let mut g = lock(&n.generation);
        if *g == self.seen {
            g =
                n.cv.wait_timeout(g, timeout)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
        }
        self.seen = *g;
        Ok(())
    }
}

impl ControlPlane for MemTransport {
    fn check(&mut self) -> Result<(), LinkError> {
        if let Some((from, bytes)) = lock(&self.shared.inbox[self.rank]).clone() {
            return Err(match decode(from, &bytes) {
                Ok(Control::Abort {
                    origin,
                    lost,
                    reason,
                }) => LinkError::Aborted {
                    origin,
                    lost,
                    reason,
                },
                Ok(other) => unreachable!("the inbox holds aborts, not {other:?}"),
                Err(e) => e,
            });
        }
        for peer in (0..self.shared.world).filter(|&p| p != self.rank) {
            if self.shared.status[peer].load(Ordering::Acquire) == DEAD {
                return Err(LinkError::Closed {
                    peer,
                    graceful: false,
                    detail: "peer thread is gone".into(),
                });
            }
        }
        Ok(())
    }

    fn report_stall(&mut self, op: u8, seq: u64, waiting_for: &[usize]) {
        let msg = Control::Stall {
            op,
            seq,
            waiting_for: waiting_for.to_vec(),
        }
        .encode();
        for peer in (0..self.shared.world).filter(|&p| p != self.rank) {
            lock(&self.shared.stalls[peer]).push((self.rank, msg.clone()));
        }
    }

    fn stalls(&mut self, op: u8, seq: u64) -> Vec<(usize, Vec<usize>)> {
        lock(&self.shared.stalls[self.rank])
            .iter()
            .filter_map(|(from, bytes)| match decode(*from, bytes) {
                Ok(Control::Stall {
                    op: o,
                    seq: s,
                    waiting_for,
                }) if o == op && s == seq => Some((*from, waiting_for)),
                _ => None,
            })
            .collect()
    }

    fn abort(&mut self, lost: Option<usize>, reason: &str) {
        let msg = Control::Abort {
            origin: self.rank,
            lost,
            reason: reason.to_owned(),
        }
        .encode();
        for peer in (0..self.shared.world).filter(|&p| p != self.rank) {
            let mut slot = lock(&self.shared.inbox[peer]);
            if slot.is_none() {
                *slot = Some((self.rank, msg.clone()));
            }
            drop(slot);
            self.shared.notify[peer].bump();
        }
    }

    fn shutdown(&mut self) {
        self.set_status(GOODBYE);
    }

    fn describe(&self) -> String {
        format!(
            "mem ({} streams/peer, {} B pipes)",
            self.shared.streams, self.shared.capacity
        )
    }

    fn linked(&self) -> Vec<usize> {
        (0..self.shared.world).filter(|&p| p != self.rank).collect()
    }

    fn strangers(&self) -> crate::error::Strangers {
        // No listener: nobody else can reach an in-memory pipe.
        crate::error::Strangers::default()
    }
}

impl Drop for MemTransport {
    fn drop(&mut self) {
        if self.shared.status[self.rank].load(Ordering::Acquire) == ALIVE {
            self.set_status(DEAD);
        }
    }
}
