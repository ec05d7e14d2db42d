//! One client connection's task: it writes what the client sends, reads what the server
//! pushes, sends heartbeats at the rate the server asked for, and, for a member whose
//! connection is lost without the server meaning it (a restart: close code
//! [`CLOSE_GOING_AWAY`]; or a network failure: an idle timeout), reconnects and joins again
//! asking for the place it held ([`Resume`]), within the client's reconnect window.
//!
//! One task per connection rather than a reader, a writer and a heartbeat task: a launcher or
//! a benchmark herd holds thousands of these. Opening a connection (which server of the
//! endpoint list, in which order) is `dial`'s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dt_rdzv_proto::native::{
    CLOSE_GOING_AWAY, ClientMsg, FrameReader, Join, RefusalCode, Resume, ServerMsg, decode_server,
    encode_client,
};
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval};

use super::config::ClientConfig;
use super::dial::{PER_SERVER, open, open_redirect};
use super::error::NativeError;
use super::watch::{RoundEnd, Watchers};

/// Largest server message a client accepts.
const MAX_SERVER_FRAME: u32 = 64 << 20;

/// What the client handle and its session task share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The current connection (replaced when the session reconnects).
    pub(crate) conn: Mutex<quinn::Connection>,
    /// No heartbeats (tests of the server's liveness detection).
    pub(crate) silent: AtomicBool,
    /// Who hears of the end of a round (see `watch`).
    pub(crate) watchers: Arc<Watchers>,
}

impl Shared {
    pub(crate) fn conn(&self) -> quinn::Connection {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// How a connection ended.
enum End {
    /// The client handle closed its side: finish and stop.
    Done,
    /// The connection is gone; `retry` when the server did not mean it.
    Lost { why: String, retry: bool },
}

/// A connection's task (see the module docs).
pub(crate) struct Session {
    pub(crate) endpoint: quinn::Endpoint,
    pub(crate) cfg: ClientConfig,
    pub(crate) shared: Arc<Shared>,
    pub(crate) out: mpsc::UnboundedReceiver<ClientMsg>,
    pub(crate) events: mpsc::UnboundedSender<Result<ServerMsg, NativeError>>,
    /// The join this member sent (to send again after reconnecting).
    pub(crate) join: Option<Join>,
    /// Its place in the last round it was welcomed into.
    pub(crate) resume: Option<Resume>,
    /// The heartbeat interval the server asked for (none before a join).
    pub(crate) every: Option<Duration>,
    /// It left or finished: a lost connection is no surprise.
    pub(crate) leaving: bool,
    /// Reconnected and waiting for the server's answer to the join sent again.
    pub(crate) rejoining: bool,
    /// Until when reconnecting may go on (set by the first loss, cleared by a `Joined`).
    pub(crate) reconnect_until: Option<Instant>,
    /// Pause before the next reconnection after a refused rejoin (doubles up to 1 s).
    pub(crate) pause: Duration,
    /// Answers to send (to the server's probes), written after the messages that asked.
    pub(crate) replies: Vec<ClientMsg>,
    /// Which server of the endpoint list to try first when reconnecting (the one in use, or
    /// the next after one that went silent).
    pub(crate) server: usize,
    /// Where the last server sent this member (`Redirect`: its job's owner), tried first by
    /// the next reconnection.
    pub(crate) redirect: Option<String>,
    /// When this member last sent anything (a heartbeat, a message).
    pub(crate) last_sent: Instant,
    /// Its round's heartbeat timeout (from the welcome).
    pub(crate) heartbeat_timeout: Option<Duration>,
}

/// Longest a reconnection attempt waits for a handshake: a server that is still down is
/// tried again rather than waited for.
const ATTEMPT: Duration = Duration::from_secs(2);
/// First pause after a refused rejoin.
const FIRST_PAUSE: Duration = Duration::from_millis(50);

fn ticker(every: Duration) -> Interval {
    // The first tick one interval from now: a join, or the welcome that changed the rate,
    // counts as a message.
    let mut t = tokio::time::interval_at(Instant::now() + every, every);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t
}

/// Whether a connection error is one the server did not mean for this member: it went away
/// (a restart), or the path failed (idle timeout, reset).
fn unintended(e: &quinn::ConnectionError) -> bool {
    use quinn::ConnectionError as E;
    match e {
        E::ApplicationClosed(c) => c.error_code == CLOSE_GOING_AWAY.into(),
        E::TimedOut | E::Reset => true,
        _ => false,
    }
}

impl Session {
    /// Runs until the client closes, or the connection is lost for good (told as an error
    /// event).
    pub(crate) async fn run(mut self, mut send: quinn::SendStream, mut recv: quinn::RecvStream) {
        loop {
            match self.serve(&mut send, &mut recv).await {
                End::Done => {
                    // Until the server has read everything (or closed): closing the connection
                    // at once would drop a last `Leave` or `Finish` still in quinn's buffers.
                    let _ = send.finish();
                    let _ = tokio::time::timeout(Duration::from_secs(2), send.stopped()).await;
                    return;
                }
                End::Lost { why, retry } => {
                    if let Some(end) = self.silenced() {
                        // Not the server's loss but this member's silence: it was removed.
                        self.shared.watchers.end_all(end.clone());
                        let _ = self.events.send(Err(NativeError::Lost(format!(
                            "{} (the connection: {why})",
                            end.why
                        ))));
                        return;
                    }
                    let window = self.cfg.reconnect.filter(|_| {
                        retry && self.join.is_some() && !self.leaving && self.events_wanted()
                    });
                    let Some(window) = window else {
                        if !retry && !self.leaving {
                            // The server closed this member's connection on purpose: it was
                            // declared lost (or its job was forgotten).
                            self.shared.watchers.end_all(RoundEnd {
                                round: self.resume.map_or(u64::MAX, |r| r.round),
                                lost: None,
                                why: format!("dt-rdzv closed this member's connection: {why}"),
                                removed: true,
                            });
                        }
                        let _ = self.events.send(Err(NativeError::Lost(why)));
                        return;
                    };
                    let until = *self
                        .reconnect_until
                        .get_or_insert_with(|| Instant::now() + window);
                    match self.reconnect(&why, until).await {
                        Some((s, r)) => (send, recv) = (s, r),
                        None => return,
                    }
                }
            }
        }
    }

    /// When this member, in a round, has sent nothing for longer than the round's heartbeat
    /// timeout (its process was stopped or starved: a lost connection is then its own silence,
    /// not the server's), the server has declared it lost: it must not rejoin as if the server
    /// had gone away.
    fn silenced(&self) -> Option<RoundEnd> {
        let (r, timeout) = (self.resume?, self.heartbeat_timeout?);
        let silent = self.last_sent.elapsed();
        (silent > timeout && !self.leaving).then(|| RoundEnd {
            round: r.round,
            lost: None,
            why: format!(
                "this member sent nothing for {:.1} s (its process was stopped or starved), past \
                 the heartbeat timeout of {:.1} s: dt-rdzv has removed it from round {}",
                silent.as_secs_f64(),
                timeout.as_secs_f64(),
                r.round
            ),
            removed: true,
        })
    }

    fn events_wanted(&self) -> bool {
        !self.events.is_closed()
    }

    /// Serves one connection until it ends.
    async fn serve(&mut self, send: &mut quinn::SendStream, recv: &mut quinn::RecvStream) -> End {
        let mut reader = FrameReader::new(MAX_SERVER_FRAME);
        let mut tick = self.every.map(ticker);
        let mut seq = 0u64;
        loop {
            let before = self.every;
            tokio::select! {
                msg = self.out.recv() => {
                    let Some(msg) = msg else { return End::Done };
                    match &msg {
                        ClientMsg::Join(j) => self.join = Some(j.clone()),
                        ClientMsg::Leave | ClientMsg::Finish => self.leaving = true,
                        _ => {}
                    }
                    if send.write_all(&encode_client(&msg)).await.is_err() {
                        // The read side says why.
                        continue;
                    }
                    self.last_sent = Instant::now();
                }
                chunk = recv.read_chunk(usize::MAX, true) => match chunk {
                    Ok(Some(chunk)) => {
                        reader.push(&chunk.bytes);
                        let end = self.deliver(&mut reader);
                        for msg in std::mem::take(&mut self.replies) {
                            let _ = send.write_all(&encode_client(&msg)).await;
                        }
                        if let Some(end) = end {
                            return end;
                        }
                    }
                    Ok(None) => {
                        return End::Lost { why: "server closed the stream".into(), retry: false };
                    }
                    Err(quinn::ReadError::ConnectionLost(e)) => {
                        let retry = unintended(&e) || self.rejoining;
                        // A server that went silent (killed, its host lost) is not tried first
                        // again when the endpoint list has another.
                        if matches!(e, quinn::ConnectionError::TimedOut) {
                            self.server += 1;
                        }
                        return End::Lost { why: e.to_string(), retry };
                    }
                    Err(e) => return End::Lost { why: e.to_string(), retry: false },
                },
                _ = async { tick.as_mut().expect("guarded").tick().await }, if tick.is_some() => {
                    if !self.shared.silent.load(Ordering::Relaxed) {
                        seq += 1;
                        let hb = encode_client(&ClientMsg::Heartbeat { seq });
                        if send.write_all(&hb).await.is_err() {
                            continue;
                        }
                        self.last_sent = Instant::now();
                    }
                }
            }
            if self.every != before {
                tick = self.every.map(ticker);
            }
        }
    }

    /// Hands every complete message to the client, noting what the session needs.
    fn deliver(&mut self, reader: &mut FrameReader) -> Option<End> {
        loop {
            let payload = match reader.next_payload() {
                Ok(Some(p)) => p,
                Ok(None) => return None,
                Err(e) => {
                    let _ = self.events.send(Err(e.into()));
                    return Some(End::Done);
                }
            };
            let msg = match decode_server(&payload) {
                Ok(m) => m,
                Err(e) => {
                    let _ = self.events.send(Err(e.into()));
                    return Some(End::Done);
                }
            };
            match &msg {
                ServerMsg::Probe { nonce } => {
                    // A peer reported this member gone: say otherwise at once. Not the
                    // application's business.
                    self.replies.push(ClientMsg::Alive { nonce: *nonce });
                    continue;
                }
                // Another server owns the job: join there (not the application's business
                // either; the join, and the resume if any, are sent again).
                ServerMsg::Redirect { endpoint, why, .. } => {
                    tracing::info!(from = %self.cfg.endpoint, to = %endpoint, %why,
                        "dt-rdzv sent this member to its job's owner");
                    self.redirect = Some(endpoint.clone());
                    return Some(End::Lost {
                        why: format!("redirected to {endpoint}: {why}"),
                        retry: true,
                    });
                }
                ServerMsg::Removed { job, round, why } => {
                    self.leaving = true;
                    self.shared.watchers.end_all(RoundEnd {
                        round: *round,
                        lost: None,
                        why: format!("dt-rdzv removed this member from job {job:?}: {why}"),
                        removed: true,
                    });
                }
                ServerMsg::RoundEnded { round, cause, .. } => {
                    self.shared
                        .watchers
                        .end_through(RoundEnd::from_cause(*round, cause));
                }
                ServerMsg::Joined {
                    heartbeat_interval_ms,
                    ..
                } => {
                    self.every = Some(Duration::from_millis((*heartbeat_interval_ms).max(10)));
                    if self.rejoining {
                        tracing::info!(endpoint = %self.cfg.endpoint, "rejoined after reconnecting");
                    }
                    self.rejoining = false;
                    self.reconnect_until = None;
                    self.pause = FIRST_PAUSE;
                }
                ServerMsg::Welcome(w) => {
                    if w.round > 1 {
                        self.shared.watchers.end_through(RoundEnd {
                            round: w.round - 1,
                            lost: None,
                            why: format!("superseded by round {} ({})", w.round, w.cause),
                            removed: false,
                        });
                    }
                    self.every = Some(Duration::from_millis(w.heartbeat_interval_ms.max(10)));
                    self.heartbeat_timeout = Some(Duration::from_millis(w.heartbeat_timeout_ms));
                    self.resume = Some(Resume {
                        round: w.round,
                        rank: w.rank,
                        world: w.world,
                        restarts: w.restarts,
                    });
                }
                // The server still holds this member's old connection (it has not noticed
                // the loss yet): try again until it lets go.
                ServerMsg::Refused {
                    code: RefusalCode::MemberTaken,
                    ..
                } if self.rejoining => continue,
                // Any other answer to a rejoin is final.
                ServerMsg::Refused { .. } => self.rejoining = false,
                ServerMsg::JobEnded { job, end } => {
                    self.rejoining = false;
                    self.shared.watchers.end_all(RoundEnd {
                        round: self.resume.map_or(u64::MAX, |r| r.round),
                        lost: None,
                        why: format!("job {job:?} ended: {end}"),
                        removed: true,
                    });
                }
                _ => {}
            }
            if self.events.send(Ok(msg)).is_err() {
                return Some(End::Done);
            }
        }
    }

    /// Reconnects with backoff until `until`, and sends the join again with this member's
    /// place. `None` (after telling the client) when it cannot.
    async fn reconnect(
        &mut self,
        why: &str,
        until: Instant,
    ) -> Option<(quinn::SendStream, quinn::RecvStream)> {
        if self.rejoining {
            // The last rejoin was refused (the server still held the old connection).
            tokio::time::sleep(self.pause).await;
            self.pause = (self.pause * 2).min(Duration::from_secs(1));
        }
        let mut backoff = FIRST_PAUSE;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            tracing::warn!(endpoint = %self.cfg.endpoint, %why, attempt,
                "connection to dt-rdzv lost; reconnecting to resume this member's round");
            let left = until.saturating_duration_since(Instant::now());
            let opened = match self.redirect.take() {
                Some(to) => {
                    match open_redirect(&self.endpoint, &self.cfg, &to, left.min(PER_SERVER)).await
                    {
                        Ok((c, s, r)) => Ok((c, s, r, self.server)),
                        // The owner named did not answer (it may have just died): the list.
                        Err(e) => {
                            tracing::warn!(%to, error = %e, "the job's owner did not answer; trying the endpoint list");
                            open(&self.endpoint, &self.cfg, left.min(ATTEMPT), self.server).await
                        }
                    }
                }
                None => open(&self.endpoint, &self.cfg, left.min(ATTEMPT), self.server).await,
            };
            let mut last = match opened {
                Ok((conn, mut send, recv, server)) => {
                    if server != self.server {
                        tracing::warn!(endpoint = %self.cfg.endpoint, server,
                            "rejoining through another server of the endpoint list");
                    }
                    self.server = server;
                    *self.shared.conn.lock().unwrap_or_else(|p| p.into_inner()) = conn;
                    let mut join = self.join.clone().expect("only members reconnect");
                    join.resume = self.resume;
                    if send
                        .write_all(&encode_client(&ClientMsg::Join(join)))
                        .await
                        .is_ok()
                    {
                        self.rejoining = true;
                        return Some((send, recv));
                    }
                    "the new connection closed at once".to_string()
                }
                Err(e) => e.to_string(),
            };
            if Instant::now() + backoff >= until {
                last = format!(
                    "lost the connection to dt-rdzv ({why}) and could not rejoin within the \
                     reconnect window: {last}"
                );
                let _ = self.events.send(Err(NativeError::Lost(last)));
                return None;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
}
