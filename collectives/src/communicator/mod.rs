//! The [`Communicator`]: a group of ranks connected by a transport, built from a [`Store`].
//!
//! * this file: the communicator's state, the failed state, teardown;
//! * `construct.rs` and `subset.rs`: every constructor (over a store, in memory, from a native
//!   round's welcome, over a transport, from some of another communicator's ranks);
//! * `submit.rs`: the byte-level entry ([`Communicator::run`], [`Communicator::submit`])
//!   through the one progress executor;
//! * `args.rs`: a [`Call`]'s arguments checked before anything is sent;
//! * `route.rs`: which backend runs a checked call, a pure function of the call and the
//!   communicator's shape, tested as a table;
//! * `lower.rs`: a host call lowered once for any backend (its description and sequence
//!   counter, the bytes it works in and reads, the copy before and `Avg`'s division after);
//! * `execute.rs`: refusing a call on a communicator that is over, the dispatch to the
//!   backend, and the one place a backend's error fails the communicator;
//! * `backend/`: the backends, a file (or folder) each, holding only what they use (links and
//!   their schedules, shared memory, hierarchical, host staging of device buffers, NCCL; see
//!   `crate::device`);
//! * `buffers.rs`: byte views of a checked call's buffers, shared by the backends;
//! * `typed.rs`: the safe typed API (`all_reduce<T>` and friends), a thin layer over `run`.

mod args;
mod backend;
mod buffers;
mod construct;
mod execute;
mod lower;
mod record;
mod route;
mod submit;
mod subset;
mod typed;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::call::Call;
use crate::config::{Config, Options};
use crate::engine::Engine;
use crate::error::CommError;
use crate::fence::RoundFence;
use crate::progress::Progress;
use crate::transport::ControlPlane;

pub(crate) use backend::links::allreduce_algo;

/// The engine and the counters of one communicator, behind its lock.
pub(crate) struct State {
    engine: Engine,
    /// This rank's host group, when its ranks share memory (the shared-memory backend's).
    shm: Option<backend::shm::ShmGroup>,
    seq: u64,
    send_seq: Vec<u64>,
    recv_seq: Vec<u64>,
    failed: Option<CommError>,
    device: backend::staged::DeviceState,
}

/// What a communicator's calls share with the progress thread.
pub(crate) struct Inner {
    pub rank: usize,
    pub world: usize,
    pub config: Config,
    state: Mutex<State>,
    /// Signalled whenever a queued call finished.
    drained: Condvar,
    /// Calls submitted to the progress thread and not finished yet.
    pending: AtomicUsize,
    /// Of those, device calls already queued on the device that are only being watched (a
    /// device call may start while they run; a host call waits for them).
    watching: AtomicUsize,
    describe: String,
    /// The fork generation this communicator was built in.
    fork_gen: u64,
    /// The engine's round fence (here too: read without the state lock a running call holds).
    fence: Arc<RoundFence>,
    /// CUDA and NCCL for device buffers (or why there are none), set on first use.
    device_rt: OnceLock<Result<crate::device::DeviceRuntime, String>>,
    /// Ranks on this rank's host, itself included (1 until the set-up found them).
    host_ranks: AtomicUsize,
    /// Why the calls in flight must stop (a caller waiting on one was interrupted): read by
    /// the progress thread's interrupt check and by callers queued behind it.
    cancel: Arc<Mutex<Option<String>>>,
    /// The flight recorder's group of this communicator (unset: a world communicator).
    flight: OnceLock<crate::flight::Group>,
    /// This communicator in the recorder, made at its first recorded call (`None`: the
    /// recorder is off); its group is fixed from then on.
    flight_live: OnceLock<Option<Arc<crate::flight::Live>>>,
    /// Subsets made from this communicator so far (their recorder groups' ids count them).
    subsets: AtomicU64,
}

/// A group of `world` ranks that run collectives together. Every rank calls the same
/// collectives in the same order; each call blocks until this rank's part is done (or use the
/// `_async` variants, or [`submit`](Communicator::submit)). Any failure (a lost rank, a
/// deadline, a mismatched call) fails the communicator: that call and every later one return
/// an error naming the rank, the peer, the call and its sequence number.
///
/// ```
/// use dtcomm::{Communicator, Options, ReduceOp};
///
/// // Four ranks in this process, one thread each, over the in-memory transport.
/// let comms = Communicator::in_memory(4, Options::default()).unwrap();
/// let sums: Vec<Vec<f32>> = std::thread::scope(|s| {
///     let hs: Vec<_> = comms
///         .iter()
///         .map(|c| s.spawn(move || {
///             let mut v = vec![c.rank() as f32; 3];
///             c.all_reduce(&mut v, ReduceOp::Sum).unwrap();
///             v
///         }))
///         .collect();
///     hs.into_iter().map(|h| h.join().unwrap()).collect()
/// });
/// assert!(sums.iter().all(|v| v == &[6.0, 6.0, 6.0]));
/// ```
pub struct Communicator {
    pub(crate) inner: Arc<Inner>,
    progress: OnceLock<Mutex<Progress>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Communicator {
    /// Interrupts the calls in flight: blocking ones on any thread and the progress thread's
    /// (a caller waiting on one was interrupted, e.g. by Ctrl-C, or the communicator is being
    /// destroyed): each fails with [`CommError::Interrupted`] within 100 ms, the communicator
    /// is failed and the peers are told. Calls made later fail the same way.
    pub fn interrupt(&self, reason: &str) {
        self.inner.interrupt(reason);
    }

    /// How many ranks of this communicator run on this rank's host, itself included (found
    /// at set-up from every rank's host identity; 1 for a communicator built without it).
    pub fn host_ranks(&self) -> usize {
        self.inner.host_ranks.load(Ordering::Relaxed)
    }

    /// This rank, in `0..world`.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Number of ranks.
    pub fn world(&self) -> usize {
        self.inner.world
    }

    /// The resolved configuration, with where each value came from.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The transport, for logs and benchmark preambles (e.g. `tcp 10.0.0.5:4711 on eth0 (1
    /// data socket(s)/peer)`).
    pub fn transport_description(&self) -> &str {
        &self.inner.describe
    }

    /// This communicator's round fence: end it when the membership service ends the round,
    /// set its reporter to hear of peers this rank's links lost (see [`RoundFence`]).
    pub fn fence(&self) -> Arc<RoundFence> {
        self.inner.fence.clone()
    }

    /// The peers this rank holds a data link to now. Links open when a call first needs
    /// them, so after allreduce-only work this is the ring neighbours and the doubling
    /// partners (O(log world)), not every peer; host peers in shared memory need none.
    /// Waits for a call in progress on another thread.
    pub fn linked_peers(&self) -> Vec<usize> {
        lock(&self.inner.state).engine.links.linked()
    }

    /// Uses `runtime` for device buffers instead of the CUDA and NCCL found in this process
    /// (the in-memory twins of [`device::twin`](crate::device::twin), or another NCCL). Only
    /// before the first call on device buffers; afterwards the runtime in use stays and this
    /// returns `false`.
    pub fn set_device_runtime(&self, runtime: crate::device::DeviceRuntime) -> bool {
        self.inner.device_rt.set(Ok(runtime)).is_ok()
    }

    /// The error that failed this communicator, if one did.
    pub fn failure(&self) -> Option<CommError> {
        lock(&self.inner.state).failed.clone()
    }

    /// Finishes the queued calls, says goodbye to the peers (so they know this is no crash)
    /// and closes the connections. Later calls fail with [`CommError::Shutdown`].
    pub fn shutdown(&self) {
        if self.inner.forked() {
            return;
        }
        if let Some(p) = self.progress.get() {
            lock(p).stop();
        }
        let mut st = lock(&self.inner.state);
        if !matches!(st.failed, Some(CommError::Shutdown { .. })) {
            if let Some(g) = &st.shm {
                g.close();
            }
            st.engine.links.shutdown();
            st.failed = Some(CommError::Shutdown {
                rank: self.inner.rank,
                op: "call",
                detail: "shutdown() was called".into(),
            });
        }
    }
}

impl Inner {
    pub(crate) fn invalid(&self, op: &'static str, detail: impl Into<String>) -> CommError {
        CommError::InvalidArgument {
            rank: self.rank,
            op,
            detail: detail.into(),
        }
    }

    fn forked(&self) -> bool {
        crate::fork::generation() != self.fork_gen
    }

    /// Refuses calls from a forked child.
    fn usable(&self, call: &Call) -> Result<(), CommError> {
        if self.forked() {
            return Err(CommError::Shutdown {
                rank: self.rank,
                op: call.collective.name(),
                detail: format!(
                    "this process (pid {}) is a fork of the one that built the communicator; \
                     build a new one in the child",
                    std::process::id()
                ),
            });
        }
        Ok(())
    }
}

fn resolve(rank: usize, world: usize, opts: &Options) -> Result<Config, CommError> {
    let setup = |detail: String| CommError::Setup {
        rank,
        elapsed: Duration::ZERO,
        detail,
    };
    if world == 0 || rank >= world {
        return Err(setup(format!("rank {rank} is not in a world of {world}")));
    }
    if world > u32::MAX as usize / 2 {
        return Err(setup(format!("world {world} is too large")));
    }
    Config::resolve(opts).map_err(setup)
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if self.inner.forked() {
            // The parent's threads and peers: touch nothing (a lock may be held by a thread
            // that does not exist here), and never drop the state.
            if let Some(p) = self.progress.take() {
                p.into_inner().unwrap_or_else(|p| p.into_inner()).forget();
            }
            std::mem::forget(self.inner.clone());
            return;
        }
        self.shutdown();
    }
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.inner.rank)
            .field("world", &self.inner.world)
            .field("transport", &self.inner.describe)
            .finish()
    }
}
