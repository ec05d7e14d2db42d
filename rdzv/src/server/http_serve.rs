//! HTTP/1 on hyper with bounds, shared by the status port and the etcd v2 port: the
//! dual-stack bind, and the accept loop (a cap on open connections where silent ones make room
//! for new ones, see `admission.rs`; a head-size limit, a head deadline, an optional
//! connection lifetime, and a hook when each connection ends), and for the status port,
//! idle connections making room too and slots reserved for `/healthz`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::admission::{Activity, Gate};

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

/// Listen backlog of the HTTP ports (the kernel caps it at net.core.somaxconn): with std's
/// 128, a flood of connections overflowed the accept queue and a liveness probe's SYN was
/// dropped (answered a second later, at its retry).
pub(crate) const BACKLOG: i32 = 4096;

/// Binds `host:port` for `what` (`::` falls back to `0.0.0.0` without IPv6).
pub(crate) fn bind(host: IpAddr, port: u16, what: &str) -> std::io::Result<TcpListener> {
    let l = match bind_one(SocketAddr::new(host, port)) {
        Err(e) if host == IpAddr::from([0u16; 8]) => {
            tracing::warn!(error = %e, "no IPv6 for the {what} port; using 0.0.0.0");
            bind_one(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port))?
        }
        other => other?,
    };
    TcpListener::from_std(l)
}

fn bind_one(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Serves `listener` until `stop` turns true. For each accepted connection `connection(peer)`
/// gives the router to serve it with and a hook run when it ends. Proven connections keep
/// their slots (no reserve).
pub(crate) async fn accept_loop<F>(
    listener: TcpListener,
    what: &'static str,
    bounds: Bounds,
    stop: watch::Receiver<bool>,
    connection: F,
) where
    F: FnMut(SocketAddr) -> (Router, Box<dyn FnOnce() + Send>),
{
    let gate = Gate::new(what, bounds.max_connections);
    serve(listener, what, bounds, gate, None, stop, connection).await;
}

/// What a door serves on its reserved slots (`admission.rs`): a router that answers only
/// what must never be locked out, one request per connection, whose head must arrive within
/// `head_deadline`.
#[derive(Clone)]
pub(crate) struct Reserve {
    /// Reserved slots.
    pub(crate) slots: usize,
    /// The router for connections on them.
    pub(crate) app: Router,
    /// Their head deadline.
    pub(crate) head_deadline: Duration,
}

/// [`accept_loop`] where idle connections (a head still arriving, kept alive between
/// requests) make room for new ones, the longest idle first, and a connection the full door
/// would refuse gets one of `reserve`'s slots.
pub(crate) async fn accept_loop_with_reserve<F>(
    listener: TcpListener,
    what: &'static str,
    bounds: Bounds,
    reserve: Reserve,
    stop: watch::Receiver<bool>,
    connection: F,
) where
    F: FnMut(SocketAddr) -> (Router, Box<dyn FnOnce() + Send>),
{
    let gate = Gate::with_reserve(what, bounds.max_connections, reserve.slots);
    serve(
        listener,
        what,
        bounds,
        gate,
        Some(reserve),
        stop,
        connection,
    )
    .await;
}

async fn serve<F>(
    listener: TcpListener,
    what: &'static str,
    bounds: Bounds,
    gate: Arc<Gate>,
    reserve: Option<Reserve>,
    mut stop: watch::Receiver<bool>,
    mut connection: F,
) where
    F: FnMut(SocketAddr) -> (Router, Box<dyn FnOnce() + Send>),
{
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(mut slot) = gate.admit(peer) else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (mut app, ended) = connection(peer);
                    let mut bounds = bounds;
                    let mut keep_alive = true;
                    if let Some(r) = reserve.as_ref() {
                        if slot.reserved() {
                            app = r.app.clone();
                            bounds.head_deadline = r.head_deadline;
                            keep_alive = false;
                        }
                        app = tracked(app, slot.activity());
                    }
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
                            .keep_alive(keep_alive)
                            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
                        let lifetime = async {
                            match bounds.lifetime {
                                Some(l) => tokio::time::timeout(l, conn).await.ok(),
                                None => Some(conn.await),
                            }
                        };
                        let served = tokio::select! {
                            s = lifetime => s,
                            _ = slot.evicted() => {
                                tracing::debug!(%peer, "{what} connection closed: idle, to make room");
                                Some(Ok(()))
                            }
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

/// `app`, telling `activity` when each request starts and is answered.
fn tracked(app: Router, activity: Activity) -> Router {
    app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let activity = activity.clone();
            async move {
                activity.busy();
                let response = next.run(req).await;
                activity.idle();
                response
            }
        },
    ))
}
