//! The [`Communicator`]: a group of ranks connected by a transport, built from a [`Store`].
//!
//! * this file: construction, the byte-level entry ([`Communicator::run`],
//!   [`Communicator::submit`]) through the one progress executor, the failed state, teardown;
//! * `args.rs`: a [`Call`]'s arguments checked before anything is sent;
//! * `route.rs`: which backend runs a checked call, decided in one place, and the dispatch;
//! * `backend/`: the backends, a file each (links and their schedules, shared memory,
//!   hierarchical, host staging of device buffers, NCCL; see `crate::device`);
//! * `buffers.rs`: byte views of a checked call's buffers, shared by the backends;
//! * `typed.rs`: the safe typed API (`all_reduce<T>` and friends), a thin layer over `run`.

mod args;
mod backend;
mod buffers;
mod route;
mod typed;

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use dt_rdzv::store::Store;

use crate::call::Call;
use crate::config::{Config, Options};
use crate::engine::Engine;
use crate::error::CommError;
use crate::fence::RoundFence;
use crate::progress::{Completion, Job, OnDone, Progress, Work};
use crate::transport::{Transport, mem};

pub(crate) use backend::links::allreduce_algo;

/// The engine and the counters of one communicator, behind its lock.
pub(crate) struct State {
    engine: Engine,
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
    /// Connects rank `rank` of `world` over TCP, finding the peers through `store`: each rank
    /// publishes its listen address under `<prefix>/<generation>/addr/<rank>` and reads
    /// everyone else's (`generation` counts the communicators this rank built on the store, so
    /// every rank must build its communicators in the same order).
    /// Blocks until every rank has joined, or fails at the deadline naming the missing ranks.
    /// `store` may be `dt_rdzv::client::TcpStoreClient` (a `dt-rdzv serve` or torch TCPStore)
    /// or a [`MemoryStore`](dt_rdzv::store::MemoryStore) shared by threads.
    pub fn new(
        store: Arc<dyn Store>,
        rank: usize,
        world: usize,
        opts: Options,
    ) -> Result<Communicator, CommError> {
        let config = resolve(rank, world, &opts)?;
        tracing::info!(rank, world, "dtcomm config: {config}");
        let (transport, hosts) = crate::bootstrap::tcp_mesh(store.as_ref(), rank, world, &config)?;
        Communicator::connected(rank, world, config, Box::new(transport), hosts)
    }

    /// A whole group in this process over the in-memory transport (for tests and for
    /// single-process use): element `r` is rank `r`. Give each to its own thread. With
    /// `transport: Some(LinkKind::Shm)` (or `DTCOMM_TRANSPORT=shm`) the ranks also share memory
    /// as the ranks of one host do.
    pub fn in_memory(world: usize, opts: Options) -> Result<Vec<Communicator>, CommError> {
        let config = resolve(0, world, &opts)?;
        let transports = mem::group(world, config.nsocks_perpeer.value, 64 << 10);
        if config.transport.value != crate::config::LinkKind::Shm {
            return Ok(transports
                .into_iter()
                .enumerate()
                .map(|(r, t)| Communicator::from_transport(r, world, config.clone(), Box::new(t)))
                .collect());
        }
        // Shared memory between the threads (tests of the shared-memory path in one process):
        // the set-up exchanges over the in-memory links, so every rank runs it at once.
        std::thread::scope(|s| {
            let hs: Vec<_> = transports
                .into_iter()
                .enumerate()
                .map(|(r, t)| {
                    let config = config.clone();
                    s.spawn(move || Communicator::connected(r, world, config, Box::new(t), None))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("set-up thread panicked"))
                .collect()
        })
    }

    pub(crate) fn from_transport(
        rank: usize,
        world: usize,
        config: Config,
        t: Box<dyn Transport>,
    ) -> Communicator {
        let describe = t.describe();
        let engine = Engine::new(rank, t, config.spin.value);
        Communicator::from_engine(world, config, engine, describe)
    }

    /// [`from_transport`](Self::from_transport), then the host's peers found and joined in
    /// shared memory (`DTCOMM_TRANSPORT`; see `shm/setup.rs`), and the start-up line saying
    /// which link each peer got. `hosts`: every rank's host record from the address book, when
    /// it has them all.
    pub(crate) fn connected(
        rank: usize,
        world: usize,
        config: Config,
        t: Box<dyn Transport>,
        hosts: Option<Vec<Vec<u8>>>,
    ) -> Result<Communicator, CommError> {
        let describe = t.describe();
        let mut engine = Engine::new(rank, t, config.spin.value);
        let found = crate::shm::setup::find(&mut engine, world, &config, hosts.as_deref())?;
        tracing::info!(rank, "dtcomm links: {}", found.describe);
        engine.shm = found.group;
        engine.spin.set_host_ranks(found.host_ranks);
        let describe = format!("{describe}; {}", found.describe);
        let comm = Communicator::from_engine(world, config, engine, describe);
        comm.inner
            .host_ranks
            .store(found.host_ranks, Ordering::Relaxed);
        Ok(comm)
    }

    fn from_engine(world: usize, config: Config, engine: Engine, describe: String) -> Communicator {
        let rank = engine.rank;
        let fence = engine.fence.clone();
        let cancel = engine.cancel.clone();
        let state = State {
            engine,
            seq: 0,
            send_seq: vec![0; world],
            recv_seq: vec![0; world],
            failed: None,
            device: backend::staged::DeviceState::default(),
        };
        Communicator {
            inner: Arc::new(Inner {
                rank,
                world,
                config,
                state: Mutex::new(state),
                drained: Condvar::new(),
                pending: AtomicUsize::new(0),
                watching: AtomicUsize::new(0),
                describe,
                fork_gen: crate::fork::generation(),
                fence,
                device_rt: OnceLock::new(),
                host_ranks: AtomicUsize::new(1),
                cancel,
            }),
            progress: OnceLock::new(),
        }
    }

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
        lock(&self.inner.state).engine.transport.linked()
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

    /// Runs `call` on this thread, after every call submitted before it, and returns when this
    /// rank's part is done. Argument errors ([`CommError::InvalidArgument`]) send nothing and
    /// leave the communicator usable; any other error fails it.
    ///
    /// # Safety
    /// The call's buffers must be valid for their element count and dtype (reads for `send`,
    /// reads and writes for `recv`) until this returns, and nothing else may write them (or,
    /// for `recv`, read them) meanwhile. `send` and `recv` may overlap.
    pub unsafe fn run(&self, call: &Call) -> Result<(), CommError> {
        let inner = &self.inner;
        inner.usable(call)?;
        inner.check(call)?;
        let device = crate::device::plan::device_of(call);
        let mut st = inner.drained_for(call, device.is_some())?;
        if let Some((device, stream)) = device {
            inner.refuse_if_over(&mut st, call)?;
            // SAFETY: the caller's contract.
            let started = unsafe { inner.enqueue_device(&mut st, call, device, stream) }?;
            drop(st);
            return started.map_or(Ok(()), |f| inner.watch_unlocked(f));
        }
        // SAFETY: the caller's contract.
        unsafe { inner.execute(&mut st, call) }
    }

    /// Queues `call` for the progress thread and returns its [`Work`] at once. Calls run in
    /// submission order (blocking [`run`](Self::run) calls included). Bad arguments give a
    /// `Work` that has already failed.
    ///
    /// # Safety
    /// As for [`run`](Self::run), but until the returned [`Work`] reports completion.
    pub unsafe fn submit(&self, call: Call) -> Work {
        // SAFETY: the caller's contract.
        unsafe { self.submit_with(call, None, None) }
    }

    /// [`submit`](Self::submit) with `keep` (dropped, or handed back by [`Work::take`], only
    /// after the call finished: the owner of the buffers) and `on_done` (run with the result on
    /// the thread that ran the call, once the `Work` reports completion).
    ///
    /// # Safety
    /// As for [`submit`](Self::submit).
    pub unsafe fn submit_with(
        &self,
        call: Call,
        keep: Option<Box<dyn Any + Send>>,
        on_done: Option<OnDone>,
    ) -> Work {
        if let Some((device, stream)) = crate::device::plan::device_of(&call) {
            // SAFETY: the caller's contract.
            return unsafe { self.submit_device(call, keep, on_done, device, stream) };
        }
        let inner = self.inner.clone();
        let op = call.collective.name();
        let done = Completion::new(keep);
        let early = inner.usable(&call).and_then(|()| inner.check(&call));
        let ahead = inner.pending.fetch_add(1, Ordering::AcqRel) as u32;
        let deadline = call.deadline.unwrap_or(inner.config.timeout.value);
        let default_wait = inner.config.timeout.value * (ahead + 1) + deadline;
        let work = inner.work(&done, op, default_wait);
        let finish = move |inner: &Inner, r: Result<(), CommError>| {
            let for_callback = on_done.as_ref().map(|_| r.clone());
            done.set(r);
            inner.pending.fetch_sub(1, Ordering::AcqRel);
            // Wake blocking calls waiting for the queue to drain (under the lock, so none
            // misses it between its check and its wait).
            drop(lock(&inner.state));
            inner.drained.notify_all();
            // Last, so that a callback may itself call this communicator.
            if let (Some(f), Some(r)) = (on_done, for_callback) {
                f(&r);
            }
        };
        if let Err(e) = early {
            finish(&inner, Err(e));
            return work;
        }
        let job_inner = inner.clone();
        let job: Job = Box::new(move || {
            let r = {
                let mut st = lock(&job_inner.state);
                // SAFETY: the submitter's contract covers the time until completion.
                unsafe { job_inner.execute(&mut st, &call) }
            };
            finish(&job_inner, r);
        });
        self.to_progress(job);
        work
    }

    /// A device call submitted: started on this thread (so the caller's stream is ordered after
    /// it when this returns: torch's and NCCL's stream semantics), then, on NCCL, watched to
    /// its end by the progress thread; a staged call runs to its end here.
    ///
    /// # Safety
    /// As for [`submit`](Self::submit).
    unsafe fn submit_device(
        &self,
        call: Call,
        keep: Option<Box<dyn Any + Send>>,
        on_done: Option<OnDone>,
        device: i32,
        stream: crate::device::StreamHandle,
    ) -> Work {
        let inner = self.inner.clone();
        let op = call.collective.name();
        let done = Completion::new(keep);
        let timeout = inner.config.timeout.value;
        let default_wait = 2 * timeout + call.deadline.unwrap_or(timeout);
        let work = inner.work(&done, op, default_wait);
        let started = inner
            .usable(&call)
            .and_then(|()| inner.check(&call))
            .and_then(|()| inner.drained_for(&call, true))
            .and_then(|mut st| {
                inner.refuse_if_over(&mut st, &call)?;
                // SAFETY: the caller's contract.
                unsafe { inner.enqueue_device(&mut st, &call, device, stream) }
            });
        let report = move |r: Result<(), CommError>| {
            let for_callback = on_done.as_ref().map(|_| r.clone());
            done.set(r);
            if let (Some(f), Some(r)) = (on_done, for_callback) {
                f(&r);
            }
        };
        let inflight = match started {
            Ok(Some(f)) => f,
            Ok(None) => {
                report(Ok(()));
                return work;
            }
            Err(e) => {
                report(Err(e));
                return work;
            }
        };
        inner.pending.fetch_add(1, Ordering::AcqRel);
        inner.watching.fetch_add(1, Ordering::AcqRel);
        let job_inner = inner.clone();
        let job: Job = Box::new(move || {
            let r = job_inner.watch_unlocked(inflight);
            job_inner.watching.fetch_sub(1, Ordering::AcqRel);
            job_inner.pending.fetch_sub(1, Ordering::AcqRel);
            drop(lock(&job_inner.state));
            job_inner.drained.notify_all();
            report(r);
        });
        self.to_progress(job);
        work
    }

    /// Hands `job` to the progress thread (started on first use), or runs it here when there
    /// is none.
    fn to_progress(&self, job: Job) {
        let inner = &self.inner;
        let progress = self.progress.get_or_init(|| {
            let p = Progress::start(inner.rank, inner.cancel.clone()).unwrap_or_else(|e| {
                tracing::error!(rank = inner.rank, "dtcomm: no progress thread: {e}");
                Progress::dead()
            });
            Mutex::new(p)
        });
        if let Err(job) = lock(progress).submit(job) {
            // No progress thread: run it here rather than lose it.
            job();
        }
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
            if let Some(g) = &st.engine.shm {
                g.close();
            }
            st.engine.transport.shutdown();
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

    /// The state lock, once the calls queued before `call` are out of the way: all of them,
    /// or for a device call only host calls (device calls that are only watched run on).
    /// Fails the communicator when they stay stuck past their own deadlines: this rank could
    /// no longer keep the same call order as its peers.
    fn drained_for(&self, call: &Call, device: bool) -> Result<MutexGuard<'_, State>, CommError> {
        let mut st = lock(&self.state);
        let start = Instant::now();
        let ahead = || {
            let p = self.pending.load(Ordering::Acquire);
            if device {
                p.saturating_sub(self.watching.load(Ordering::Acquire))
            } else {
                p
            }
        };
        while ahead() > 0 {
            if let Some(reason) = crate::interrupt::requested() {
                // The calls ahead of this one stop too: the caller gave up on the sequence.
                self.interrupt(&reason);
                let e = CommError::Interrupted {
                    rank: self.rank,
                    call: call.desc(st.seq),
                    elapsed: start.elapsed(),
                    reason,
                };
                st.failed.get_or_insert_with(|| e.clone());
                return Err(e);
            }
            let limit = self.config.timeout.value * (ahead() as u32 + 1);
            if start.elapsed() > limit {
                let e = CommError::WaitTimeout {
                    rank: self.rank,
                    op: call.collective.name(),
                    waited: start.elapsed(),
                };
                st.failed.get_or_insert_with(|| e.clone());
                return Err(e);
            }
            st = self
                .drained
                .wait_timeout(st, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(st)
    }

    /// Watches a device call to its end, taking the state lock only for each look.
    fn watch_unlocked(&self, mut f: backend::nccl_calls::Inflight) -> Result<(), CommError> {
        loop {
            let r = {
                let mut st = lock(&self.state);
                self.poll(&mut st, &mut f)
            };
            if let Some(r) = r {
                return r;
            }
            f.pause();
        }
    }

    /// The handle of a call of this communicator that completes through `done`.
    fn work(&self, done: &Arc<Completion>, op: &'static str, default_wait: Duration) -> Work {
        Work::new(
            done.clone(),
            self.rank,
            op,
            default_wait,
            self.cancel.clone(),
        )
    }

    /// Asks the calls in flight on the progress thread to stop (`reason` says why): each fails
    /// with [`CommError::Interrupted`] at its next look at its deadline (within 100 ms), which
    /// fails the communicator and tells the peers.
    pub(crate) fn interrupt(&self, reason: &str) {
        lock(&self.cancel).get_or_insert_with(|| reason.to_owned());
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
