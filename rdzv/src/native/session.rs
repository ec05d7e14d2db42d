//! One client connection's task, a thin driver of the sans-IO [`Member`] machine (which holds
//! the rules: heartbeats, probes, round ends, when and how to reconnect and resume, what ends
//! the session): it writes what the machine asks to send, reads what the server pushes, runs
//! the machine's timers with tokio, and opens the connections it asks for (`dial`). The
//! machine also keeps what the member knows of its rounds
//! ([`Rounds`](dt_rdzv_proto::native::member::Rounds)); it is shared with the
//! client handle, which reads it and moves to the next round ([`Shared::member`]), so each
//! message is read once, here.
//!
//! One task per connection rather than a reader, a writer and a heartbeat task: a launcher or
//! a benchmark herd holds thousands of these.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use dt_rdzv_proto::native::member::{Input, Loss, Member, Output};
use dt_rdzv_proto::native::{
    CLOSE_GOING_AWAY, ClientMsg, FrameReader, ServerMsg, decode_server, encode_client,
};
use dt_rdzv_proto::sans_io::Core;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::config::ClientConfig;
use super::dial::{open, open_redirect};
use super::error::NativeError;
use super::watch::Watchers;

/// Largest server message a client accepts.
const MAX_SERVER_FRAME: u32 = 64 << 20;

/// What the client handle and its session task share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The current connection (replaced when the session reconnects).
    pub(crate) conn: Mutex<quinn::Connection>,
    /// No heartbeats (tests of the server's liveness detection).
    pub(crate) silent: AtomicBool,
    /// A rank on a node agent's connection: the agent's heartbeats count for it, so it sends
    /// only those that carry a summary of its calls ([`ClientMsg::Progress`]).
    pub(crate) on_agent: bool,
    /// Who hears of the end of a round (see `watch`).
    pub(crate) watchers: Arc<Watchers>,
    /// The session's rules and the member's rounds: the session task feeds it; the client
    /// reads its rounds (never held across an await).
    pub(crate) member: Mutex<Member>,
}

impl Shared {
    pub(crate) fn conn(&self) -> quinn::Connection {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The session's machine, locked.
    pub(crate) fn member(&self) -> MutexGuard<'_, Member> {
        self.member.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How serving a connection ended.
enum End {
    /// The client handle closed its side (or stopped listening): finish and stop.
    Done,
    /// The connection is gone: the machine says whether to reconnect or stop.
    Lost,
}

/// A connection's task (see the module docs).
pub(crate) struct Session {
    pub(crate) endpoint: quinn::Endpoint,
    pub(crate) cfg: ClientConfig,
    pub(crate) shared: Arc<Shared>,
    pub(crate) out: mpsc::UnboundedReceiver<ClientMsg>,
    pub(crate) events: mpsc::UnboundedSender<Result<ServerMsg, NativeError>>,
    /// Answers to send (to the server's probes), written after the messages that asked.
    pub(crate) replies: Vec<ClientMsg>,
}

/// The machine's clock: tokio's (so that paused test runtimes hold).
fn now() -> std::time::Instant {
    Instant::now().into_std()
}

async fn sleep_until(at: std::time::Instant) {
    tokio::time::sleep_until(Instant::from_std(at)).await;
}

/// How a connection error counts for the machine: whether the server meant it for this member
/// (it went away: a restart; or the path failed: idle timeout, reset).
fn loss(e: &quinn::ConnectionError) -> Loss {
    use quinn::ConnectionError as E;
    match e {
        E::ApplicationClosed(c) if c.error_code == CLOSE_GOING_AWAY.into() => Loss::ServerGone,
        E::Reset => Loss::ServerGone,
        E::TimedOut => Loss::Silent,
        _ => Loss::Closed,
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
                End::Lost => match self.reconnect().await {
                    Some((s, r)) => (send, recv) = (s, r),
                    None => return,
                },
            }
        }
    }

    fn feed(&mut self, input: Input) {
        let mut m = self.shared.member();
        m.set_listening(!self.events.is_closed());
        m.handle(now(), input);
    }

    /// Tells the machine `input` now.
    fn tell(&self, input: Input) {
        self.shared.member().handle(now(), input);
    }

    /// The machine's next output (the lock is let go at once).
    fn next_output(&self) -> Option<Output> {
        self.shared.member().poll_output()
    }

    /// Carries out an output that needs no connection; `Some` when serving must stop.
    fn apply(&mut self, output: Output) -> Option<End> {
        match output {
            Output::Deliver(msg) => {
                if self.events.send(Ok(msg)).is_err() {
                    return Some(End::Done);
                }
            }
            Output::EndThrough(end) => self.shared.watchers.end_through(end),
            Output::EndAll(end) => self.shared.watchers.end_all(end),
            Output::Dump { round, rank, why } => self.shared.watchers.dump(round, rank, &why),
            Output::Redirected { to, why } => {
                tracing::info!(from = %self.cfg.endpoint, %to, %why,
                    "dt-rdzv sent this member to its job's owner");
            }
            Output::Rejoined => {
                tracing::info!(endpoint = %self.cfg.endpoint, "rejoined after reconnecting");
            }
            Output::Disconnect => return Some(End::Lost),
            Output::Ended(why) => {
                let _ = self.events.send(Err(NativeError::Lost(why)));
                return Some(End::Lost);
            }
            Output::Reply(msg) | Output::Send(msg) => self.replies.push(msg),
            // Asked for only while reconnecting.
            Output::Dial { .. } | Output::Rejoin(_) => {}
        }
        None
    }

    /// A heartbeat becomes a [`ClientMsg::Progress`] when the member has a summary of its
    /// calls to give.
    fn with_progress(&self, msg: ClientMsg) -> ClientMsg {
        match (&msg, &self.cfg.progress) {
            (ClientMsg::Heartbeat { .. }, Some(source)) => match source.summary() {
                Some(p) => ClientMsg::Progress(p.bounded()),
                None => msg,
            },
            _ => msg,
        }
    }

    /// Writes what the machine asks to send (telling it what was written).
    async fn flush(&mut self, send: &mut quinn::SendStream) -> Option<End> {
        while let Some(o) = self.next_output() {
            match o {
                Output::Send(msg) => {
                    let msg = self.with_progress(msg);
                    if self.shared.on_agent && matches!(msg, ClientMsg::Heartbeat { .. }) {
                        continue;
                    }
                    // On failure the read side says why.
                    if send.write_all(&encode_client(&msg)).await.is_ok() {
                        self.tell(Input::Sent);
                    }
                }
                other => {
                    if let Some(end) = self.apply(other) {
                        return Some(end);
                    }
                }
            }
        }
        None
    }

    /// Serves one connection until it ends.
    async fn serve(&mut self, send: &mut quinn::SendStream, recv: &mut quinn::RecvStream) -> End {
        let mut reader = FrameReader::new(MAX_SERVER_FRAME);
        loop {
            let due = self.shared.member().poll_timeout();
            let lost = tokio::select! {
                msg = self.out.recv() => {
                    let Some(msg) = msg else { return End::Done };
                    self.feed(Input::Outgoing(msg));
                    None
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
                        None
                    }
                    Ok(None) => Some(("server closed the stream".to_string(), Loss::Stream)),
                    Err(quinn::ReadError::ConnectionLost(e)) => Some((e.to_string(), loss(&e))),
                    Err(e) => Some((e.to_string(), Loss::Stream)),
                },
                _ = sleep_until(due.unwrap_or_else(now)), if due.is_some() => {
                    let mut m = self.shared.member();
                    m.set_silent(self.shared.silent.load(Ordering::Relaxed));
                    m.handle_timeout(now());
                    None
                }
            };
            if let Some((why, loss)) = lost {
                self.feed(Input::ConnectionLost { why, loss });
            }
            if let Some(end) = self.flush(send).await {
                return end;
            }
        }
    }

    /// Hands every complete message to the machine, and carries out what it asks (but the
    /// replies, written after).
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
            self.feed(Input::Message(msg));
            while let Some(o) = self.next_output() {
                if let Some(end) = self.apply(o) {
                    return Some(end);
                }
            }
        }
    }

    /// Opens the connections the machine asks for until one takes the join sent again.
    /// `None` (after telling the client) when the machine gives up.
    async fn reconnect(&mut self) -> Option<(quinn::SendStream, quinn::RecvStream)> {
        let mut opened: Option<(quinn::SendStream, quinn::RecvStream)> = None;
        loop {
            let Some(o) = self.next_output() else {
                // The next attempt, after its pause (none: the session is over).
                let due = self.shared.member().poll_timeout();
                sleep_until(due?).await;
                self.shared.member().handle_timeout(now());
                continue;
            };
            match o {
                Output::Dial {
                    attempt,
                    why,
                    redirect,
                    redirect_deadline,
                    start,
                    deadline,
                } => {
                    tracing::warn!(endpoint = %self.cfg.endpoint, %why, attempt,
                        "connection to dt-rdzv lost; reconnecting to resume this member's round");
                    let got = match redirect {
                        Some(to) => {
                            match open_redirect(&self.endpoint, &self.cfg, &to, redirect_deadline)
                                .await
                            {
                                Ok((c, s, r)) => Ok((c, s, r, start)),
                                // The owner named did not answer (it may have just died): the
                                // list.
                                Err(e) => {
                                    tracing::warn!(%to, error = %e, "the job's owner did not answer; trying the endpoint list");
                                    open(&self.endpoint, &self.cfg, deadline, start).await
                                }
                            }
                        }
                        None => open(&self.endpoint, &self.cfg, deadline, start).await,
                    };
                    match got {
                        Ok((conn, send, recv, server)) => {
                            if server != start {
                                tracing::warn!(endpoint = %self.cfg.endpoint, server,
                                    "rejoining through another server of the endpoint list");
                            }
                            *self.shared.conn.lock().unwrap_or_else(|p| p.into_inner()) = conn;
                            opened = Some((send, recv));
                            self.tell(Input::Connected { server });
                        }
                        Err(e) => {
                            let why = e.to_string();
                            self.tell(Input::DialFailed { why });
                        }
                    }
                }
                Output::Rejoin(join) => {
                    let (mut send, recv) = opened.take()?;
                    let join = encode_client(&ClientMsg::Join(join));
                    if send.write_all(&join).await.is_ok() {
                        self.tell(Input::RejoinSent);
                        return Some((send, recv));
                    }
                    let why = "the new connection closed at once".to_string();
                    self.tell(Input::DialFailed { why });
                }
                Output::Ended(why) => {
                    let _ = self.events.send(Err(NativeError::Lost(why)));
                    return None;
                }
                other => {
                    let _ = self.apply(other);
                }
            }
        }
    }
}
