//! The QUIC port: one connection per member, one bidirectional stream on it. Each connection
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dt_rdzv_proto::native::{
    CLOSE_GOING_AWAY, CLOSE_NO_STREAM, CLOSE_NORMAL, ClientMsg, FrameReader, ServerMsg,
    codec::{MAX_CLIENT_PAYLOAD, MAX_UNADMITTED_PAYLOAD},
    decode_client,
};
use dt_rdzv_proto::rendezvous::{ConnId, Input};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::outbox::{self, NativeOut, Outbox};
use super::pace::Pace;
use super::partial::{self, PartialBudget};
use super::rendezvous::RdzvCore;
use super::sources::{Slot, Sources};
use super::writer::{Writer, WriterEnd};
use crate::native::udp;
use crate::server::config::ServeConfig;
use crate::server::ha::owner::{Owners, Verdict};
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
    owners: Option<Arc<Owners>>,
    config: Arc<ServeConfig>,
    mut stop: watch::Receiver<bool>,
) {
    // Native connection ids count down from the top, away from the store's.
    let mut next_id: ConnId = u64::MAX;
    let budget = PartialBudget::new(config.max_partial_frame_bytes);
    let sources = Sources::default();
    let per_source = config.native_connections_per_source();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                if core.open_connections() >= config.max_native_connections {
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
                next_id -= 1;
                let charges = Charges { budget: budget.clone(), _slot: slot };
                tokio::spawn(serve(next_id, incoming, core.clone(), owners.clone(),
                    config.clone(), stop.clone(), charges));
            }
        }
    }
    endpoint.close(CLOSE_GOING_AWAY.into(), b"server shutting down");
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
}

/// What one connection is charged to while it lives: the server-wide budget of partly
/// received frames, and its place in its source address's share of the door.
struct Charges {
    budget: Arc<PartialBudget>,
    _slot: Slot,
}

async fn serve(
    id: ConnId,
    incoming: quinn::Incoming,
    core: Arc<RdzvCore>,
    owners: Option<Arc<Owners>>,
    config: Arc<ServeConfig>,
    stop: watch::Receiver<bool>,
    charges: Charges,
) {
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
    let (tx, rx) = outbox::outbox();
    core.connect(id, peer.ip().to_canonical().to_string(), tx.clone());
    let shutting_down = stop.clone();
    let admitted = Arc::new(AtomicBool::new(false));
    let mut writer = tokio::spawn(
        Writer {
            send,
            outbox: rx,
            conn: conn.clone(),
            admitted: admitted.clone(),
        }
        .run(),
    );
    let mut c = Conn {
        id,
        recv,
        own: tx,
        admitted,
        owners,
        partial: partial::Charge::new(charges.budget),
        pace: Pace::new(std::time::Instant::now()),
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

/// One member's connection as read: its stream's receiving side. One task per connection
/// (thousands of members) reads and decodes what the member sends, feeding the machine; a
/// [`Writer`] task writes what the machine routes to it.
struct Conn {
    id: ConnId,
    recv: quinn::RecvStream,
    /// The connection's own outbox, for what the reader must say itself (a redirect).
    own: Outbox,
    /// Whether the machine accepted a request (it sent anything but a refusal).
    admitted: Arc<AtomicBool>,
    /// Who owns which job, when jobs are shared with other servers (`--backend`).
    owners: Option<Arc<Owners>>,
    /// This connection's share of the server-wide budget for partly received frames.
    partial: partial::Charge,
    /// How fast its messages are read.
    pace: Pace,
}

/// How reading a connection's frames ended it.
enum Ending {
    /// The connection ends for this reason (bad input, the member finished).
    Closed(String),
    /// Its job is owned by another server: say where, then close.
    Redirect(ServerMsg),
    /// Nobody can say who owns its job now (the backend does not answer): close as a server
    /// going away, so that the member tries again.
    Away(String),
}

impl Conn {
    fn admitted(&self) -> bool {
        self.admitted.load(Ordering::Acquire)
    }

    /// Serves the connection until it ends; returns why (`Err` when a deadline ended it).
    async fn run(
        &mut self,
        core: &RdzvCore,
        mut stop: watch::Receiver<bool>,
        arrived: tokio::time::Instant,
        config: &ServeConfig,
        writer: &mut JoinHandle<WriterEnd>,
    ) -> Result<String, String> {
        // Before the machine accepted a request, frames are small (a join, a status or stop
        // request): a stranger cannot make the server hold megabytes of a frame.
        let mut reader = FrameReader::new(MAX_UNADMITTED_PAYLOAD);
        let mut frame_started: Option<tokio::time::Instant> = None;
        let mut writing = true;
        loop {
            let deadline = self.deadline(arrived, frame_started, &reader, config);
            let (at, why) = deadline.clone().unzip();
            tokio::select! {
                _ = stop.changed() => return Ok("server shutting down".into()),
                _ = sleep_until(at) => {
                    // Admitted meanwhile: the admission deadline no longer applies.
                    if self.deadline(arrived, frame_started, &reader, config).map(|d| d.0) == at {
                        return Err(why.unwrap_or_default());
                    }
                }
                ended = &mut *writer, if writing => match ended {
                    Ok(WriterEnd::Closed(why)) => return Ok(why),
                    Ok(WriterEnd::OutboxGone) => writing = false,
                    Err(e) => return Ok(format!("writer failed: {e}")),
                },
                // Chunks as quinn holds them.
                chunk = self.recv.read_chunk(usize::MAX, true) => match chunk {
                    Ok(Some(chunk)) => {
                        reader.push(&chunk.bytes);
                        // The member sends its next frame once the answer to its join arrived,
                        // and the writer marks the connection admitted before writing it.
                        if self.admitted() {
                            reader.set_max_payload(MAX_CLIENT_PAYLOAD);
                        }
                        if let Some(end) = feed(self.id, &mut reader, core, self.owners.as_deref(), &mut self.pace).await {
                            return Ok(self.finish(end, writer).await);
                        }
                        if let Err(why) = self.partial.set(reader.buffered()) {
                            return Ok(why);
                        }
                        if reader.buffered() == 0 {
                            frame_started = None;
                        } else if frame_started.is_none() {
                            frame_started = Some(tokio::time::Instant::now());
                        }
                    }
                    Ok(None) => return Ok("client finished its stream".into()),
                    Err(e) => return Ok(e.to_string()),
                },
            }
        }
    }

    /// The nearer of the admission deadline (until the machine accepted a request) and the
    /// frame deadline (while a frame is partly read), with what to say when it passes.
    fn deadline(
        &self,
        arrived: tokio::time::Instant,
        frame_started: Option<tokio::time::Instant>,
        reader: &FrameReader,
        config: &ServeConfig,
    ) -> Option<(tokio::time::Instant, String)> {
        let admit = (!self.admitted()).then(|| {
            (
                arrived + config.handshake_timeout,
                format!(
                    "no accepted Join, status or stop request within the handshake timeout \
                     ({:?}, {} bytes of a frame buffered)",
                    config.handshake_timeout,
                    reader.buffered()
                ),
            )
        });
        let frame = frame_started.map(|t| {
            (
                t + config.frame_timeout,
                format!(
                    "frame incomplete for the frame timeout ({:?}, {} bytes buffered)",
                    config.frame_timeout,
                    reader.buffered()
                ),
            )
        });
        match (admit, frame) {
            (Some(a), Some(f)) => Some(if a.0 <= f.0 { a } else { f }),
            (a, f) => a.or(f),
        }
    }

    /// Ends the connection as `end` says (through the writer); returns why.
    async fn finish(&mut self, end: Ending, writer: &mut JoinHandle<WriterEnd>) -> String {
        let why = match end {
            Ending::Closed(why) => return why,
            Ending::Redirect(msg) => {
                let why = match &msg {
                    ServerMsg::Redirect { why, .. } => why.clone(),
                    _ => "redirected".into(),
                };
                let _ = self.own.send(NativeOut::Msg(Box::new(msg)));
                let _ = self.own.send(NativeOut::Close(why.clone()));
                why
            }
            Ending::Away(why) => {
                let _ = self.own.send(NativeOut::GoAway(why.clone()));
                why
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(3), writer).await;
        why
    }
}

/// Sleeps until `at`, or forever.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Decodes the complete frames in `reader` and feeds them to the machine; on bad input, tells
/// the machine and returns why the connection ends. With `owners`, a join for a job another
/// server owns is not fed: the member is sent there.
async fn feed(
    id: ConnId,
    reader: &mut FrameReader,
    core: &RdzvCore,
    owners: Option<&Owners>,
    pace: &mut Pace,
) -> Option<Ending> {
    loop {
        let payload = match reader.next_payload() {
            Ok(Some(p)) => p,
            Ok(None) => return None,
            Err(error) => {
                let why = error.to_string();
                core.input(Input::Malformed { conn: id, error });
                return Some(Ending::Closed(format!("bad frame: {why}")));
            }
        };
        // Past its burst, a flood of messages is read at the pace (`pace.rs`).
        if let Some(wait) = pace.take(std::time::Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        match decode_client(&payload) {
            Ok(msg) => {
                if let (Some(o), ClientMsg::Join(j)) = (owners, &msg) {
                    match o.claim(&j.job).await {
                        Verdict::Mine => {}
                        Verdict::Elsewhere {
                            endpoint, server, ..
                        } => {
                            tracing::info!(conn = id, job = ?j.job, member = ?j.member,
                                %server, %endpoint, "member sent to the job's owner");
                            return Some(Ending::Redirect(ServerMsg::Redirect {
                                why: format!(
                                    "job {:?} is owned by server {server} at {endpoint}",
                                    j.job
                                ),
                                job: j.job.clone(),
                                endpoint,
                            }));
                        }
                        Verdict::Unknown(why) => {
                            limited!(warn, "join deferred: cannot tell who owns the job",
                                conn = id, job = ?j.job, %why);
                            return Some(Ending::Away(format!(
                                "cannot tell who owns job {:?} now ({why}); try again",
                                j.job
                            )));
                        }
                    }
                }
                core.input(Input::Message { conn: id, msg });
            }
            Err(error) => {
                let why = error.to_string();
                core.input(Input::Malformed { conn: id, error });
                return Some(Ending::Closed(format!("bad message: {why}")));
            }
        }
    }
}
