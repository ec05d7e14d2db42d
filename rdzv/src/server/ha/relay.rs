//! The TCPStore door of a server in a group sharing a backend (`--backend`): the server that
//! holds the door (see `owner`) serves the connection; any other relays it, byte for byte, to
//! that server's TCPStore port, so that every key lives in one engine with the store's full
//! semantics (atomic `add`, `compare_set`, waits) whichever server a client reached.
//! [`pipe`] is the relay itself, which the torchft door's relay (`lighthouse.rs`) uses too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dt_rdzv_proto::tcpstore::ConnId;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::owner::{Owners, Verdict};
use crate::server::config::ServeConfig;
use crate::server::ratelog::limited;
use crate::server::tcpstore::conn;
use crate::server::tcpstore::core::StoreCore;

/// How long relaying waits for the door's server to accept.
const CONNECT: Duration = Duration::from_secs(2);

/// Serves `stream` here if this server holds the group's TCPStore door (or nobody can say
/// otherwise: the backend does not answer and this server held it), else relays it.
pub(crate) async fn serve_or_relay(
    owners: &Owners,
    id: ConnId,
    stream: TcpStream,
    peer: SocketAddr,
    core: Arc<StoreCore>,
    config: Arc<ServeConfig>,
    stop: watch::Receiver<bool>,
) {
    match owners.claim_store().await {
        Verdict::Mine => conn::serve(id, stream, peer, core, config, stop).await,
        Verdict::Elsewhere { store, server, .. } => {
            pipe("TCPStore", id, stream, peer, &server, &store, stop).await
        }
        Verdict::Unknown(why) => {
            // Closing is the honest answer: the client's retry reaches a server that knows.
            limited!(warn, "TCPStore connection closed: cannot tell which server holds the door",
                %peer, %why);
        }
    }
}

/// Relays `stream` byte for byte to the door `what` of `server` at `to`, until either side
/// closes or the server stops.
pub(crate) async fn pipe(
    what: &'static str,
    id: u64,
    stream: TcpStream,
    peer: SocketAddr,
    server: &str,
    to: &str,
    stop: watch::Receiver<bool>,
) {
    match connect(to).await {
        Ok(upstream) => {
            tracing::info!(door = what, conn = id, %peer, %server, %to, "connection relayed");
            splice(what, id, stream, upstream, peer, stop).await;
        }
        Err(e) => {
            limited!(warn, "relay: the door's server did not take the connection", door = what,
                %peer, %server, %to, error = %e);
        }
    }
}

/// Connects to a door's server for relaying (at most [`CONNECT`]).
pub(crate) async fn connect(to: &str) -> std::io::Result<TcpStream> {
    let s = tokio::time::timeout(CONNECT, TcpStream::connect(to))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer within 2 s"))??;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// Copies both ways between `stream` and `upstream` until either side closes or the server
/// stops.
pub(crate) async fn splice(
    what: &'static str,
    id: u64,
    mut stream: TcpStream,
    mut upstream: TcpStream,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    tokio::select! {
        r = tokio::io::copy_bidirectional(&mut stream, &mut upstream) => {
            if let Err(e) = r {
                tracing::debug!(door = what, conn = id, %peer, error = %e, "relay ended");
            }
        }
        _ = stop.changed() => {}
    }
}
