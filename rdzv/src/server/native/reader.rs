//! A native connection's reader: one task per member connection (or per rank's stream on a
//! node agent's connection) reads and decodes what the member sends and feeds the machine,
//! under the admission deadline (until the machine accepted a request), the frame deadline
//! (while a frame is partly read), the pace and the partial-frame budget. A join for a job
//! another server owns is not fed: the member is sent there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dt_rdzv_proto::native::{
    ClientMsg, FrameReader, ServerMsg,
    codec::{MAX_CLIENT_PAYLOAD, MAX_UNADMITTED_PAYLOAD},
    decode_client,
};
use dt_rdzv_proto::rendezvous::{ConnId, Input};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::claims::{Claims, Verdict};
use super::outbox::{NativeOut, Outbox};
use super::pace::Pace;
use super::partial;
use super::rendezvous::RdzvCore;
use super::writer::WriterEnd;
use crate::server::config::ServeConfig;
use crate::server::ratelog::limited;

/// One member's connection (or one rank's stream on its node agent's) as read: its stream's
/// receiving side. One task per connection
/// (thousands of members) reads and decodes what the member sends, feeding the machine; a
/// [`Writer`] task writes what the machine routes to it.
pub(super) struct Conn {
    pub(super) id: ConnId,
    pub(super) recv: quinn::RecvStream,
    /// The connection's own outbox, for what the reader must say itself (a redirect).
    pub(super) own: Outbox,
    /// Whether the machine accepted a request (it sent anything but a refusal).
    pub(super) admitted: Arc<AtomicBool>,
    /// Who owns which job, when jobs are shared with other servers (`--backend`).
    pub(super) owners: Option<Arc<dyn Claims>>,
    /// This connection's share of the server-wide budget for partly received frames.
    pub(super) partial: partial::Charge,
    /// How fast its messages are read.
    pub(super) pace: Pace,
    /// For a connection's first stream: what to start if the machine accepts it as a node
    /// agent's hello (its ranks' streams are served from then on).
    pub(super) on_node: Option<OnNode>,
}

/// Told (by the writer) the agent's rank limit when the machine accepts a node agent's hello,
/// and what to start then. Nothing runs for the other connections.
pub(super) struct OnNode {
    /// The writer's word; dropped unsent when the connection is not an agent's.
    pub(super) accepted: oneshot::Receiver<u32>,
    /// Starts serving the ranks' streams, given the rank limit.
    pub(super) start: Box<dyn FnOnce(u32) + Send>,
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
    pub(super) async fn run(
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
        let (mut accepted, mut start) = match self.on_node.take() {
            Some(n) => (n.accepted, Some(n.start)),
            None => (oneshot::channel().1, None),
        };
        loop {
            let deadline = self.deadline(arrived, frame_started, &reader, config);
            let (at, why) = deadline.clone().unzip();
            tokio::select! {
                _ = stop.changed() => return Ok("server shutting down".into()),
                got = &mut accepted, if start.is_some() => {
                    if let (Ok(max), Some(start)) = (got, start.take()) {
                        start(max);
                    }
                }
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
    owners: Option<&dyn Claims>,
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
                    match o.claim_job(&j.job).await {
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
