//! The TCPStore door of a server in a group sharing a backend (`--backend`): the server that
//! holds the door (see `owner`) serves the connection; any other relays it, byte for byte, to
//! that server's TCPStore port, so that every key lives in one engine with the store's full
//! semantics (atomic `add`, `compare_set`, waits) whichever server a client reached.

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
    mut stream: TcpStream,
    peer: SocketAddr,
    core: Arc<StoreCore>,
    config: Arc<ServeConfig>,
    mut stop: watch::Receiver<bool>,
) {
    match owners.claim_store().await {
        Verdict::Mine => conn::serve(id, stream, peer, core, config, stop).await,
        Verdict::Elsewhere { store, server, .. } => {
            let upstream =
                match tokio::time::timeout(CONNECT, TcpStream::connect(store.as_str())).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        limited!(warn, "TCPStore relay: the door's server refused", %peer,
                        %server, %store, error = %e);
                        return;
                    }
                    Err(_) => {
                        limited!(warn, "TCPStore relay: the door's server did not answer",
                        %peer, %server, %store, timeout = ?CONNECT);
                        return;
                    }
                };
            let _ = upstream.set_nodelay(true);
            tracing::info!(conn = id, %peer, %server, %store, "TCPStore connection relayed");
            let mut upstream = upstream;
            tokio::select! {
                r = tokio::io::copy_bidirectional(&mut stream, &mut upstream) => {
                    if let Err(e) = r {
                        tracing::debug!(conn = id, %peer, error = %e, "TCPStore relay ended");
                    }
                }
                _ = stop.changed() => {}
            }
        }
        Verdict::Unknown(why) => {
            // Closing is the honest answer: the client's retry reaches a server that knows.
            limited!(warn, "TCPStore connection closed: cannot tell which server holds the door",
                %peer, %why);
        }
    }
}
