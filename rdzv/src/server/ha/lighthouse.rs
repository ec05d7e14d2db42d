//! The torchft Lighthouse door of a server in a group sharing a backend (`--backend`): one
//! server holds the door (`<prefix>torchft-owner`, see `owner`) and runs every job's quorums;
//! the others relay their torchft connections to it byte for byte ([`super::relay::pipe`]), so
//! that every replica of a job meets in one Lighthouse whichever server it reached.
//!
//! The Lighthouse keeps nothing a fail-over must carry: every replica heartbeats every 100 ms
//! and asks for its next quorum within a step, so the next holder learns the job again from
//! them. What must not go back is the quorum id (a torchft `Manager` reconfigures only when the
//! id changes): the holder records the highest id it issued (`<prefix>torchft-quorum-id`), and
//! a server taking the door over starts above both that and the Unix time in milliseconds (ids
//! start at the time a server started and rise by one per quorum tick at most, so even an id
//! issued after the last record was written is below a later server's clock).
//!
//! A connection that reaches a server while the holder it knows of is dead (its lease not yet
//! expired) waits, asking again every [`RETRY`], until another server holds the door (this one,
//! or one it can relay to), for at most twice the lease's time to live: the replica's call is
//! late by the fail-over, not failed. When the holder loses the door to another (its lease
//! found expired), its torchft connections close, so that their replicas reach the new holder.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::{Mutex, mpsc, watch};

use super::owner::{Owners, Verdict};
use super::relay::{connect, splice};
use crate::server::ratelog::limited;

/// How often a connection waiting for a live holder asks again.
const RETRY: Duration = Duration::from_millis(250);

/// A torchft door's share of the group. See the module docs.
pub(crate) struct SharedLighthouse {
    owners: Arc<Owners>,
    /// The value of [`Owners::lighthouse_lost`] when this server last restored the group's
    /// highest quorum id (`None`: never): a new holding restores again.
    restored: Mutex<Option<u64>>,
}

/// What a torchft connection does after [`SharedLighthouse::admit`].
pub(crate) enum Admission {
    /// Serve it here; close it when `lost` changes (the door went to another server).
    Serve(TcpStream, watch::Receiver<u64>),
    /// It was relayed to the holder (and has ended), or closed.
    Done,
}

impl SharedLighthouse {
    pub(crate) fn new(owners: Arc<Owners>) -> Self {
        Self {
            owners,
            restored: Mutex::new(None),
        }
    }

    /// Serves `stream` here if this server holds the Lighthouse door (claiming it when nobody
    /// does; on a new holding, `restore` gets the id the quorum ids must start above first),
    /// else relays it to the holder; closes it when nobody can say who holds the door.
    pub(crate) async fn admit(
        &self,
        id: u64,
        stream: TcpStream,
        peer: SocketAddr,
        stop: watch::Receiver<bool>,
        restore: impl FnOnce(i64),
    ) -> Admission {
        let lost = self.owners.lighthouse_lost();
        let patience = Instant::now() + 2 * self.owners.ttl();
        loop {
            match self.owners.claim_lighthouse().await {
                Verdict::Mine => {
                    return match self.restore(&lost, peer, restore).await {
                        true => Admission::Serve(stream, lost),
                        false => Admission::Done,
                    };
                }
                Verdict::Elsewhere {
                    torchft, server, ..
                } => {
                    if torchft.is_empty() {
                        limited!(warn, "torchft connection closed: the door's holder has no \
                            torchft port", %peer, %server);
                        return Admission::Done;
                    }
                    match connect(&torchft).await {
                        Ok(upstream) => {
                            tracing::info!(conn = id, %peer, %server, to = %torchft,
                                "torchft connection relayed to the Lighthouse's holder");
                            splice("torchft", id, stream, upstream, peer, stop).await;
                            return Admission::Done;
                        }
                        Err(e) if Instant::now() >= patience => {
                            limited!(warn, "torchft connection closed: the Lighthouse's holder \
                                does not answer and nobody took the door over", %peer, %server,
                                to = %torchft, error = %e);
                            return Admission::Done;
                        }
                        Err(e) => {
                            tracing::debug!(%peer, %server, error = %e,
                                "the Lighthouse's holder does not answer; waiting for its lease");
                        }
                    }
                }
                // The replica's client reconnects (to another server, when its address names
                // several) and asks again.
                Verdict::Unknown(why) if Instant::now() >= patience => {
                    limited!(warn, "torchft connection closed: cannot tell which server holds \
                        the door", %peer, %why);
                    return Admission::Done;
                }
                Verdict::Unknown(_) => {}
            }
            tokio::time::sleep(RETRY).await;
        }
    }

    /// On a new holding, restores the group's highest quorum id; false when unreadable.
    async fn restore(
        &self,
        lost: &watch::Receiver<u64>,
        peer: SocketAddr,
        restore: impl FnOnce(i64),
    ) -> bool {
        let mut restored = self.restored.lock().await;
        let holding = *lost.borrow();
        if *restored == Some(holding) {
            return true;
        }
        match self.owners.lighthouse_quorum_id().await {
            Ok(recorded) => {
                let floor = recorded.max(unix_millis());
                tracing::info!(
                    recorded,
                    floor,
                    "holding the Lighthouse door: quorum ids start above the floor"
                );
                restore(floor);
                *restored = Some(holding);
                true
            }
            Err(e) => {
                limited!(warn, "torchft connection closed: the group's last quorum id is \
                    unreadable", %peer, error = %e);
                false
            }
        }
    }

    /// Records each quorum id the door issues (the newest of those waiting) until `stop`.
    pub(crate) async fn record(
        self: Arc<Self>,
        mut issued: mpsc::UnboundedReceiver<i64>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let mut q = tokio::select! {
                _ = stop.changed() => return,
                q = issued.recv() => match q {
                    Some(q) => q,
                    None => return,
                },
            };
            while let Ok(later) = issued.try_recv() {
                q = q.max(later);
            }
            self.owners.note_lighthouse_quorum_id(q).await;
        }
    }
}

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn unix_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
