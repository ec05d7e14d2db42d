//! One task per client connection.
//!
//! Reads into a buffer, decodes every complete request, hands them to the engine in one lock,
//! and writes whatever lands in the connection's outbox. It keeps reading while a WAIT is
//! parked, because CANCEL_WAIT arrives on the same connection. Deadlines: the first request
//! must arrive within the handshake timeout, and a request that has started must finish within
//! the frame timeout; a connection that is merely quiet between requests is left alone.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use dt_rdzv_proto::tcpstore::{ConnId, Decoded, decode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

use super::config::ServeConfig;
use super::core::{Core, Out};

/// Read buffers start small (thousands of mostly idle connections) and grow to the frame size.
const INITIAL_BUFFER: usize = 512;
/// An idle buffer larger than this is given back after a big request.
const KEEP_BUFFER: usize = 64 * 1024;

pub(crate) async fn serve(
    id: ConnId,
    stream: TcpStream,
    peer: SocketAddr,
    core: Arc<Core>,
    config: Arc<ServeConfig>,
    stop: watch::Receiver<bool>,
) {
    tracing::info!(conn = id, %peer, "connection opened");
    let (tx, rx) = mpsc::unbounded_channel();
    core.register(id, tx);
    let reason = drive(id, stream, &core, &config, rx, stop).await;
    core.disconnect(id);
    tracing::info!(conn = id, %peer, %reason, "connection closed");
}

async fn drive(
    id: ConnId,
    mut stream: TcpStream,
    core: &Core,
    config: &ServeConfig,
    mut rx: mpsc::UnboundedReceiver<Out>,
    mut stop: watch::Receiver<bool>,
) -> String {
    let limits = config.limits();
    let opened = tokio::time::Instant::now();
    let mut buf = BytesMut::with_capacity(INITIAL_BUFFER);
    let mut need = 1usize;
    let mut spoke = false;
    let mut frame_started: Option<tokio::time::Instant> = None;
    let mut out = Vec::new();
    loop {
        let deadline = if !spoke {
            Some((
                opened + config.handshake_timeout,
                format!(
                    "no request within the handshake timeout ({:?})",
                    config.handshake_timeout
                ),
            ))
        } else {
            frame_started.map(|t| {
                let why = format!(
                    "request stalled half way for the frame timeout ({:?}, {} bytes buffered)",
                    config.frame_timeout,
                    buf.len()
                );
                (t + config.frame_timeout, why)
            })
        };
        let (mut rd, mut wr) = stream.split();
        tokio::select! {
            biased;
            _ = stop.changed() => return "server shutting down".into(),
            msg = rx.recv() => {
                let Some(first) = msg else { return "closed by server".into() };
                out.clear();
                let mut close = collect(first, &mut out);
                while close.is_none() {
                    match rx.try_recv() {
                        Ok(m) => close = collect(m, &mut out),
                        Err(_) => break,
                    }
                }
                if let Err(e) = wr.write_all(&out).await {
                    return format!("write failed: {e}");
                }
                if let Some(reason) = close {
                    let _ = wr.shutdown().await;
                    return reason;
                }
            }
            read = read_until(&mut rd, &mut buf, need, deadline) => {
                match read {
                    Ok(0) if buf.is_empty() => return "peer closed".into(),
                    Ok(0) => return format!("peer closed mid-request ({} bytes buffered)", buf.len()),
                    Ok(_) => {}
                    Err(reason) => return reason,
                }
                let mut requests = Vec::new();
                let mut bad = None;
                loop {
                    match decode(&buf, &limits) {
                        Ok(Decoded::Complete(r, used)) => {
                            buf.advance(used);
                            requests.push(r);
                        }
                        Ok(Decoded::Incomplete { need: n }) => {
                            need = n;
                            break;
                        }
                        Err(e) => {
                            bad = Some(e);
                            break;
                        }
                    }
                }
                if !requests.is_empty() {
                    spoke = true;
                    frame_started = None;
                    core.handle(id, requests);
                }
                if let Some(e) = bad {
                    flush_pending(&mut rx, &mut stream).await;
                    return format!("bad request: {e}");
                }
                if buf.is_empty() {
                    need = 1;
                    if buf.capacity() > KEEP_BUFFER {
                        buf = BytesMut::with_capacity(INITIAL_BUFFER);
                    }
                } else if frame_started.is_none() {
                    frame_started = Some(tokio::time::Instant::now());
                }
            }
        }
    }
}

/// Appends an outbox item to `out`; returns the close reason if it is one.
fn collect(item: Out, out: &mut Vec<u8>) -> Option<String> {
    match item {
        Out::Bytes(b) => {
            if out.is_empty() {
                *out = b;
            } else {
                out.extend_from_slice(&b);
            }
            None
        }
        Out::Close(reason) => Some(reason),
    }
}

/// Before closing on a bad request, send the replies already owed for the good ones.
async fn flush_pending(rx: &mut mpsc::UnboundedReceiver<Out>, stream: &mut TcpStream) {
    let mut out = Vec::new();
    while let Ok(Out::Bytes(b)) = rx.try_recv() {
        out.extend_from_slice(&b);
    }
    let _ = stream.write_all(&out).await;
}

/// One read into `buf`, making room for at least the bytes the decoder asked for.
async fn read_until(
    rd: &mut tokio::net::tcp::ReadHalf<'_>,
    buf: &mut BytesMut,
    need: usize,
    deadline: Option<(tokio::time::Instant, String)>,
) -> Result<usize, String> {
    let want = need.saturating_sub(buf.len()).max(INITIAL_BUFFER);
    if buf.capacity() - buf.len() < want {
        buf.reserve(want);
    }
    let read = rd.read_buf(buf);
    let result = match deadline {
        Some((at, why)) => match tokio::time::timeout_at(at, read).await {
            Ok(r) => r,
            Err(_) => return Err(why),
        },
        None => read.await,
    };
    result.map_err(|e| format!("read failed: {e}"))
}
