//! One task per client connection.
//!
//! Reads into a buffer, decodes complete requests, hands them to the engine in batches, and
//! writes whatever lands in the connection's outbox. It keeps reading while a WAIT is parked,
//! because CANCEL_WAIT arrives on the same connection.
//!
//! Bounds: while the replies queued for this connection exceed
//! [`ServeConfig::max_queued_reply_bytes`], no further request is handled and nothing more is
//! read (TCP flow control then stops the client); both resume as the client reads its
//! replies. So one connection holds at most that bound plus one request's reply, plus one
//! frame of input. Across connections, the replies' own bytes are charged to the door's memory
//! budget ([`DoorMemory`]), and the partial frames to half of it, apart (so that frames held by
//! strangers never get a client's writes refused): a frame that would need more than that half
//! leaves closes its connection, naming the budget. The decoder keeps its place in a partial
//! frame, and is not called again until the bytes it asked for are buffered.
//!
//! Deadlines: the first request must arrive within the handshake timeout, a request that has
//! started must finish within the frame timeout, and a reply write that makes
//! no progress for the frame timeout closes the connection; a connection that is merely quiet
//! between requests is left alone.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Buf, Bytes, BytesMut};
use dt_rdzv_proto::tcpstore::{ConnId, DecodeError, Decoded, Decoder, Limits, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

use super::core::{DoorMemory, Out, Outbox, StoreCore};
use crate::server::config::ServeConfig;

/// Read buffers start small (thousands of mostly idle connections) and grow to the frame size.
const INITIAL_BUFFER: usize = 512;
/// An idle buffer larger than this is given back after a big request.
const KEEP_BUFFER: usize = 64 * 1024;
/// Most requests decoded ahead of the engine (bounds the decoded backlog of a paused
/// connection; also the batch handed to the engine under one lock).
const BATCH: usize = 256;
/// Reply chunks shorter than this are copied together into one write; longer ones (shared
/// stored values) are written from where they are.
const COALESCE: usize = 64 * 1024;

pub(crate) async fn serve(
    id: ConnId,
    stream: TcpStream,
    peer: SocketAddr,
    core: Arc<StoreCore>,
    config: Arc<ServeConfig>,
    stop: watch::Receiver<bool>,
) {
    tracing::info!(conn = id, %peer, "connection opened");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    core.register(
        id,
        Outbox {
            tx,
            queued: queued.clone(),
        },
    );
    let memory = core.memory().clone();
    let mut input = Input {
        buf: BytesMut::with_capacity(INITIAL_BUFFER),
        need: 1,
        backlog: VecDeque::new(),
        bad: None,
        spoke: false,
        frame_started: None,
        decoder: Decoder::default(),
        charged: 0,
    };
    input.recharge(&memory);
    let reason = drive(
        id, stream, &core, &config, &mut rx, &queued, &mut input, stop,
    )
    .await;
    core.disconnect(id);
    // What is still queued for it, and its partial frame, are no longer held.
    rx.close();
    while let Ok(item) = rx.try_recv() {
        if let Out::Bytes(_, owned) = item {
            memory.sub(owned as u64);
        }
    }
    memory.sub_frames(input.charged);
    tracing::info!(conn = id, %peer, %reason, "connection closed");
}

/// The connection's input side: bytes read, requests decoded and not yet handled.
struct Input {
    buf: BytesMut,
    need: usize,
    backlog: VecDeque<Request>,
    bad: Option<DecodeError>,
    spoke: bool,
    frame_started: Option<tokio::time::Instant>,
    /// Where the request under way stands.
    decoder: Decoder,
    /// Bytes of the buffer and the decoder charged to the door's memory.
    charged: u64,
}

impl Input {
    /// Charges the door's memory for the partial frame this input holds now (its bytes
    /// buffered and what the decoder copied out of them).
    fn recharge(&mut self, memory: &DoorMemory) {
        let now = (self.buf.len() + self.decoder.held_bytes()) as u64;
        if now > self.charged {
            memory.add_frames(now - self.charged);
        } else {
            memory.sub_frames(self.charged - now);
        }
        self.charged = now;
    }

    /// Makes room to read the bytes the decoder asked for, if the door's memory budget has
    /// it; else the reason to close.
    fn make_room(&mut self, memory: &DoorMemory) -> Result<(), String> {
        let want = self.need.saturating_sub(self.buf.len()).max(INITIAL_BUFFER);
        let spare = self.buf.capacity() - self.buf.len();
        if spare >= want {
            return Ok(());
        }
        let grow = want as u64;
        if want > KEEP_BUFFER
            && let Err(why) = memory.room_for_frame(grow)
        {
            return Err(format!(
                "a partial frame of {} bytes needs {want} more; {why}",
                self.buf.len(),
            ));
        }
        self.buf.reserve(want);
        Ok(())
    }

    /// Hands decoded requests to the engine while the queued replies stay under `bound`.
    fn pump(
        &mut self,
        id: ConnId,
        core: &StoreCore,
        limits: &Limits,
        bound: usize,
        queued: &AtomicUsize,
    ) {
        loop {
            if queued.load(Ordering::Relaxed) > bound {
                return;
            }
            if self.backlog.is_empty() {
                self.decode(limits);
                if self.backlog.is_empty() {
                    return;
                }
            }
            core.handle(id, &mut self.backlog, bound);
        }
    }

    /// Decodes up to [`BATCH`] requests from the buffer into the backlog.
    fn decode(&mut self, limits: &Limits) {
        while self.bad.is_none() && self.backlog.len() < BATCH {
            if self.buf.len() < self.need {
                if self.buf.is_empty() && self.buf.capacity() > KEEP_BUFFER {
                    self.buf = BytesMut::with_capacity(INITIAL_BUFFER);
                }
                return;
            }
            match self.decoder.decode(&self.buf, limits) {
                Ok(Decoded::Complete(r, used)) => {
                    self.buf.advance(used);
                    self.need = 1;
                    self.backlog.push_back(r);
                    self.spoke = true;
                    self.frame_started = None;
                }
                Ok(Decoded::Incomplete { need }) => {
                    self.need = need;
                    if self.buf.is_empty() {
                        self.need = 1;
                        if self.buf.capacity() > KEEP_BUFFER {
                            self.buf = BytesMut::with_capacity(INITIAL_BUFFER);
                        }
                    } else if self.frame_started.is_none() {
                        self.frame_started = Some(tokio::time::Instant::now());
                    }
                    return;
                }
                Err(e) => self.bad = Some(e),
            }
        }
    }

    /// Whether the engine is waiting on the client (nothing decoded is left to handle).
    fn wants_bytes(&self) -> bool {
        self.backlog.is_empty() && self.bad.is_none()
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    id: ConnId,
    mut stream: TcpStream,
    core: &StoreCore,
    config: &ServeConfig,
    rx: &mut mpsc::UnboundedReceiver<Out>,
    queued: &AtomicUsize,
    input: &mut Input,
    mut stop: watch::Receiver<bool>,
) -> String {
    let limits = config.limits();
    let bound = usize::try_from(config.max_queued_reply_bytes).unwrap_or(usize::MAX);
    let opened = tokio::time::Instant::now();
    let memory = core.memory();
    let mut chunks = Vec::new();
    loop {
        input.pump(id, core, &limits, bound, queued);
        input.recharge(memory);
        if let Some(e) = &input.bad
            && input.backlog.is_empty()
        {
            flush_pending(rx, &mut stream, config.frame_timeout, memory).await;
            return format!("bad request: {e}");
        }
        let reading = input.wants_bytes() && queued.load(Ordering::Relaxed) <= bound;
        if reading && let Err(reason) = input.make_room(memory) {
            flush_pending(rx, &mut stream, config.frame_timeout, memory).await;
            return reason;
        }
        let deadline = if !input.spoke {
            Some((
                opened + config.handshake_timeout,
                format!(
                    "no request within the handshake timeout ({:?})",
                    config.handshake_timeout
                ),
            ))
        } else {
            input.frame_started.map(|t| {
                let why = format!(
                    "request stalled half way for the frame timeout ({:?}, {} bytes buffered)",
                    config.frame_timeout,
                    input.buf.len()
                );
                (t + config.frame_timeout, why)
            })
        };
        let (mut rd, mut wr) = stream.split();
        tokio::select! {
            biased;
            _ = stop.changed() => return "server shutting down, or its slot given to another host".into(),
            msg = rx.recv() => {
                let Some(first) = msg else { return "closed by server".into() };
                chunks.clear();
                let mut owned = 0;
                let mut close = collect(first, &mut chunks, &mut owned);
                while close.is_none() {
                    match rx.try_recv() {
                        Ok(m) => close = collect(m, &mut chunks, &mut owned),
                        Err(_) => break,
                    }
                }
                let written = write_chunks(&mut wr, &chunks, config.frame_timeout).await;
                queued.fetch_sub(chunks.iter().map(Bytes::len).sum(), Ordering::Relaxed);
                memory.sub(owned as u64);
                chunks.clear();
                if let Err(e) = written {
                    return e;
                }
                // A client reading its replies is making progress: a request left half read
                // while its connection was paused gets a fresh frame deadline.
                if input.frame_started.is_some() {
                    input.frame_started = Some(tokio::time::Instant::now());
                }
                if let Some(reason) = close {
                    let _ = wr.shutdown().await;
                    return reason;
                }
            }
            read = read_until(&mut rd, &mut input.buf, input.need, deadline), if reading => {
                input.recharge(memory);
                match read {
                    Ok(0) if input.buf.is_empty() => return "peer closed".into(),
                    Ok(0) => {
                        return format!(
                            "peer closed mid-request ({} bytes buffered)",
                            input.buf.len()
                        );
                    }
                    Ok(_) => {}
                    Err(reason) => return reason,
                }
            }
        }
    }
}

/// Appends an outbox item's chunks to `out` (adding their own bytes to `owned`); returns the
/// close reason if it is one.
fn collect(item: Out, out: &mut Vec<Bytes>, owned: &mut usize) -> Option<String> {
    match item {
        Out::Bytes(b, n) => {
            out.extend(b);
            *owned += n;
            None
        }
        Out::Close(reason) => Some(reason),
    }
}

/// Writes `chunks` in order: short ones copied together, long ones as they are. Each write
/// must make progress within `timeout` (a client that stops reading is closed).
async fn write_chunks<W: AsyncWriteExt + Unpin>(
    wr: &mut W,
    chunks: &[Bytes],
    timeout: std::time::Duration,
) -> Result<(), String> {
    let mut small = Vec::new();
    for c in chunks {
        if c.len() < COALESCE {
            small.extend_from_slice(c);
            if small.len() < COALESCE {
                continue;
            }
        } else if !small.is_empty() {
            write_within(wr, &small, timeout).await?;
            small.clear();
            write_within(wr, c, timeout).await?;
            continue;
        } else {
            write_within(wr, c, timeout).await?;
            continue;
        }
        write_within(wr, &small, timeout).await?;
        small.clear();
    }
    if !small.is_empty() {
        write_within(wr, &small, timeout).await?;
    }
    Ok(())
}

async fn write_within<W: AsyncWriteExt + Unpin>(
    wr: &mut W,
    mut bytes: &[u8],
    timeout: std::time::Duration,
) -> Result<(), String> {
    while !bytes.is_empty() {
        match tokio::time::timeout(timeout, wr.write(bytes)).await {
            Err(_) => {
                return Err(format!(
                    "client read no reply bytes for the frame timeout ({timeout:?}, {} bytes unsent)",
                    bytes.len()
                ));
            }
            Ok(Err(e)) => return Err(format!("write failed: {e}")),
            Ok(Ok(0)) => return Err("write failed: peer closed".into()),
            Ok(Ok(n)) => bytes = &bytes[n..],
        }
    }
    Ok(())
}

/// Before closing on a bad request, send the replies already owed for the good ones.
async fn flush_pending(
    rx: &mut mpsc::UnboundedReceiver<Out>,
    stream: &mut TcpStream,
    timeout: std::time::Duration,
    memory: &DoorMemory,
) {
    let mut chunks = Vec::new();
    let mut owned = 0;
    while let Ok(Out::Bytes(b, n)) = rx.try_recv() {
        chunks.extend(b);
        owned += n;
    }
    let _ = write_chunks(stream, &chunks, timeout).await;
    memory.sub(owned as u64);
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
        // `Input::make_room` has made this room after checking the budget; kept so that the
        // read below always has room for what the decoder asked for.
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
