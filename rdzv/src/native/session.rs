//! One client connection's task: it writes what the client sends, reads what the server
//! pushes, sends heartbeats at the rate the server asked for, and, for a member whose
//! connection is lost without the server meaning it (a restart: close code
//! [`CLOSE_GOING_AWAY`]; or a network failure: an idle timeout), reconnects and joins again
//! asking for the place it held ([`Resume`]), within the client's reconnect window.
//!
//! One task per connection rather than a reader, a writer and a heartbeat task: a launcher or
//! a benchmark herd holds thousands of these.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dt_rdzv_proto::native::{
    CLOSE_GOING_AWAY, ClientMsg, FrameReader, Join, RefusalCode, Resume, ServerMsg, decode_server,
    encode_client,
};
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval};

use super::config::{ClientConfig, DEFAULT_NATIVE_PORT};
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

/// Every address of one `host[:port]` (the native port, 29401, by default), in the resolver's
/// order.
async fn resolve_one(endpoint: &str) -> Result<Vec<SocketAddr>, NativeError> {
    let with_port = if endpoint.rsplit_once(':').is_some_and(|(h, p)| {
        !p.is_empty()
            && p.chars().all(|c| c.is_ascii_digit())
            && (!h.contains(':') || h.ends_with(']'))
    }) {
        endpoint.to_string()
    } else {
        format!("{endpoint}:{DEFAULT_NATIVE_PORT}")
    };
    let err = |why: String| NativeError::Connect {
        endpoint: endpoint.into(),
        why,
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&with_port)
        .await
        .map_err(|e| err(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(err("name resolves to no address".into()));
    }
    Ok(addrs)
}

/// The servers of an endpoint list: `host[:port]` entries separated by commas, each name
/// standing for every address it resolves to, in order and without repeats. Entries that do
/// not resolve are skipped while another does.
pub(crate) async fn resolve_all(endpoints: &str) -> Result<Vec<SocketAddr>, NativeError> {
    let mut out: Vec<SocketAddr> = Vec::new();
    let mut last = None;
    for entry in endpoints
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        match resolve_one(entry).await {
            Ok(addrs) => {
                for a in addrs {
                    if !out.contains(&a) {
                        out.push(a);
                    }
                }
            }
            Err(e) => last = Some(e),
        }
    }
    match (out.is_empty(), last) {
        (false, _) => Ok(out),
        (true, Some(e)) => Err(e),
        (true, None) => Err(NativeError::Config(format!(
            "no rendezvous endpoint in {endpoints:?}"
        ))),
    }
}

/// Orders `addrs` by rendezvous (highest-random-weight) hashing of `job` and each address:
/// the same order for every client of one job, whatever order it was given, spread evenly over
/// the servers across jobs. FNV-1a, so the order is the same in every build and process.
pub(crate) fn by_affinity(job: &str, addrs: &mut [SocketAddr]) {
    fn weight(job: &str, a: &SocketAddr) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in job.bytes().chain([0]).chain(a.to_string().into_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // FNV's low bits mix poorly for short inputs: finish with a murmur-style avalanche.
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }
    addrs.sort_by_key(|a| std::cmp::Reverse(weight(job, a)));
}

/// Opens a connection and its stream within `deadline`, trying the servers of the endpoint
/// list in order from `start` (wrapping around); with several, each but the last gets at most
/// [`PER_SERVER`] of the deadline, so that a vanished one costs little (in the order of
/// [`by_affinity`] when the config names the job). Returns the index of the server that
/// answered.
pub(crate) async fn open(
    endpoint: &quinn::Endpoint,
    cfg: &ClientConfig,
    deadline: Duration,
    start: usize,
) -> Result<
    (
        quinn::Connection,
        quinn::SendStream,
        quinn::RecvStream,
        usize,
    ),
    NativeError,
> {
    let mut addrs = resolve_all(&cfg.endpoint).await?;
    if let Some(job) = &cfg.affinity {
        by_affinity(job, &mut addrs);
    }
    let n = addrs.len();
    let until = Instant::now() + deadline;
    let mut errors = Vec::new();
    for k in 0..n {
        let i = (start + k) % n;
        let left = until.saturating_duration_since(Instant::now());
        // The last server to try gets whatever is left; the others at most PER_SERVER.
        let share = if k + 1 == n {
            left
        } else {
            left.min(PER_SERVER)
        };
        match open_one(endpoint, cfg, addrs[i], share).await {
            Ok((c, s, r)) => return Ok((c, s, r, i)),
            Err(why) => errors.push(format!("{}: {why}", addrs[i])),
        }
    }
    Err(NativeError::Connect {
        endpoint: cfg.endpoint.clone(),
        why: errors.join("; "),
    })
}

/// Opens a connection to the server a `Redirect` named, within `deadline`.
async fn open_redirect(
    endpoint: &quinn::Endpoint,
    cfg: &ClientConfig,
    to: &str,
    deadline: Duration,
) -> Result<(quinn::Connection, quinn::SendStream, quinn::RecvStream), NativeError> {
    let addrs = resolve_one(to).await?;
    let mut errors = Vec::new();
    let until = Instant::now() + deadline;
    for a in addrs {
        let left = until.saturating_duration_since(Instant::now());
        match open_one(endpoint, cfg, a, left).await {
            Ok(ok) => return Ok(ok),
            Err(why) => errors.push(format!("{a}: {why}")),
        }
    }
    Err(NativeError::Connect {
        endpoint: to.into(),
        why: errors.join("; "),
    })
}

/// What one server of a list gets of a connection attempt's deadline, at most.
const PER_SERVER: Duration = Duration::from_millis(1000);

async fn open_one(
    endpoint: &quinn::Endpoint,
    cfg: &ClientConfig,
    addr: SocketAddr,
    deadline: Duration,
) -> Result<(quinn::Connection, quinn::SendStream, quinn::RecvStream), String> {
    let connecting = endpoint
        .connect(addr, &cfg.server_name)
        .map_err(|e| e.to_string())?;
    let conn = tokio::time::timeout(deadline, connecting)
        .await
        .map_err(|_| format!("no handshake within {deadline:?}"))?
        .map_err(|e| e.to_string())?;
    let (send, recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    Ok((conn, send, recv))
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

#[cfg(test)]
mod tests {
    use super::by_affinity;
    use std::net::SocketAddr;

    fn servers() -> Vec<SocketAddr> {
        ["10.0.0.1:29401", "10.0.0.2:29401", "10.0.0.3:29401"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect()
    }

    #[test]
    fn every_client_of_a_job_gets_one_order_whatever_order_it_was_given() {
        let mut a = servers();
        by_affinity("job-7", &mut a);
        for rot in 1..3 {
            let mut b = servers();
            b.rotate_left(rot);
            by_affinity("job-7", &mut b);
            assert_eq!(a, b, "rotation {rot}");
        }
    }

    #[test]
    fn jobs_spread_over_the_servers() {
        let mut firsts = [0usize; 3];
        let all = servers();
        for j in 0..300 {
            let mut a = servers();
            by_affinity(&format!("job-{j}"), &mut a);
            firsts[all.iter().position(|s| *s == a[0]).unwrap()] += 1;
        }
        assert!(firsts.iter().all(|&n| n > 60), "{firsts:?}");
    }
}
