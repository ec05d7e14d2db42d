//! A node agent's connection: once the machine accepts its hello (the connection's first
//! stream, served by `conn`), each of the node's ranks opens a stream of its own on the same
//! connection and is served on it as a member on its own connection is (reader, writer,
//! deadlines, pace, the partial-frame budget), with three differences:
//!
//! * the connection takes up to the agent's rank limit plus one streams (others: 4);
//! * closing a rank closes its stream only, not the node's connection;
//! * when the node's connection is gone, the agent's loss is told before the rank's own, so
//!   that every rank of the node is lost in one round end rather than one at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dt_rdzv_proto::rendezvous::{ConnId, Input};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::claims::Claims;
use super::memory::NativeMemory;
use super::outbox;
use super::pace::Pace;
use super::partial;
use super::reader::Conn;
use super::rendezvous::RdzvCore;
use super::writer::Writer;
use crate::server::config::ServeConfig;

/// Takes the next connection (or stream) id.
pub(super) fn next_id(ids: &AtomicU64) -> ConnId {
    ids.fetch_sub(1, Ordering::Relaxed) - 1
}

/// What a node agent's connection shares with its ranks' streams.
pub(super) struct Agent {
    pub(super) conn: quinn::Connection,
    /// The id of the agent's hello stream (the connection's first).
    pub(super) carrier: ConnId,
    pub(super) ids: Arc<AtomicU64>,
    pub(super) core: Arc<RdzvCore>,
    pub(super) owners: Option<Arc<dyn Claims>>,
    pub(super) config: Arc<ServeConfig>,
    pub(super) stop: watch::Receiver<bool>,
    /// The door's holdings: queues and partial frames.
    pub(super) memory: Arc<NativeMemory>,
}

impl Agent {
    /// The machine accepted the connection as a node agent's, whose rank limit is `max`:
    /// serves every stream its ranks open until the connection ends (or the server stops).
    pub(super) async fn serve(self, max: u32) {
        self.conn
            .set_max_concurrent_bi_streams(quinn::VarInt::from_u32(max.saturating_add(1)));
        let this = Arc::new(self);
        let mut ranks = JoinSet::new();
        let mut stop = this.stop.clone();
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                opened = this.conn.accept_bi() => match opened {
                    Ok((send, recv)) => {
                        ranks.spawn(this.clone().rank(send, recv));
                    }
                    Err(_) => break,
                },
            }
        }
        while ranks.join_next().await.is_some() {}
    }

    /// Serves one rank's stream.
    async fn rank(self: Arc<Self>, send: quinn::SendStream, recv: quinn::RecvStream) {
        let id = next_id(&self.ids);
        let arrived = tokio::time::Instant::now();
        let (tx, rx) = outbox::outbox(self.memory.clone());
        let ip = self.conn.remote_address().ip().to_canonical().to_string();
        self.core.stream(id, self.carrier, ip, tx.clone());
        let admitted = Arc::new(AtomicBool::new(false));
        let mut writer = tokio::spawn(
            Writer {
                send,
                outbox: rx,
                conn: self.conn.clone(),
                admitted: admitted.clone(),
                whole: false,
                node: None,
            }
            .run(),
        );
        let mut c = Conn {
            id,
            recv,
            own: tx,
            admitted,
            owners: self.owners.clone(),
            partial: partial::Charge::new(self.memory.partial.clone()),
            pace: Pace::new(std::time::Instant::now()),
            on_node: None,
        };
        let run = c.run(
            &self.core,
            self.stop.clone(),
            arrived,
            &self.config,
            &mut writer,
        );
        let why = match run.await {
            Ok(why) | Err(why) => why,
        };
        drop(c);
        tracing::debug!(conn = id, carrier = self.carrier, %why, "rank stream closed");
        if *self.stop.borrow() {
            // A restart: as for any connection, nobody is lost.
            writer.abort();
            return;
        }
        if let Some(reason) = self.conn.close_reason() {
            self.core.input(Input::Closed {
                conn: self.carrier,
                why: format!("connection closed: {reason}"),
            });
        }
        self.core.input(Input::Closed { conn: id, why });
        if !writer.is_finished()
            && tokio::time::timeout(Duration::from_secs(3), &mut writer)
                .await
                .is_err()
        {
            writer.abort();
        }
    }
}
