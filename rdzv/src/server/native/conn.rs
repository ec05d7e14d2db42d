//! The QUIC port: one connection per member, one bidirectional stream on it (a node agent's
//! connection carries one more stream per rank of its node: `streams`). Each connection
//! task reads frames, decodes them and feeds the rendezvous machine; a writer task sends what
//! the machine routes to the connection. Garbage, another version, or a failed handshake is
//! refused (when a stream exists to say so) and logged; nothing else is disturbed.
//!
//! Deadlines: a connection must complete its QUIC handshake, open its stream, and send a
//! request the machine accepts (a `Join` with a good token, or a status or stop request) within
//! the handshake timeout of arriving; any frame, once started, must complete within the frame
//! timeout. Client frames are at most [`MAX_CLIENT_PAYLOAD`] bytes. Repeated warnings (a
//! handshake flood) are rate-limited.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use dt_rdzv_proto::native::{CLOSE_GOING_AWAY, CLOSE_NO_STREAM, CLOSE_NORMAL};
use dt_rdzv_proto::rendezvous::Input;
use tokio::sync::watch;

use super::claims::Claims;
use super::memory::NativeMemory;
use super::outbox;
use super::pace::Pace;
use super::partial;
use super::reader::{Conn, OnNode};
use super::rendezvous::RdzvCore;
use super::sources::{Slot, Sources};
use super::streams::{self, next_id};
use super::writer::Writer;
use crate::native::udp;
use crate::server::config::ServeConfig;
use crate::server::ratelog::limited;

/// Binds the UDP socket of the QUIC port, with buffers that hold a join burst.
pub(crate) fn bind(
    config: &ServeConfig,
    server: quinn::ServerConfig,
) -> std::io::Result<quinn::Endpoint> {
    let addr = SocketAddr::new(config.host, config.native_port);
    let socket = match open(addr) {
        Err(e) if config.host == IpAddr::from([0u16; 8]) => {
            tracing::warn!(error = %e, "no IPv6 for the QUIC port; listening on 0.0.0.0");
            open(SocketAddr::new(
                Ipv4Addr::UNSPECIFIED.into(),
                config.native_port,
            ))?
        }
        other => other?,
    };
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(server),
        socket,
        Arc::new(quinn::TokioRuntime),
    )
}

fn open(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let (socket, granted) =
        udp::bind(addr, udp::SERVER_RECV_BUFFER, udp::SERVER_SEND_BUFFER, true)?;
    if granted < udp::SERVER_RECV_BUFFER {
        tracing::warn!(
            granted,
            wanted = udp::SERVER_RECV_BUFFER,
            "the kernel capped the QUIC port's UDP receive buffer; a burst of joins may lose \
             handshake packets (each costs its member ~1 s). Raise net.core.rmem_max"
        );
    }
    Ok(socket)
}

/// Accepts connections until `stop` flips.
pub(crate) async fn accept_loop(
    endpoint: quinn::Endpoint,
    core: Arc<RdzvCore>,
    owners: Option<Arc<dyn Claims>>,
    config: Arc<ServeConfig>,
    mut stop: watch::Receiver<bool>,
) {
    // Native connection ids count down from the top, away from the store's; a node agent's
    // streams take theirs from the same counter.
    let ids = Arc::new(AtomicU64::new(u64::MAX));
    let memory = core.memory().clone();
    let sources = Sources::default();
    let per_source = config.native_connections_per_source();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                // QUIC connections, not streams: a node agent's counts once.
                if sources.total() >= config.max_native_connections {
                    limited!(warn, "native connection refused: at the connection limit",
                        peer = %incoming.remote_address(), limit = config.max_native_connections);
                    incoming.refuse();
                    continue;
                }
                let slot = match sources.take(incoming.remote_address().ip(), per_source) {
                    Ok(slot) => slot,
                    Err(held) => {
                        limited!(warn, "native connection refused: its address holds its share \
                            of the door (--max-native-connections-per-source)",
                            peer = %incoming.remote_address(), held, limit = per_source);
                        incoming.refuse();
                        continue;
                    }
                };
                let charges = Charges { memory: memory.clone(), _slot: slot };
                tokio::spawn(serve(ids.clone(), incoming, core.clone(), owners.clone(),
                    config.clone(), stop.clone(), charges));
            }
        }
    }
    endpoint.close(CLOSE_GOING_AWAY.into(), b"server shutting down");
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
}

/// What one connection is charged to while it lives: the door's memory (its queue, its
/// partly received frames), and its place in its source address's share of the door.
struct Charges {
    memory: Arc<NativeMemory>,
    _slot: Slot,
}

async fn serve(
    ids: Arc<AtomicU64>,
    incoming: quinn::Incoming,
    core: Arc<RdzvCore>,
    owners: Option<Arc<dyn Claims>>,
    config: Arc<ServeConfig>,
    stop: watch::Receiver<bool>,
    charges: Charges,
) {
    let id = next_id(&ids);
    let peer = incoming.remote_address();
    let arrived = tokio::time::Instant::now();
    let deadline = config.handshake_timeout;
    let conn = match tokio::time::timeout(deadline, incoming).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            limited!(warn, "QUIC handshake failed", %peer, error = %e);
            return;
        }
        Err(_) => {
            limited!(warn, "QUIC handshake did not finish in time", %peer, ?deadline);
            return;
        }
    };
    let (send, recv) = match tokio::time::timeout(deadline, conn.accept_bi()).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "connection closed before opening a stream");
            return;
        }
        Err(_) => {
            limited!(warn, "no stream opened in time; closing", %peer, ?deadline);
            conn.close(CLOSE_NO_STREAM.into(), b"no stream opened in time");
            return;
        }
    };
    tracing::debug!(conn = id, %peer, "native connection opened");
    let (tx, rx) = outbox::outbox(charges.memory.clone());
    core.connect(id, peer.ip().to_canonical().to_string(), tx.clone());
    let shutting_down = stop.clone();
    let admitted = Arc::new(AtomicBool::new(false));
    // Told when the machine accepts a node agent's hello: its ranks' streams are served then.
    let (node_tx, node_rx) = tokio::sync::oneshot::channel();
    let mut writer = tokio::spawn(
        Writer {
            send,
            outbox: rx,
            conn: conn.clone(),
            admitted: admitted.clone(),
            whole: true,
            node: Some(node_tx),
        }
        .run(),
    );
    let agent = streams::Agent {
        conn: conn.clone(),
        carrier: id,
        ids,
        core: core.clone(),
        owners: owners.clone(),
        config: config.clone(),
        stop: stop.clone(),
        memory: charges.memory.clone(),
    };
    let mut c = Conn {
        id,
        recv,
        own: tx,
        admitted,
        owners,
        partial: partial::Charge::new(charges.memory.partial.clone()),
        pace: Pace::new(std::time::Instant::now()),
        on_node: Some(OnNode {
            accepted: node_rx,
            start: Box::new(move |max| {
                tokio::spawn(agent.serve(max));
            }),
        }),
    };
    let why = match c.run(&core, stop, arrived, &config, &mut writer).await {
        Ok(why) => why,
        Err(why) => {
            limited!(warn, "native connection closed at a deadline", conn = id, %peer, %why);
            why
        }
    };
    drop(c);
    tracing::debug!(conn = id, %peer, %why, "native connection closed");
    if *shutting_down.borrow() {
        // A restart: members reconnect and resume their rounds. The machine goes with the
        // process and must not take these closes for members lost: it would end their rounds
        // and tell the members whose connections are still open (their writers run on their
        // own), who would then fail their collectives instead of resuming.
        writer.abort();
        conn.close(CLOSE_GOING_AWAY.into(), b"server shutting down");
        return;
    }
    core.input(Input::Closed {
        conn: id,
        why: why.clone(),
    });
    // What the machine sent before it forgot the connection (the outbox closes with it).
    if !writer.is_finished()
        && tokio::time::timeout(Duration::from_secs(3), &mut writer)
            .await
            .is_err()
    {
        writer.abort();
    }
    conn.close(CLOSE_NORMAL.into(), b"closed");
}
