//! A native connection's writer: its own task, so that a member whose reading lags (its
//! flow-control window full while it sends a large `Publish` itself) never stops the server
//! reading that member. With one task doing both, two back-to-back 1 MiB publishes left each
//! side blocked writing to the other: no heartbeat was read, the member was declared lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dt_rdzv_proto::native::{CLOSE_GOING_AWAY, CLOSE_NORMAL, ServerMsg, encode_server};

use super::outbox::{NativeOut, OutboxRx};

/// How a writer ended.
#[derive(Debug)]
pub(super) enum WriterEnd {
    /// It wrote a close (or the stream broke): the connection is over, for this reason.
    Closed(String),
    /// The machine let go of the outbox without a close: the reader goes on until the member
    /// goes.
    OutboxGone,
}

/// Writes what the machine routes to one connection.
pub(super) struct Writer {
    pub(super) send: quinn::SendStream,
    pub(super) outbox: OutboxRx,
    pub(super) conn: quinn::Connection,
    /// Set once the machine sent anything but a refusal (the reader's admission deadline ends).
    pub(super) admitted: Arc<AtomicBool>,
    /// Whether the stream is the connection's own (its close closes the connection), or one
    /// rank's stream on a node agent's connection (its close ends only the stream).
    pub(super) whole: bool,
    /// Told the agent's rank limit when the machine accepts a node agent's hello.
    pub(super) node: Option<tokio::sync::oneshot::Sender<u32>>,
}

impl Writer {
    /// Writes until a close, a broken stream or the outbox's end.
    pub(super) async fn run(mut self) -> WriterEnd {
        let killed = self.outbox.killed();
        loop {
            let first = tokio::select! {
                first = self.outbox.recv() => first,
                why = killed.wait() => return WriterEnd::Closed(self.kill(why)),
            };
            let Some(first) = first else {
                return WriterEnd::OutboxGone;
            };
            if let Some(why) = self.write(first).await {
                return WriterEnd::Closed(why);
            }
        }
    }

    /// Closes the connection (or the rank's stream) at once (the member does not read what is
    /// written).
    fn kill(&mut self, why: String) -> String {
        if !self.whole {
            let _ = self.send.reset(CLOSE_NORMAL.into());
            return why;
        }
        let mut r = why.clone().into_bytes();
        r.truncate(200);
        self.conn.close(CLOSE_NORMAL.into(), &r);
        why
    }

    /// Writes `first` and whatever else is queued; on a close, finishes the stream, gives the
    /// member a moment to read and close first, and closes. Returns why when it closed.
    async fn write(&mut self, first: NativeOut) -> Option<String> {
        let mut out = Vec::new();
        let mut close = None;
        let mut item = Some(first);
        while let Some(o) = item.take() {
            match o {
                NativeOut::Msg(m) => {
                    if !matches!(*m, ServerMsg::Refused { .. }) {
                        self.admitted.store(true, Ordering::Release);
                    }
                    if let ServerMsg::NodeAccepted { max_ranks, .. } = &*m
                        && let Some(tx) = self.node.take()
                    {
                        let _ = tx.send(*max_ranks);
                    }
                    out.extend_from_slice(&encode_server(&m));
                    self.outbox.taken(&m);
                }
                NativeOut::Close(reason) => {
                    close = Some((CLOSE_NORMAL, reason));
                    break;
                }
                NativeOut::GoAway(reason) => {
                    close = Some((CLOSE_GOING_AWAY, reason));
                    break;
                }
            }
            // Batch what is queued, a megabyte at a time.
            if out.len() < 1 << 20 {
                item = self.outbox.try_recv();
            }
        }
        if !out.is_empty() {
            let killed = self.outbox.killed();
            let written = tokio::select! {
                w = self.send.write_all(&out) => w.is_ok(),
                why = killed.wait() => return Some(self.kill(why)),
            };
            if !written {
                return Some("the stream broke while writing".into());
            }
        }
        let (code, reason) = close?;
        let _ = self.send.finish();
        if !self.whole {
            // The rank's stream ends; its node's connection and other ranks go on.
            let _ = tokio::time::timeout(Duration::from_secs(1), self.send.stopped()).await;
            return Some(reason);
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), self.conn.closed()).await;
        let mut r = reason.clone().into_bytes();
        r.truncate(200);
        self.conn.close(code.into(), &r);
        Some(reason)
    }
}
