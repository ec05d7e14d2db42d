//! The async native client: one QUIC connection per member, one bidirectional stream on it,
//! server-pushed round changes; one session task per connection reads, writes, heartbeats and
//! reconnects (see `session`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dt_rdzv_proto::native::{
    CLOSE_NORMAL, ClientMsg, JobSpec, JobStatus, Join, Peer, Role, ServerMsg, Welcome,
};
use dt_rdzv_proto::rendezvous::MAX_LOOKUP_RANKS;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::dial::open;
use super::error::NativeError;
use super::session::{Session, Shared};
use super::tls::{Trust, client_config};
use super::watch::MemberHandle;
use dt_rdzv_proto::native::member::{Member, Rounds};

pub use super::config::{ClientConfig, DEFAULT_NATIVE_PORT, ProgressSource};

/// Who a member is, for [`NativeClient::join`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// The job (run id).
    pub job: String,
    /// Member id, unique in the job.
    pub member: String,
    /// Host name (members with the same node get local ranks).
    pub node: String,
    /// Data-plane addresses to advertise to peers.
    pub addrs: Vec<String>,
    /// Host identity to advertise to peers ([`dt_rdzv_proto::native::Join::host`]; empty:
    /// unknown).
    pub host: Vec<u8>,
    /// Worker or main.
    pub role: Role,
    /// The job's settings.
    pub spec: JobSpec,
}

/// The answer to a join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// The round this member waits for.
    pub round: u64,
    /// Whether it waits as a spare.
    pub spare: bool,
}

/// A QUIC endpoint that opens client connections (one per member; share it to open many).
#[derive(Debug, Clone)]
pub struct Connector {
    endpoint: quinn::Endpoint,
}

impl Connector {
    /// A client endpoint on an ephemeral UDP port, trusting servers as `trust` says. Call
    /// inside a tokio runtime.
    pub fn new(trust: &Trust) -> Result<Self, NativeError> {
        let bind = |a: &str| {
            let addr = a.parse().expect("literal address");
            let (socket, _) = super::udp::bind(
                addr,
                super::udp::CLIENT_BUFFER,
                super::udp::CLIENT_BUFFER,
                false,
            )?;
            quinn::Endpoint::new(
                quinn::EndpointConfig::default(),
                None,
                socket,
                std::sync::Arc::new(quinn::TokioRuntime),
            )
        };
        let bind = |a: &str| {
            bind(a).map_err(|e| NativeError::Config(format!("cannot open a UDP socket: {e}")))
        };
        let mut endpoint = bind("[::]:0").or_else(|_| bind("0.0.0.0:0"))?;
        let mut cfg = client_config(trust)?;
        let mut transport = quinn::TransportConfig::default();
        // A server that vanished (SIGKILL, a host lost) is noticed within 2 s (the server's
        // default heartbeat timeout for members, and the ownership lease of servers sharing an
        // etcd); members then reconnect (through the next server of the endpoint list, if any)
        // and resume their rounds (see `session`). Heartbeats and their ACKs, and a keep-alive
        // every 500 ms when nothing else is sent, keep a healthy connection busy.
        transport.max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(Duration::from_secs(2)).expect("2 s fits"),
        ));
        transport.keep_alive_interval(Some(Duration::from_millis(500)));
        // A welcome listing every peer of a large job is a few hundred KiB: a larger window
        // than the server's lets it arrive in one flight.
        super::control_transport(&mut transport, 1 << 20);
        cfg.transport_config(std::sync::Arc::new(transport));
        endpoint.set_default_client_config(cfg);
        Ok(Self { endpoint })
    }

    /// Opens a connection and its stream.
    pub async fn connect(&self, cfg: &ClientConfig) -> Result<NativeClient, NativeError> {
        let (conn, send, recv, server) = open(&self.endpoint, cfg, cfg.timeout, 0).await?;
        Ok(self.start(cfg, conn, (send, recv), server, false))
    }

    /// The endpoint's QUIC socket.
    pub(super) fn endpoint(&self) -> &quinn::Endpoint {
        &self.endpoint
    }

    /// A client over `stream` of `conn`. On a node agent's connection (`on_agent`) it sends
    /// no plain heartbeats (the agent's count for it; those carrying a summary of its calls
    /// still go), does not reconnect, and closing it ends only its stream.
    pub(super) fn start(
        &self,
        cfg: &ClientConfig,
        conn: quinn::Connection,
        (send, recv): (quinn::SendStream, quinn::RecvStream),
        server: usize,
        on_agent: bool,
    ) -> NativeClient {
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let reconnect = if on_agent { None } else { cfg.reconnect };
        let member = Member::new(tokio::time::Instant::now().into_std(), server, reconnect);
        let shared = Arc::new(Shared {
            conn: std::sync::Mutex::new(conn),
            silent: AtomicBool::new(false),
            on_agent,
            watchers: Default::default(),
            member: std::sync::Mutex::new(member),
        });
        let session = Session {
            endpoint: self.endpoint.clone(),
            cfg: cfg.clone(),
            shared: shared.clone(),
            out: out_rx,
            events: ev_tx,
            replies: Vec::new(),
        };
        let task = tokio::spawn(session.run(send, recv));
        NativeClient {
            shared,
            endpoint: self.endpoint.clone(),
            out: out_tx,
            events: ev_rx,
            token: cfg.token.clone(),
            timeout: cfg.timeout,
            task: Some(task),
            config: BTreeMap::new(),
            welcome: None,
            own_endpoint: false,
            on_agent,
        }
    }
}

/// One connection to `dt-rdzv serve`: a member (after [`NativeClient::join`]) or an operator.
#[derive(Debug)]
pub struct NativeClient {
    shared: Arc<Shared>,
    endpoint: quinn::Endpoint,
    out: mpsc::UnboundedSender<ClientMsg>,
    events: mpsc::UnboundedReceiver<Result<ServerMsg, NativeError>>,
    token: String,
    timeout: Duration,
    task: Option<JoinHandle<()>>,
    config: BTreeMap<String, Vec<u8>>,
    welcome: Option<Welcome>,
    own_endpoint: bool,
    /// On a stream of a node agent's connection: closing ends the stream, not the connection.
    on_agent: bool,
}

impl NativeClient {
    /// Connects with a connector of its own.
    pub async fn connect(cfg: &ClientConfig) -> Result<Self, NativeError> {
        let mut c = Connector::new(&cfg.trust)?.connect(cfg).await?;
        c.own_endpoint = true;
        Ok(c)
    }

    fn send(&self, msg: ClientMsg) -> Result<(), NativeError> {
        self.out
            .send(msg)
            .map_err(|_| NativeError::Lost("connection closed".into()))
    }

    /// The next message from the server, waiting at most `timeout`. Keeps the latest
    /// configuration and welcome.
    pub async fn next_message(&mut self, timeout: Duration) -> Result<ServerMsg, NativeError> {
        let m = match tokio::time::timeout(timeout, self.events.recv()).await {
            Err(_) => {
                return Err(NativeError::Timeout {
                    what: "waiting for the server".into(),
                    waited: timeout,
                });
            }
            Ok(None) => return Err(NativeError::Lost("connection closed".into())),
            Ok(Some(m)) => m?,
        };
        self.note(&m);
        Ok(m)
    }

    /// A message already received, without waiting.
    pub fn try_message(&mut self) -> Option<Result<ServerMsg, NativeError>> {
        let m = self.events.try_recv().ok()?;
        if let Ok(m) = &m {
            self.note(m);
        }
        Some(m)
    }

    fn note(&mut self, m: &ServerMsg) {
        match m {
            ServerMsg::Config { key, value, .. } => {
                self.config.insert(key.clone(), value.to_vec());
            }
            ServerMsg::Welcome(w) => {
                for (k, v) in w.config.iter() {
                    self.config.insert(k.clone(), v.clone());
                }
                self.welcome = Some(w.clone());
            }
            _ => {}
        }
    }

    /// Joins a job; returns once the server accepted (the round may not be complete yet).
    pub async fn join(&mut self, who: Membership) -> Result<Joined, NativeError> {
        self.send(ClientMsg::Join(Join {
            job: who.job,
            token: self.token.clone(),
            member: who.member,
            node: who.node,
            addrs: who.addrs,
            host: who.host,
            role: who.role,
            spec: who.spec,
            resume: None,
        }))?;
        match self.next_message(self.timeout).await? {
            // The session heartbeats at the rate the server asked for.
            ServerMsg::Joined { round, spare, .. } => Ok(Joined { round, spare }),
            ServerMsg::Refused { code, message } => Err(NativeError::Refused { code, message }),
            other => Err(NativeError::Protocol(format!(
                "expected Joined, got {other:?}"
            ))),
        }
    }

    /// Waits for this member's next [`Welcome`] (a completed round), at most `timeout`.
    /// Other pushed messages (round ended, pending joiners, configuration) are taken in
    /// passing; the job's end and refusals are errors.
    pub async fn wait_welcome(&mut self, timeout: Duration) -> Result<Welcome, NativeError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let m = self.next_message(left).await.map_err(|e| match e {
                NativeError::Timeout { .. } => NativeError::Timeout {
                    what: "waiting for the round to complete".into(),
                    waited: timeout,
                },
                e => e,
            })?;
            match m {
                ServerMsg::Welcome(w) => return Ok(w),
                ServerMsg::JobEnded { job, end } => return Err(NativeError::JobEnded { job, end }),
                ServerMsg::Refused { code, message } => {
                    return Err(NativeError::Refused { code, message });
                }
                _ => {}
            }
        }
    }

    /// What this member knows of its rounds, as its session read the server's messages (each
    /// once, as it handed it on: a message is in them before [`NativeClient::next_message`]
    /// returns it, and whether or not anyone reads it): `f` runs with them locked, so keep it
    /// short (the session waits). Move to the next round with [`Rounds::advance`].
    pub fn rounds<T>(&self, f: impl FnOnce(&mut Rounds) -> T) -> T {
        f(self.shared.member().rounds_mut())
    }

    /// The latest welcome received.
    pub fn current(&self) -> Option<&Welcome> {
        self.welcome.as_ref()
    }

    /// The job's configuration as published so far.
    pub fn config(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.config
    }

    /// Publishes a configuration entry (main member, or rank 0 when there is none). A
    /// refusal arrives as a message.
    pub fn publish(&self, key: impl Into<String>, value: Vec<u8>) -> Result<(), NativeError> {
        self.send(ClientMsg::Publish {
            key: key.into(),
            value,
        })
    }

    /// Relays the summaries this member's workers published in their store (a launcher's
    /// agent whose workers meet through a store: [`ClientMsg::Relay`]); replaces the last
    /// relay. A refusal arrives as a message.
    pub fn relay(
        &self,
        world: u32,
        workers: Vec<dt_rdzv_proto::native::Relayed>,
    ) -> Result<(), NativeError> {
        self.send(ClientMsg::Relay { world, workers })
    }

    /// A handle for the rest of the process: round-end callbacks and data-plane reports (see
    /// [`MemberHandle`]).
    pub fn handle(&self) -> MemberHandle {
        MemberHandle {
            out: self.out.clone(),
            watchers: self.shared.watchers.clone(),
        }
    }

    /// Asks for a new round now (lets waiting late joiners in).
    pub fn next_round(&self) -> Result<(), NativeError> {
        self.send(ClientMsg::NextRound)
    }

    /// Addresses of some ranks of the current round.
    pub async fn lookup(&mut self, ranks: Vec<u32>) -> Result<Vec<Peer>, NativeError> {
        self.send(ClientMsg::Lookup { ranks })?;
        loop {
            match self.next_message(self.timeout).await? {
                ServerMsg::Peers(p) => return Ok(p),
                ServerMsg::Refused { code, message } => {
                    return Err(NativeError::Refused { code, message });
                }
                ServerMsg::JobEnded { job, end } => return Err(NativeError::JobEnded { job, end }),
                _ => {}
            }
        }
    }

    /// The peers at `ranks` however many they are: repeated ranks asked for once, the rest in
    /// batches of at most [`MAX_LOOKUP_RANKS`] (one `Lookup` of more is refused). A member of
    /// a big round whose welcome lists only its neighbours needs every lower rank this way.
    pub async fn lookup_all(&mut self, ranks: &[u32]) -> Result<Vec<Peer>, NativeError> {
        let mut seen = std::collections::HashSet::with_capacity(ranks.len());
        let distinct: Vec<u32> = ranks.iter().copied().filter(|r| seen.insert(*r)).collect();
        let mut out = Vec::with_capacity(distinct.len());
        for batch in distinct.chunks(MAX_LOOKUP_RANKS) {
            out.extend(self.lookup(batch.to_vec()).await?);
        }
        Ok(out)
    }

    /// Status of one job or of all (operator; needs the token).
    pub async fn status(&mut self, job: Option<&str>) -> Result<Vec<JobStatus>, NativeError> {
        self.send(ClientMsg::Status {
            token: self.token.clone(),
            job: job.map(str::to_owned),
        })?;
        loop {
            match self.next_message(self.timeout).await? {
                ServerMsg::Status(s) => return Ok(s),
                ServerMsg::Refused { code, message } => {
                    return Err(NativeError::Refused { code, message });
                }
                _ => {}
            }
        }
    }

    /// Stops a job (operator; needs the token).
    pub async fn stop(&mut self, job: &str, reason: &str) -> Result<(), NativeError> {
        self.send(ClientMsg::Stop {
            token: self.token.clone(),
            job: job.into(),
            reason: reason.into(),
        })?;
        loop {
            match self.next_message(self.timeout).await? {
                ServerMsg::Stopped { .. } => return Ok(()),
                ServerMsg::Refused { code, message } => {
                    return Err(NativeError::Refused { code, message });
                }
                _ => {}
            }
        }
    }

    /// Leaves the job for good and closes the connection.
    pub async fn leave(self) -> Result<(), NativeError> {
        self.send(ClientMsg::Leave)?;
        self.close("left").await;
        Ok(())
    }

    /// Tells the server the job is done (every member is told) and closes the connection.
    pub async fn finish(self) -> Result<(), NativeError> {
        self.send(ClientMsg::Finish)?;
        self.close("finished").await;
        Ok(())
    }

    /// Closes the connection, giving queued messages and the close a moment to leave.
    pub async fn close(mut self, why: &str) {
        // Let the session write what is queued and finish the stream, then close.
        let (tx, _) = mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.out, tx));
        if let Some(t) = self.task.as_mut() {
            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
        }
        if self.on_agent {
            // The session finished its stream; the node's connection stays.
            return;
        }
        self.shared
            .conn()
            .close(CLOSE_NORMAL.into(), why.as_bytes());
        // With an endpoint of its own, wait (briefly) until the close has gone out.
        if self.own_endpoint {
            let _ =
                tokio::time::timeout(Duration::from_millis(200), self.endpoint.wait_idle()).await;
        }
    }

    /// Stops sending heartbeats but keeps the connection open, as a hung or frozen process
    /// would. For tests of the server's liveness detection.
    #[doc(hidden)]
    pub fn go_silent(&mut self) {
        self.shared.silent.store(true, Ordering::Relaxed);
    }

    /// The QUIC connection's counters (datagrams, frames, losses), for benchmarks and
    /// diagnostics.
    pub fn quic_stats(&self) -> quinn::ConnectionStats {
        self.shared.conn().stats()
    }

    /// The server's address as connected.
    pub fn remote_addr(&self) -> SocketAddr {
        self.shared.conn().remote_address()
    }
}

impl Drop for NativeClient {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        if !self.on_agent {
            self.shared
                .conn()
                .close(CLOSE_NORMAL.into(), b"client dropped");
        }
    }
}
