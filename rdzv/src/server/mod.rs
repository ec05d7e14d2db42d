//! The tokio server behind `dt-rdzv serve`: a thin driver of the sans-IO store engine and
//! rendezvous machine. Its folders mirror `dt_rdzv_proto`'s, one per door or part:
//!
//! * `tcpstore/`: the TCPStore door: its listening socket, the store core, one task per
//!   connection;
//! * `native/`: the native door: the QUIC port (29401), the rendezvous core and its journal,
//!   the TLS [`Identity`];
//! * `http.rs` and `http/`: the HTTP door (29402): the routes, the status page, [`job_json`],
//!   `/metrics`;
//! * `etcd_v2/`: etcd's v2 keys API on `--etcd-v2-port` (off by default), for torch's etcd
//!   rendezvous backends;
//! * `torchft/`: torchft's Lighthouse on `--torchft-port` (off by default): gRPC over h2c
//!   and `/status` on one port, for torchft's `Manager`;
//! * `ha/`: several servers sharing jobs through etcd (`--backend`): [`storage`], the owners
//!   (one per job by lease, members sent to it, jobs taken over when it dies), the TCPStore
//!   relay.
//!
//! Shared by the doors, here:
//!
//! * [`ServeConfig`]: every `dt-rdzv serve` flag (each with a `DTRDZV_*` twin in the CLI);
//! * `driver`: one driver for the three sans-IO cores: a core and its routes (outboxes,
//!   watchers) behind one lock, outputs routed in the core's order, and its timer task;
//! * `admission`: who gets a connection slot on a door, silent connections making room;
//! * `http_serve`: HTTP/1 on hyper with bounds, for the HTTP and etcd v2 doors;
//! * [`raise_nofile_limit`]: the open-file limit raised to hard (by `dt-rdzv serve`), and the
//!   TCPStore connection cap derived from the limit in force;
//! * `ratelog`: per-reason rate limits for repeated log lines;
//! * [`Server`]: binds, runs until a shutdown signal, and [`BackgroundServer`] runs one on its
//!   own thread (tests, benchmarks, embedding).

mod admission;
mod config;
mod driver;
mod etcd_v2;
mod fdlimit;
mod ha;
mod http;
mod http_serve;
mod memory;
mod native;
mod ratelog;
mod tcpstore;
mod torchft;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config::{ServeConfig, parse_duration};
pub use fdlimit::raise_nofile_limit;
pub use ha::storage;
pub use http::hang_json::{hang_json, progress_json};
pub use http::json::job_json;
pub use native::identity::Identity;

use self::ha::{owner, relay};
use self::native::conn as native_conn;
use self::native::rendezvous::{self, RdzvCore};
use self::tcpstore::core::StoreCore;
use self::tcpstore::{conn, listener};

/// A bound server, ready to run.
pub struct Server {
    config: ServeConfig,
    listener: Option<TcpListener>,
    core: Arc<StoreCore>,
    native: Option<quinn::Endpoint>,
    rdzv: Arc<RdzvCore>,
    http: Option<TcpListener>,
    etcd_v2: Option<TcpListener>,
    torchft: Option<TcpListener>,
    fingerprint: Option<String>,
    token: Option<String>,
    token_generated: bool,
    max_tcpstore_connections: usize,
    /// The one memory budget over every door.
    memory: Arc<memory::ServerMemory>,
    /// Jobs shared with other servers (`--backend`), and where the machine tells it.
    owners: Option<(
        Arc<owner::Owners>,
        tokio::sync::mpsc::UnboundedReceiver<rendezvous::Note>,
    )>,
}

impl Server {
    /// Binds the ports that are on (TCPStore, native QUIC, HTTP). Call inside a tokio runtime.
    pub fn bind(config: ServeConfig) -> std::io::Result<Self> {
        let (token, token_generated) = config.resolve_token()?;
        let nofile = fdlimit::current_nofile();
        let max_tcpstore_connections = config
            .max_tcpstore_connections
            .unwrap_or_else(|| fdlimit::default_cap(nofile));
        if !config.no_tcpstore {
            tracing::info!(
                max_tcpstore_connections,
                max_queued_reply_bytes = config.max_queued_reply_bytes,
                "TCPStore connection bounds"
            );
        }
        let listener = if config.no_tcpstore {
            None
        } else {
            Some(listener::bind(&config)?)
        };
        let budget = config.memory_budget();
        match &budget {
            Some((bytes, source)) => {
                tracing::info!(bytes, source = %source, "the server's memory budget")
            }
            None => tracing::info!(
                "no server-wide memory budget (no cgroup memory limit and no --max-memory-bytes)"
            ),
        }
        let memory = memory::ServerMemory::new(budget.map(|b| b.0));
        let core = Arc::new(StoreCore::new(config.engine_config(), memory.clone()));
        let native_memory =
            native::memory::NativeMemory::new(memory.clone(), config.max_partial_frame_bytes);
        let rdzv = Arc::new(RdzvCore::new(
            config.machine_config(token.clone()),
            native_memory,
        ));
        let (native, fingerprint) = if config.no_native {
            (None, None)
        } else {
            let identity = match (&config.tls_cert, &config.tls_key) {
                (Some(c), Some(k)) if !c.exists() && !k.exists() => {
                    let id = Identity::generate(&config.tls_names)?;
                    id.write(c, k)?;
                    tracing::info!(cert = %c.display(), key = %k.display(),
                        "generated a TLS identity into the given files");
                    id
                }
                (Some(c), Some(k)) => Identity::from_files(c, k)?,
                _ => Identity::generate(&config.tls_names)?,
            };
            // Past every liveness timeout: the machine, not the transport, says who is lost.
            let idle = (config.heartbeat_timeout * 4)
                .max(config.waiting_heartbeat_timeout * 2)
                .max(std::time::Duration::from_secs(10));
            let endpoint = native_conn::bind(&config, identity.quic_server_config(idle)?)?;
            (Some(endpoint), Some(identity.fingerprint()))
        };
        let http = if config.no_http {
            None
        } else {
            Some(http_serve::bind(config.host, config.http_port, "HTTP")?)
        };
        let etcd_v2 = match config.etcd_v2_port {
            Some(port) => Some(http_serve::bind(config.host, port, "etcd v2")?),
            None => None,
        };
        let torchft = match config.torchft_port {
            Some(port) => Some(http_serve::bind(config.host, port, "torchft")?),
            None => None,
        };
        Ok(Self {
            config,
            listener,
            core,
            memory,
            native,
            rdzv,
            http,
            etcd_v2,
            torchft,
            fingerprint,
            token,
            token_generated,
            max_tcpstore_connections,
            owners: None,
        })
    }

    /// Binds like [`Server::bind`], then joins the group of servers sharing `--backend`, if
    /// set: an error (naming the endpoints) when the backend does not answer.
    pub async fn open(config: ServeConfig) -> std::io::Result<Self> {
        let storage = match &config.backend {
            None => None,
            Some(b) => Some(
                storage::open(b, config.backend_timeout, &config.backend_access()?)
                    .await
                    .map_err(std::io::Error::other)?,
            ),
        };
        Self::open_with(config, storage).await
    }

    /// Binds like [`Server::bind`] and shares jobs through `storage` (when given) with the
    /// other servers on it.
    pub async fn open_with(
        config: ServeConfig,
        storage: Option<Arc<dyn storage::Storage>>,
    ) -> std::io::Result<Self> {
        let server = Self::bind(config)?;
        match storage {
            Some(storage) => server.share(storage).await,
            None => Ok(server),
        }
    }

    /// Joins the group of servers sharing jobs through `storage`: takes this server's lease
    /// (an error when the storage does not answer).
    pub async fn share(mut self, storage: Arc<dyn storage::Storage>) -> std::io::Result<Self> {
        let server = &mut self;
        {
            let native = server.native_addr().ok_or_else(|| {
                std::io::Error::other("--backend needs the native port (drop --no-native)")
            })?;
            let endpoint = server
                .config
                .advertise
                .clone()
                .unwrap_or_else(|| advertised(native));
            // The TCPStore and torchft doors as the others reach them: the advertised host,
            // their ports.
            let host = endpoint
                .rsplit_once(':')
                .map_or(endpoint.as_str(), |(h, _)| h)
                .to_string();
            let door =
                |a: Option<SocketAddr>| a.map_or(String::new(), |a| format!("{host}:{}", a.port()));
            let store = door(server.local_addr().ok());
            let torchft = door(server.torchft_addr());
            let owners = owner::Owners::start(
                storage,
                server.config.backend_prefix.clone(),
                server.config.owner_ttl,
                endpoint,
                store,
                torchft,
            )
            .await
            .map_err(std::io::Error::other)?;
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            server.rdzv.set_notes(tx);
            server.owners = Some((owners, rx));
        }
        Ok(self)
    }

    /// The address the TCPStore port is bound to (an error when it is off).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match &self.listener {
            Some(l) => l.local_addr(),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the TCPStore port is off",
            )),
        }
    }

    /// The native (QUIC) port's address, if on.
    pub fn native_addr(&self) -> Option<SocketAddr> {
        self.native.as_ref().and_then(|e| e.local_addr().ok())
    }

    /// The HTTP port's address, if on.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The etcd v2 port's address, if on.
    pub fn etcd_v2_addr(&self) -> Option<SocketAddr> {
        self.etcd_v2.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The torchft Lighthouse port's address, if on.
    pub fn torchft_addr(&self) -> Option<SocketAddr> {
        self.torchft.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The native port's certificate fingerprint (`sha256:...`), for clients to pin.
    pub fn fingerprint(&self) -> Option<&str> {
        self.fingerprint.as_deref()
    }

    /// The join token in force (`None` with `--no-auth`) and whether it was generated.
    pub fn token(&self) -> (Option<&str>, bool) {
        (self.token.as_deref(), self.token_generated)
    }

    /// Serves until `shutdown` resolves, then closes every connection.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (store, stop) = (self.core.clone(), stop_rx.clone());
        let timer = tokio::spawn(async move { store.run_timers(stop).await });
        let (rdzv, stop) = (self.rdzv.clone(), stop_rx.clone());
        let rdzv_timer = tokio::spawn(async move { rdzv.run_timers(stop).await });
        let (rdzv, stop) = (self.rdzv.clone(), stop_rx.clone());
        // The timelines serve the HTTP port only.
        let timeline = self
            .http
            .is_some()
            .then(|| tokio::spawn(async move { rdzv.run_timeline(stop).await }));
        let config = Arc::new(self.config);
        let (owners, owner_task) = match self.owners {
            Some((o, notes)) => {
                let task = tokio::spawn(o.clone().run(self.rdzv.clone(), notes, stop_rx.clone()));
                (Some(o), Some(task))
            }
            None => (None, None),
        };
        let native = self.native.map(|e| {
            tokio::spawn(native_conn::accept_loop(
                e,
                self.rdzv.clone(),
                owners.clone().map(|o| o as Arc<dyn native::claims::Claims>),
                config.clone(),
                stop_rx.clone(),
            ))
        });
        if let Some(l) = self.http {
            let state = Arc::new(http::HttpState {
                store: self.listener.as_ref().map(|_| self.core.clone()),
                rdzv: self.rdzv.clone(),
                owners: owners.clone(),
            });
            tokio::spawn(http::accept_loop(l, state, stop_rx.clone()));
        }
        if let Some(l) = self.etcd_v2 {
            let door = etcd_v2::V2Door::new(
                etcd_v2::V2Config {
                    token: self.token.clone(),
                    store: dt_rdzv_proto::etcd_v2::StoreConfig {
                        limits: dt_rdzv_proto::etcd_v2::Limits {
                            max_bytes: config.max_store_bytes,
                            ..Default::default()
                        },
                        idle_ttl: config.namespace_ttl.0,
                    },
                },
                self.memory.clone(),
            );
            self.memory.register(memory::Door::EtcdV2, door.clone());
            tokio::spawn(etcd_v2::run(l, door, stop_rx.clone()));
        }
        if let Some(l) = self.torchft {
            // Quorum ids start above this start's time: a restarted server never reissues one.
            let mut lighthouse = config.lighthouse_config();
            lighthouse.min_quorum_id = lighthouse.min_quorum_id.max(ha::lighthouse::unix_millis());
            let door = torchft::LighthouseDoor::new(lighthouse);
            tokio::spawn(torchft::run(l, door, owners.clone(), stop_rx.clone()));
        }
        let mut next_id: u64 = 0;
        let gate = admission::Gate::new("TCPStore", self.max_tcpstore_connections);
        tokio::pin!(shutdown);
        match &self.listener {
            None => shutdown.await,
            Some(listener) => loop {
                tokio::select! {
                    _ = &mut shutdown => break,
                    accepted = listener.accept() => match accepted {
                        Ok((stream, peer)) => {
                            // At the limit, a silent connection makes room (`admission.rs`).
                            let Some(mut slot) = gate.admit(peer) else {
                                drop(stream);
                                continue;
                            };
                            next_id += 1;
                            listener::tune(&stream, config.tcp_keepalive);
                            let (core, config, stop) =
                                (self.core.clone(), config.clone(), stop_rx.clone());
                            let owners = owners.clone();
                            tokio::spawn(async move {
                                if !slot.first_bytes(&stream).await {
                                    return;
                                }
                                // The connection ends as at shutdown when the gate gives its
                                // slot to another host (`admission.rs`).
                                let (stop, ended) = admission::stop_or_evicted(stop, &mut slot);
                                let serve = async move {
                                    match owners {
                                        None => conn::serve(next_id, stream, peer, core, config, stop).await,
                                        Some(o) => relay::serve_or_relay(
                                            &o, next_id, stream, peer, core, config, stop,
                                        )
                                        .await,
                                    }
                                };
                                tokio::select! {
                                    _ = serve => {}
                                    _ = ended => unreachable!("pends once it has told"),
                                }
                                drop(slot);
                            });
                        }
                        Err(e) => {
                            // EMFILE and friends: keep serving the connections we have.
                            ratelog::limited!(warn, "accept failed", error = %e);
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        }
                    },
                }
            },
        }
        let (conns, keys) = self.core.sizes();
        tracing::info!(connections = conns, keys, "shutting down");
        let _ = stop_tx.send(true);
        let _ = timer.await;
        let _ = rdzv_timer.await;
        if let Some(t) = timeline {
            let _ = t.await;
        }
        if let Some(n) = native {
            let _ = n.await;
        }
        if let Some(t) = owner_task {
            let _ = t.await;
        }
        // Give connection tasks a moment to flush and close.
        let deadline = Instant::now() + std::time::Duration::from_secs(2);
        while self.core.sizes().0 > 0 && Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Store counters, for status pages and tests.
    pub fn stats(&self) -> dt_rdzv_proto::tcpstore::Stats {
        self.core.stats()
    }
}

/// A server on its own thread and runtime; stops when dropped.
pub struct BackgroundServer {
    addr: Option<SocketAddr>,
    native: Option<SocketAddr>,
    http: Option<SocketAddr>,
    fingerprint: Option<String>,
    token: Option<String>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    vanish: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn loopback(mut a: SocketAddr) -> SocketAddr {
    if a.ip().is_unspecified() {
        a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    a
}

/// The endpoint other servers send members to by default: the bound address when it is a
/// specific one, else this host's name, with the native port.
fn advertised(native: SocketAddr) -> String {
    if !native.ip().is_unspecified() {
        return native.to_string();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", native.port())
}

impl BackgroundServer {
    /// Starts a server with `config` (use port 0 for ephemeral ports).
    pub fn start(config: ServeConfig) -> std::io::Result<Self> {
        Self::start_with(config, None)
    }

    /// Starts a server sharing jobs through `storage` (see [`Server::open_with`]); with
    /// `None`, through `config.backend` if set.
    pub fn start_with(
        config: ServeConfig,
        storage: Option<Arc<dyn storage::Storage>>,
    ) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.worker_threads.unwrap_or(2))
            .enable_all()
            .thread_name("dt-rdzv")
            .build()?;
        let server = rt.block_on(async {
            match storage {
                Some(s) => Server::open_with(config, Some(s)).await,
                None => Server::open(config).await,
            }
        })?;
        let addr = server.local_addr().ok();
        let (native, http) = (server.native_addr(), server.http_addr());
        let fingerprint = server.fingerprint().map(str::to_owned);
        let token = server.token().0.map(str::to_owned);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (vanish_tx, vanish_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("dt-rdzv-main".into())
            .spawn(move || {
                let mut run = Box::pin(server.run(async {
                    let _ = rx.await;
                }));
                let abrupt = rt.block_on(async {
                    tokio::select! {
                        _ = &mut run => false,
                        Ok(()) = vanish_rx => true,
                    }
                });
                if abrupt {
                    // Every task dropped where it stands: no close frame, no goodbye, no
                    // revoked lease, as after a SIGKILL. The server future is leaked, not
                    // dropped: dropping it first would tell the tasks to stop cleanly.
                    rt.shutdown_background();
                    std::mem::forget(run);
                }
            })?;
        Ok(Self {
            addr,
            native,
            http,
            fingerprint,
            token,
            stop: Some(tx),
            vanish: Some(vanish_tx),
            thread: Some(thread),
        })
    }

    /// Stops the server as a SIGKILL would (for tests of what clients and other servers do
    /// then): its tasks are dropped where they stand, nothing is closed or said.
    pub fn vanish(mut self) {
        if let Some(tx) = self.vanish.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// The TCPStore address (a loopback address when bound to a wildcard, for clients).
    ///
    /// # Panics
    /// When the TCPStore port is off.
    pub fn addr(&self) -> SocketAddr {
        loopback(self.addr.expect("the TCPStore port is off"))
    }

    /// `host:port` of the TCPStore port for clients.
    pub fn endpoint(&self) -> String {
        self.addr().to_string()
    }

    /// `host:port` of the native (QUIC) port for clients, if on.
    pub fn native_endpoint(&self) -> Option<String> {
        self.native.map(|a| loopback(a).to_string())
    }

    /// `host:port` of the HTTP port, if on.
    pub fn http_endpoint(&self) -> Option<String> {
        self.http.map(|a| loopback(a).to_string())
    }

    /// The certificate fingerprint clients pin.
    pub fn fingerprint(&self) -> Option<&str> {
        self.fingerprint.as_deref()
    }

    /// The token in force.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }
}

impl Drop for BackgroundServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
