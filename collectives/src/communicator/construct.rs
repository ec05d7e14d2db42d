//! Every way a [`Communicator`] comes to be, in one place: over a store
//! ([`Communicator::new`]), in memory ([`Communicator::in_memory`]), from a native round's
//! welcome ([`Communicator::from_welcome`]), over a transport built elsewhere, and (in
//! `subset.rs`) from some of another communicator's ranks. The links themselves are
//! `bootstrap/`'s.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use dt_rdzv::store::Store;

use super::{Communicator, Inner, State, backend, resolve};
use crate::bootstrap::welcome::{DataListener, RoundPeers, welcome_mesh};
use crate::config::{Config, Options};
use crate::engine::Engine;
use crate::error::CommError;
use crate::transport::{Transport, mem};

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
        Communicator::from_engine(world, config, engine, None, describe)
    }

    /// [`from_transport`](Self::from_transport), then the host's peers found and joined in
    /// shared memory (`DTCOMM_TRANSPORT`; see `backend/shm/setup.rs`), and the start-up line saying
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
        let found = backend::shm::setup::find(&mut engine, world, &config, hosts.as_deref())?;
        tracing::info!(rank, "dtcomm links: {}", found.describe);
        engine.spin.set_host_ranks(found.host_ranks);
        let describe = format!("{describe}; {}", found.describe);
        let comm = Communicator::from_engine(world, config, engine, found.group, describe);
        comm.inner
            .host_ranks
            .store(found.host_ranks, Ordering::Relaxed);
        Ok(comm)
    }

    pub(super) fn from_engine(
        world: usize,
        config: Config,
        engine: Engine,
        shm: Option<backend::shm::ShmGroup>,
        describe: String,
    ) -> Communicator {
        let rank = engine.rank;
        let fence = engine.fence.clone();
        let cancel = engine.cancel.clone();
        let state = State {
            engine,
            shm,
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
                flight: OnceLock::new(),
                flight_live: OnceLock::new(),
                subsets: AtomicU64::new(0),
            }),
            progress: OnceLock::new(),
        }
    }

    /// Builds rank `peers.rank` of a native round over `listener` (bound before joining):
    /// links to the peers at their `Welcome` addresses open when a call first needs them (this
    /// rank dials lower ranks and is dialed by higher ones), every link proving it holds
    /// `secret` for this job and round ([`round_secret`](crate::bootstrap::welcome::round_secret)).
    /// Returns once this host's ranks have found each other (`backend/shm/setup.rs`: a few ring
    /// exchanges, so ring neighbours are linked) or the deadline passes.
    pub fn from_welcome(
        listener: DataListener,
        peers: &RoundPeers,
        secret: &[u8],
    ) -> Result<Communicator, CommError> {
        let links = welcome_mesh(listener, peers, secret)?;
        let (rank, world) = (peers.rank, peers.world);
        Communicator::connected(
            rank,
            world,
            links.config,
            Box::new(links.transport),
            links.hosts,
        )
    }
}
