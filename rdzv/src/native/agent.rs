//! A node agent: one QUIC connection that speaks for the ranks of one node. Its first stream
//! carries the hello and, every heartbeat interval, one heartbeat for the whole node; each
//! local rank is a [`NativeClient`] on a stream of its own on the same connection (joins,
//! welcomes, publishes, look-ups, probes as usual, but no heartbeats of its own). The server
//! loses every rank at once when the agent goes silent or its connection closes, and one rank
//! alone when its stream closes or the agent reports it ([`NodeAgent::rank_lost`]).
//!
//! Ranks on an agent do not reconnect: a lost agent means a lost node, and the launcher that
//! runs the agent starts it again (with new member ids or after the server declared the old
//! ones lost).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dt_rdzv_proto::native::{
    ClientMsg, FrameReader, NodeHello, ServerMsg, decode_server, encode_client,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::client::{ClientConfig, Connector, NativeClient, ProgressSource};
use super::dial::open;
use super::error::NativeError;

/// What the server granted the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeGrant {
    /// The agent heartbeats this often.
    pub heartbeat_interval: Duration,
    /// Its ranks are lost after this long with nothing from the node.
    pub heartbeat_timeout: Duration,
    /// At most this many ranks may join through it.
    pub max_ranks: u32,
}

/// A node agent's connection (see the module docs).
#[derive(Debug)]
pub struct NodeAgent {
    connector: Connector,
    cfg: ClientConfig,
    conn: quinn::Connection,
    server: usize,
    grant: NodeGrant,
    out: mpsc::UnboundedSender<ClientMsg>,
    silent: Arc<AtomicBool>,
    task: JoinHandle<Result<(), NativeError>>,
}

impl Connector {
    /// Connects as the agent of `node` for `job` (its ranks then join with
    /// [`NodeAgent::rank`]).
    pub async fn node_agent(
        &self,
        cfg: &ClientConfig,
        job: &str,
        node: &str,
    ) -> Result<NodeAgent, NativeError> {
        let (conn, mut send, mut recv, server) = open(self.endpoint(), cfg, cfg.timeout, 0).await?;
        let hello = ClientMsg::Node(NodeHello {
            job: job.into(),
            token: cfg.token.clone(),
            node: node.into(),
        });
        let lost = |e: &dyn std::fmt::Display| NativeError::Lost(e.to_string());
        send.write_all(&encode_client(&hello))
            .await
            .map_err(|e| lost(&e))?;
        let mut reader = FrameReader::new(1 << 20);
        let answer = tokio::time::timeout(cfg.timeout, next(&mut recv, &mut reader)).await;
        let grant = match answer {
            Err(_) => {
                return Err(NativeError::Timeout {
                    what: format!("the answer to node {node:?}'s agent hello"),
                    waited: cfg.timeout,
                });
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok(ServerMsg::NodeAccepted {
                heartbeat_interval_ms,
                heartbeat_timeout_ms,
                max_ranks,
                ..
            })) => NodeGrant {
                heartbeat_interval: Duration::from_millis(heartbeat_interval_ms.max(1)),
                heartbeat_timeout: Duration::from_millis(heartbeat_timeout_ms),
                max_ranks,
            },
            Ok(Ok(ServerMsg::Refused { code, message })) => {
                return Err(NativeError::Refused { code, message });
            }
            Ok(Ok(other)) => {
                return Err(NativeError::Protocol(format!(
                    "unexpected answer to a node agent's hello: {other:?}"
                )));
            }
        };
        let (out, rx) = mpsc::unbounded_channel();
        let silent = Arc::new(AtomicBool::new(false));
        let hello = Hello {
            send,
            recv,
            reader,
            reports: rx,
            silent: silent.clone(),
        };
        let task = tokio::spawn(hello.beat(grant.heartbeat_interval));
        Ok(NodeAgent {
            connector: self.clone(),
            cfg: cfg.clone(),
            conn,
            server,
            grant,
            out,
            silent,
            task,
        })
    }
}

impl NodeAgent {
    /// What the server granted.
    pub fn grant(&self) -> NodeGrant {
        self.grant
    }

    /// A client for one local rank, on a new stream of the agent's connection: join with it
    /// as with any [`NativeClient`] (naming the agent's job and node).
    pub async fn rank(&self) -> Result<NativeClient, NativeError> {
        self.rank_reporting(None).await
    }

    /// As [`NodeAgent::rank`], for a rank whose summaries of its calls `progress` gives: they
    /// go at the heartbeat interval ([`ClientConfig::progress`]), so that
    /// `dt-rdzv status --hang` sees the rank's calls as it sees a member's on its own
    /// connection.
    pub async fn rank_reporting(
        &self,
        progress: Option<ProgressSource>,
    ) -> Result<NativeClient, NativeError> {
        let stream = tokio::time::timeout(self.cfg.timeout, self.conn.open_bi())
            .await
            .map_err(|_| NativeError::Timeout {
                what: "a stream for a rank on the node agent's connection".into(),
                waited: self.cfg.timeout,
            })?
            .map_err(|e| NativeError::Lost(e.to_string()))?;
        let cfg = ClientConfig {
            progress,
            ..self.cfg.clone()
        };
        Ok(self
            .connector
            .start(&cfg, self.conn.clone(), stream, self.server, true))
    }

    /// Tells the server one local rank is gone (its process exited): only it is lost.
    pub fn rank_lost(&self, member: &str, why: &str) -> Result<(), NativeError> {
        self.out
            .send(ClientMsg::RankLost {
                member: member.into(),
                why: why.into(),
            })
            .map_err(|_| NativeError::Lost("the node agent's connection is closed".into()))
    }

    /// Stops heartbeating but keeps the connection open, as a hung agent would (for tests of
    /// the server's liveness detection).
    #[doc(hidden)]
    pub fn go_silent(&mut self) {
        self.silent.store(true, Ordering::Relaxed);
    }

    /// Whether the agent's connection still stands (`Err`: why it ended).
    pub fn is_alive(&self) -> Result<(), NativeError> {
        match self.conn.close_reason() {
            None if !self.task.is_finished() => Ok(()),
            None => Err(NativeError::Lost("the node agent stopped".into())),
            Some(e) => Err(NativeError::Lost(e.to_string())),
        }
    }

    /// Closes the connection: the server loses every rank of the node at once.
    pub fn close(self, why: &str) {
        self.task.abort();
        self.conn
            .close(dt_rdzv_proto::native::CLOSE_NORMAL.into(), why.as_bytes());
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The next server message on the hello stream.
async fn next(
    recv: &mut quinn::RecvStream,
    reader: &mut FrameReader,
) -> Result<ServerMsg, NativeError> {
    loop {
        if let Some(p) = reader.next_payload()? {
            return Ok(decode_server(&p)?);
        }
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => reader.push(&chunk.bytes),
            Ok(None) => return Err(NativeError::Lost("the server closed the stream".into())),
            Err(e) => return Err(NativeError::Lost(e.to_string())),
        }
    }
}

/// The hello stream, served by its own task.
struct Hello {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    reader: FrameReader,
    reports: mpsc::UnboundedReceiver<ClientMsg>,
    /// No heartbeats (tests of the server's liveness detection).
    silent: Arc<AtomicBool>,
}

impl Hello {
    /// A heartbeat every `interval`, the agent's reports, and the server's answers (refusals
    /// are logged). Ends with the connection.
    async fn beat(mut self, interval: Duration) -> Result<(), NativeError> {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seq = 0u64;
        let lost = |e: &dyn std::fmt::Display| NativeError::Lost(e.to_string());
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if self.silent.load(Ordering::Relaxed) {
                        continue;
                    }
                    seq += 1;
                    let hb = encode_client(&ClientMsg::Heartbeat { seq });
                    self.send.write_all(&hb).await.map_err(|e| lost(&e))?;
                }
                report = self.reports.recv() => match report {
                    Some(msg) => {
                        self.send.write_all(&encode_client(&msg)).await.map_err(|e| lost(&e))?
                    }
                    None => return Ok(()),
                },
                msg = next(&mut self.recv, &mut self.reader) => match msg? {
                    ServerMsg::Refused { code, message } => {
                        tracing::warn!(?code, %message, "dt-rdzv refused a node agent's request");
                    }
                    other => tracing::debug!(?other, "node agent: server message"),
                },
            }
        }
    }
}
