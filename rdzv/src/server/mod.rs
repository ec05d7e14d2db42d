//! The tokio server behind `dt-rdzv serve`: a thin driver of the sans-IO store engine.
//!
//! * [`ServeConfig`]: every `dt-rdzv serve` flag (each with a `DTRDZV_*` twin in the CLI);
//! * `listener`: the dual-stack listening socket (socket2: backlog, NODELAY, keepalive);
//! * `core`: the engine and the per-connection outboxes behind one lock, so a reply and the
//!   wake-ups other connections cause reach each client in engine order;
//! * `conn`: one task per connection: read, decode, handle, write, with deadlines for a
//!   handshake that never comes and a frame that stops half way;
//! * [`Server`]: binds, runs until a shutdown signal, and [`BackgroundServer`] runs one on its
//!   own thread (tests, benchmarks, embedding).

mod config;
mod conn;
mod core;
mod listener;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config::{ServeConfig, parse_duration};

use self::core::Core;

/// A bound server, ready to run.
pub struct Server {
    config: ServeConfig,
    listener: TcpListener,
    core: Arc<Core>,
}

impl Server {
    /// Binds the TCPStore port. Call inside a tokio runtime.
    pub fn bind(config: ServeConfig) -> std::io::Result<Self> {
        let listener = listener::bind(&config)?;
        let core = Arc::new(Core::new(config.engine_config()));
        Ok(Self {
            config,
            listener,
            core,
        })
    }

    /// The address the TCPStore port is bound to.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves, then closes every connection.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let timer = tokio::spawn(core::run_timers(self.core.clone(), stop_rx.clone()));
        let config = Arc::new(self.config);
        let mut next_id: u64 = 0;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        next_id += 1;
                        listener::tune(&stream, config.tcp_keepalive);
                        tokio::spawn(conn::serve(
                            next_id, stream, peer, self.core.clone(), config.clone(), stop_rx.clone(),
                        ));
                    }
                    Err(e) => {
                        // EMFILE and friends: keep serving the connections we have.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                },
            }
        }
        let (conns, keys) = self.core.sizes();
        tracing::info!(connections = conns, keys, "shutting down");
        let _ = stop_tx.send(true);
        let _ = timer.await;
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
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BackgroundServer {
    /// Starts a server with `config` (use port 0 for an ephemeral port).
    pub fn start(config: ServeConfig) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.worker_threads.unwrap_or(2))
            .enable_all()
            .thread_name("dt-rdzv")
            .build()?;
        let server = rt.block_on(async { Server::bind(config) })?;
        let addr = server.local_addr()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("dt-rdzv-main".into())
            .spawn(move || {
                rt.block_on(server.run(async {
                    let _ = rx.await;
                }))
            })?;
        Ok(Self {
            addr,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// The bound address (a loopback address when bound to a wildcard, for clients).
    pub fn addr(&self) -> SocketAddr {
        let mut a = self.addr;
        if a.ip().is_unspecified() {
            a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        a
    }

    /// `host:port` for clients.
    pub fn endpoint(&self) -> String {
        self.addr().to_string()
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
