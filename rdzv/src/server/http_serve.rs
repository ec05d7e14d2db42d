//! HTTP/1 on hyper with bounds, shared by the status port and the etcd v2 port: the
//! dual-stack bind, and the accept loop (a cap on open connections where silent ones make room
//! for new ones, see `admission.rs`; a head-size limit, a head deadline, an optional
//! connection lifetime, and a hook when each connection ends).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::admission::Gate;

/// What one port allows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Open connections at once; past it a new one evicts the oldest silent one, or is closed
    /// when every connection has sent a request.
    pub(crate) max_connections: usize,
    /// Largest request head hyper buffers (431 past it).
    pub(crate) max_head: usize,
    /// A head must arrive within this (hyper counts a keep-alive connection's idle time too).
    pub(crate) head_deadline: Duration,
    /// Longest a connection stays open (`None`: as long as the client keeps it).
    pub(crate) lifetime: Option<Duration>,
}

/// Binds `host:port` for `what` (`::` falls back to `0.0.0.0` without IPv6).
pub(crate) fn bind(host: IpAddr, port: u16, what: &str) -> std::io::Result<TcpListener> {
    let l = match std::net::TcpListener::bind(SocketAddr::new(host, port)) {
        Err(e) if host == IpAddr::from([0u16; 8]) => {
            tracing::warn!(error = %e, "no IPv6 for the {what} port; using 0.0.0.0");
            std::net::TcpListener::bind(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port))?
        }
        other => other?,
    };
    l.set_nonblocking(true)?;
    TcpListener::from_std(l)
}

/// Serves `listener` until `stop` turns true. For each accepted connection `connection(peer)`
/// gives the router to serve it with and a hook run when it ends.
pub(crate) async fn accept_loop<F>(
    listener: TcpListener,
    what: &'static str,
    bounds: Bounds,
    mut stop: watch::Receiver<bool>,
    mut connection: F,
) where
    F: FnMut(SocketAddr) -> (Router, Box<dyn FnOnce() + Send>),
{
    let gate = Gate::new(what, bounds.max_connections);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(mut slot) = gate.admit(peer) else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (app, ended) = connection(peer);
                    tokio::spawn(async move {
                        if !slot.first_bytes(&stream).await {
                            tracing::debug!(%peer, "{what} connection closed: silent");
                            ended();
                            return;
                        }
                        let conn = hyper::server::conn::http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(bounds.head_deadline)
                            .max_buf_size(bounds.max_head)
                            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
                        let served = match bounds.lifetime {
                            Some(l) => tokio::time::timeout(l, conn).await.ok(),
                            None => Some(conn.await),
                        };
                        match served {
                            Some(Err(e)) => tracing::debug!(%peer, error = %e,
                                "{what} connection ended with an error"),
                            None => tracing::debug!(%peer, "{what} connection closed at its lifetime"),
                            Some(Ok(())) => {}
                        }
                        ended();
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "{what} accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        }
    }
}
