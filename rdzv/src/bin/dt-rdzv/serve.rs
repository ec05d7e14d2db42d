//! `dt-rdzv serve`: the server, until SIGTERM or SIGINT, with its addresses (and a generated
//! token) printed on stdout for scripts.

use std::process::ExitCode;

use dt_rdzv::server::{ServeConfig, Server};

/// Runs the server with `config`.
pub(crate) fn serve(config: ServeConfig) -> ExitCode {
    return_freed_values();
    dt_rdzv::server::raise_nofile_limit();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = config.worker_threads {
        rt.worker_threads(n);
    }
    let rt = match rt.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dt-rdzv: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        // Watch the signals before any port opens: a SIGTERM that arrives once clients can
        // reach us must stop us cleanly, not find the default disposition still in place.
        let shutdown = shutdown_signal();
        let server = match Server::bind(config.clone()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "dt-rdzv: cannot listen on {}:{}: {e}",
                    config.host, config.port
                );
                return ExitCode::FAILURE;
            }
        };
        let server = match &config.backend {
            None => server,
            Some(b) => {
                let opened = match config.backend_access() {
                    Ok(access) => {
                        dt_rdzv::server::storage::open(b, config.backend_timeout, &access)
                            .await
                            .map_err(std::io::Error::other)
                    }
                    Err(e) => Err(e),
                };
                let shared = match opened {
                    Ok(storage) => server.share(storage).await,
                    Err(e) => Err(e),
                };
                match shared {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("dt-rdzv: --backend {b}: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        };
        let addr = server.local_addr().ok();
        let native = server.native_addr();
        let http = server.http_addr();
        let fingerprint = server.fingerprint().unwrap_or("-").to_string();
        tracing::info!(
            tcpstore = ?addr,
            native = ?native,
            http = ?http,
            %fingerprint,
            namespace_ttl = ?config.namespace_ttl.0,
            heartbeat_timeout = ?config.heartbeat_timeout,
            "dt-rdzv serve listening"
        );
        // Machine-readable lines on stdout, for scripts that start us on port 0. The first
        // line stays the TCPStore address.
        let show = |a: Option<std::net::SocketAddr>| a.map_or("off".to_string(), |a| a.to_string());
        println!("dt-rdzv listening tcpstore={}", show(addr));
        println!(
            "dt-rdzv listening native={} fingerprint={fingerprint}",
            show(native)
        );
        println!("dt-rdzv listening http={}", show(http));
        if let Some(a) = server.etcd_v2_addr() {
            println!("dt-rdzv listening etcd_v2={a}");
            if server.token().0.is_some() {
                tracing::warn!(
                    "the etcd v2 port asks for the token (HTTP basic password or bearer); torch's etcd backends send none: use --no-auth on a trusted network for them"
                );
            }
        }
        if let Some(a) = server.torchft_addr() {
            println!("dt-rdzv listening torchft={a}");
            tracing::info!(
                min_replicas = config.torchft_min_replicas,
                join_timeout_ms = config.torchft_join_timeout_ms,
                quorum_tick_ms = config.torchft_quorum_tick_ms,
                heartbeat_timeout_ms = config.torchft_heartbeat_timeout_ms,
                "torchft Lighthouse listening on {a} (TORCHFT_LIGHTHOUSE=http://<this host>:{})",
                a.port()
            );
        }
        match server.token() {
            (Some(t), true) => {
                tracing::warn!(
                    "no token given (DTRDZV_TOKEN, --token-file): generated one for this run"
                );
                println!("dt-rdzv token={t}");
            }
            (None, _) => tracing::warn!(
                "--no-auth: anyone who reaches the native port may join and read jobs"
            ),
            _ => {}
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        server.run(shutdown).await;
        ExitCode::SUCCESS
    })
}

/// Installs the SIGTERM and SIGINT handlers now and returns what resolves when either comes.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = int.recv() => tracing::info!("SIGINT received"),
            },
            (term, int) => {
                let e = term
                    .err()
                    .or(int.err())
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                tracing::warn!(error = %e, "cannot watch SIGTERM/SIGINT; stop with SIGKILL");
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Freed values return their memory: glibc raises its mmap threshold each time a large
/// block is freed, after which 8 MiB values come from the heap and a server's RSS keeps the
/// high-water mark of its churn. A fixed 1 MiB threshold keeps every value-sized buffer
/// mmapped, so the memory bounds in the README hold for RSS too. Only the `serve` process does
/// this (an embedded server leaves its host's allocator alone).
fn return_freed_values() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter (thread-safe, no memory passed).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
