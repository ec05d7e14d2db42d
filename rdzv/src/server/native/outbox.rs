//! A native connection's outbox: what the machine routes to it, queued for its writer, with
//! the bytes queued counted. A member that does not read (its flow-control window full) would
//! otherwise let every welcome, configuration entry and answer pile up in the server; past
//! [`MAX_QUEUED`] its connection is closed instead, naming the bound (at once: its writer is
//! stopped mid-write, since what it is blocked on is that member's reading).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use dt_rdzv_proto::native::ServerMsg;
use tokio::sync::{Notify, mpsc};

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

#[derive(Default)]
struct Shared {
    queued: AtomicUsize,
    kill: Notify,
    why: Mutex<Option<String>>,
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

/// A new outbox.
pub(crate) fn outbox() -> (Outbox, OutboxRx) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared::default());
    (
        Outbox {
            tx,
            shared: shared.clone(),
        },
        OutboxRx { rx, shared },
    )
}

impl Outbox {
    /// Queues `out`; `Err(bytes queued)` when a message would pass [`MAX_QUEUED`] (not
    /// queued: close the connection).
    pub(crate) fn send(&self, out: NativeOut) -> Result<(), usize> {
        if let NativeOut::Msg(m) = &out {
            let n = approx_len(m);
            let before = self.shared.queued.fetch_add(n, Ordering::AcqRel);
            if before + n > MAX_QUEUED {
                self.shared.queued.fetch_sub(n, Ordering::AcqRel);
                return Err(before);
            }
        }
        let _ = self.tx.send(out);
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
        self.shared
            .queued
            .fetch_sub(approx_len(m), Ordering::AcqRel);
    }

    /// What resolves once [`Outbox::kill`] was called.
    pub(crate) fn killed(&self) -> Killed {
        Killed(self.shared.clone())
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
