//! A native connection's outbox: what the machine routes to it, queued for its writer, with
//! the bytes queued counted. A member that does not read (its flow-control window full) would
//! otherwise let every welcome, configuration entry and answer pile up in the server; past
//! [`MAX_QUEUED`] its connection is closed instead, naming the bound (at once: its writer is
//! stopped mid-write, since what it is blocked on is that member's reading). Past
//! [`QUEUED_FLOOR`] a connection's queue also needs room in the server's memory budget
//! ([`NativeMemory`], which counts every connection's queue).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use dt_rdzv_proto::native::ServerMsg;
use tokio::sync::{Notify, mpsc};

use super::memory::{NativeMemory, QUEUED_FLOOR};

/// What a native connection task receives.
#[derive(Debug)]
pub(crate) enum NativeOut {
    /// A message to send. Boxed: an outbox's channel allocates its slots in blocks of 32,
    /// sized by this enum, and `ServerMsg` is large (a welcome inline): unboxed that is ~6 KiB
    /// per connection before a single message is queued.
    Msg(Box<ServerMsg>),
    /// Send what is queued, then close with this reason.
    Close(String),
    /// Send what is queued, then close as a server going away (the member reconnects and
    /// resumes its round: through the endpoint list, or where a `Redirect` sent it).
    GoAway(String),
}

/// Most bytes queued for one connection's writer (about): 32 MiB, eight welcomes carrying a
/// job's whole 4 MiB of configuration.
pub(crate) const MAX_QUEUED: usize = 32 << 20;

/// About how many bytes `m` takes encoded (its variable parts, plus a little).
pub(crate) fn approx_len(m: &ServerMsg) -> usize {
    let peers = |p: &[dt_rdzv_proto::native::Peer]| -> usize {
        p.iter()
            .map(|p| {
                64 + p.member.len()
                    + p.node.len()
                    + p.observed_ip.len()
                    + p.host.len()
                    + p.addrs.iter().map(|a| a.len() + 8).sum::<usize>()
            })
            .sum()
    };
    256 + match m {
        ServerMsg::Config { key, value, .. } => key.len() + value.len(),
        ServerMsg::Welcome(w) => {
            w.config
                .iter()
                .map(|(k, v)| k.len() + v.len() + 16)
                .sum::<usize>()
                + peers(&w.peers)
        }
        ServerMsg::Peers(p) => peers(p),
        ServerMsg::Status(s) => s.iter().map(|j| 256 + j.members.len() * 256).sum(),
        _ => 0,
    }
}

struct Shared {
    queued: AtomicUsize,
    kill: Notify,
    why: Mutex<Option<String>>,
    /// The door's holdings, which count every connection's queue.
    memory: Arc<NativeMemory>,
}

/// The sending side (the machine's routes, and the connection's reader for a redirect).
#[derive(Clone)]
pub(crate) struct Outbox {
    tx: mpsc::UnboundedSender<NativeOut>,
    shared: Arc<Shared>,
}

/// The writer's side.
pub(crate) struct OutboxRx {
    rx: mpsc::UnboundedReceiver<NativeOut>,
    shared: Arc<Shared>,
}

/// A new outbox, its queue counted in `memory`.
pub(crate) fn outbox(memory: Arc<NativeMemory>) -> (Outbox, OutboxRx) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        queued: AtomicUsize::new(0),
        kill: Notify::new(),
        why: Mutex::new(None),
        memory,
    });
    (
        Outbox {
            tx,
            shared: shared.clone(),
        },
        OutboxRx { rx, shared },
    )
}

impl Outbox {
    /// Queues `out`; `Err(why)` when a message would pass [`MAX_QUEUED`], or pass
    /// [`QUEUED_FLOOR`] while the server's memory budget has no room for it (not queued:
    /// close the connection).
    pub(crate) fn send(&self, out: NativeOut) -> Result<(), String> {
        let mut counted = 0;
        if let NativeOut::Msg(m) = &out {
            let n = approx_len(m);
            let before = self.shared.queued.fetch_add(n, Ordering::AcqRel);
            let refused = if before + n > MAX_QUEUED {
                Some(format!(
                    "{before} bytes already queued for it, the most a connection may have \
                     queued is {MAX_QUEUED}"
                ))
            } else {
                self.shared
                    .memory
                    .queue(before as u64, n as u64)
                    .err()
                    .map(|why| {
                        format!(
                            "{before} bytes already queued for it (past {QUEUED_FLOOR}, a \
                             connection's queue needs the server's room): {why}"
                        )
                    })
            };
            if let Some(why) = refused {
                self.shared.queued.fetch_sub(n, Ordering::AcqRel);
                return Err(why);
            }
            counted = n;
        }
        if self.tx.send(out).is_err() && counted > 0 {
            // The writer is gone: nothing will take it off the queue.
            self.shared.queued.fetch_sub(counted, Ordering::AcqRel);
            self.shared.memory.unqueue(counted as u64);
        }
        Ok(())
    }

    /// Stops the writer now, even mid-write, and closes the connection for `why`.
    pub(crate) fn kill(&self, why: String) {
        *self.shared.why.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        self.shared.kill.notify_one();
    }
}

impl OutboxRx {
    /// The next item, once there is one; `None` when every sender is gone.
    pub(crate) async fn recv(&mut self) -> Option<NativeOut> {
        self.rx.recv().await
    }

    /// The next item if one is queued.
    pub(crate) fn try_recv(&mut self) -> Option<NativeOut> {
        self.rx.try_recv().ok()
    }

    /// `m` was taken off the queue (encoded for writing).
    pub(crate) fn taken(&self, m: &ServerMsg) {
        let n = approx_len(m);
        self.shared.queued.fetch_sub(n, Ordering::AcqRel);
        self.shared.memory.unqueue(n as u64);
    }

    /// What resolves once [`Outbox::kill`] was called.
    pub(crate) fn killed(&self) -> Killed {
        Killed(self.shared.clone())
    }
}

impl Drop for OutboxRx {
    /// What is still queued is dropped: no longer held. (Closing first: a message sent from
    /// now on finds no writer and uncounts itself.)
    fn drop(&mut self) {
        self.rx.close();
        while let Ok(out) = self.rx.try_recv() {
            if let NativeOut::Msg(m) = &out {
                self.taken(m);
            }
        }
    }
}

/// Tells the writer that its connection is to close at once.
pub(crate) struct Killed(Arc<Shared>);

impl Killed {
    /// Resolves with the reason once [`Outbox::kill`] was called.
    pub(crate) async fn wait(&self) -> String {
        self.0.kill.notified().await;
        let why = self.0.why.lock().unwrap_or_else(|p| p.into_inner()).take();
        why.unwrap_or_else(|| "closed".into())
    }
}
