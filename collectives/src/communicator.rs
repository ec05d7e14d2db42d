//! The [`Communicator`]: a group of ranks connected by a transport, built from a [`Store`].
//! This file holds construction, the call core (sequence numbers, the failed state, ordering
//! with asynchronous calls) and teardown; the collectives themselves are in
//! [`collectives`](crate::collectives).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use dt_rdzv::store::Store;

use crate::config::{Config, Options};
use crate::dtype::DType;
use crate::engine::{Bufs, Engine};
use crate::error::{CallDesc, CommError, OpKind};
use crate::op::ReduceOp;
use crate::schedule::Schedule;
use crate::transport::{Transport, mem};
use crate::work::{Job, Progress};

/// Which sequence counter a call uses.
#[derive(Clone, Copy)]
pub(crate) enum SeqKind {
    Collective,
    SendTo(usize),
    RecvFrom(usize),
}

pub(crate) struct State {
    engine: Engine,
    seq: u64,
    send_seq: Vec<u64>,
    recv_seq: Vec<u64>,
    failed: Option<CommError>,
}

pub(crate) struct Inner {
    pub rank: usize,
    pub world: usize,
    pub config: Config,
    state: Mutex<State>,
    drained: Condvar,
    pending: AtomicUsize,
    describe: String,
}

/// A call as the core runs it.
pub(crate) struct Call {
    pub op: OpKind,
    pub dtype: DType,
    pub redop: Option<ReduceOp>,
    pub count: usize,
    pub root: Option<usize>,
    pub seq: SeqKind,
}

/// A group of `world` ranks that run collectives together. Every rank calls the same
/// collectives in the same order; each call blocks until this rank's part is done (or use the
/// `_async` variants). Any failure (a lost rank, a deadline, a mismatched call) fails the
/// communicator: that call and every later one return an error naming the rank, the peer, the
/// call and its sequence number.
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
    progress: OnceLock<Progress>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
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
        let transport = crate::bootstrap::tcp_mesh(store.as_ref(), rank, world, &config)?;
        Ok(Communicator::from_transport(
            rank,
            world,
            config,
            Box::new(transport),
        ))
    }

    /// A whole group in this process over the in-memory transport (for tests and for
    /// single-process use): element `r` is rank `r`. Give each to its own thread.
    pub fn in_memory(world: usize, opts: Options) -> Result<Vec<Communicator>, CommError> {
        let config = resolve(0, world, &opts)?;
        let transports = mem::group(world, config.nsocks_perpeer.value, 64 << 10);
        Ok(transports
            .into_iter()
            .enumerate()
            .map(|(r, t)| Communicator::from_transport(r, world, config.clone(), Box::new(t)))
            .collect())
    }

    fn from_transport(
        rank: usize,
        world: usize,
        config: Config,
        t: Box<dyn Transport>,
    ) -> Communicator {
        let describe = t.describe();
        let engine = Engine::new(rank, t, config.timeout.value, config.spin.value);
        let state = State {
            engine,
            seq: 0,
            send_seq: vec![0; world],
            recv_seq: vec![0; world],
            failed: None,
        };
        Communicator {
            inner: Arc::new(Inner {
                rank,
                world,
                config,
                state: Mutex::new(state),
                drained: Condvar::new(),
                pending: AtomicUsize::new(0),
                describe,
            }),
            progress: OnceLock::new(),
        }
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

    /// The error that failed this communicator, if one did.
    pub fn failure(&self) -> Option<CommError> {
        lock(&self.inner.state).failed.clone()
    }

    pub(crate) fn exec(
        &self,
        call: &Call,
        sched: Schedule,
        work: &mut [u8],
        input: &[u8],
    ) -> Result<(), CommError> {
        let inner = &self.inner;
        let mut st = lock(&inner.state);
        // Calls queued asynchronously before this one go first.
        let start = Instant::now();
        while inner.pending.load(Ordering::Acquire) > 0 {
            let limit =
                inner.config.timeout.value * (inner.pending.load(Ordering::Acquire) as u32 + 1);
            if start.elapsed() > limit {
                return Err(CommError::Setup {
                    rank: inner.rank,
                    elapsed: start.elapsed(),
                    detail: "earlier asynchronous calls did not drain within their deadlines"
                        .into(),
                });
            }
            st = inner
                .drained
                .wait_timeout(st, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        inner.exec_locked(&mut st, call, sched, work, input)
    }

    pub(crate) fn submit<T: Send + 'static>(
        &self,
        job: impl FnOnce(&Inner, &mut State) -> Result<T, CommError> + Send + 'static,
    ) -> crate::work::Work<T> {
        let inner = self.inner.clone();
        let (tx, rx) = crate::work::oneshot();
        let ahead = inner.pending.fetch_add(1, Ordering::AcqRel) as u32;
        let deadline = inner.config.timeout.value * (ahead + 2);
        let job: Job = Box::new(move || {
            let mut st = lock(&inner.state);
            let r = job(&inner, &mut st);
            inner.pending.fetch_sub(1, Ordering::AcqRel);
            drop(st);
            inner.drained.notify_all();
            let _ = tx.send(r);
        });
        let progress = self
            .progress
            .get_or_init(|| Progress::start(self.inner.rank, self.inner.config.spin.value));
        if !progress.submit(job) {
            self.inner.pending.fetch_sub(1, Ordering::AcqRel);
        }
        crate::work::Work::new(rx, self.inner.config.spin.value, deadline, self.inner.rank)
    }

    pub(crate) fn invalid(&self, op: &'static str, detail: impl Into<String>) -> CommError {
        CommError::InvalidArgument {
            rank: self.inner.rank,
            op,
            detail: detail.into(),
        }
    }
}

impl Inner {
    pub(crate) fn exec_locked(
        &self,
        st: &mut State,
        call: &Call,
        sched: Schedule,
        work: &mut [u8],
        input: &[u8],
    ) -> Result<(), CommError> {
        if let Some(e) = &st.failed {
            return Err(CommError::Failed(Box::new(e.clone())));
        }
        let seq = match call.seq {
            SeqKind::Collective => &mut st.seq,
            SeqKind::SendTo(p) => &mut st.send_seq[p],
            SeqKind::RecvFrom(p) => &mut st.recv_seq[p],
        };
        let desc = CallDesc {
            op: call.op,
            dtype: call.dtype,
            redop: call.redop,
            count: call.count as u64,
            root: call.root,
            seq: *seq,
        };
        *seq += 1;
        let combine = call.redop.map_or(ReduceOp::Sum, ReduceOp::combine);
        let mut bufs = Bufs { work, input };
        match st.engine.run(&sched, &desc, combine, &mut bufs) {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::error!(rank = self.rank, "dtcomm: {e}");
                st.failed = Some(e.clone());
                Err(e)
            }
        }
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
        // Finish queued asynchronous calls, then say goodbye so peers know this is no crash.
        if let Some(p) = self.progress.take() {
            drop(p);
        }
        lock(&self.inner.state).engine.transport.shutdown();
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
