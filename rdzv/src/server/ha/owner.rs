//! Which server owns which job when several share a storage (`--backend`).
//!
//! Each server holds one lease (`--owner-ttl`) and kept alive at a third of it. A job's owner
//! is the server whose value sits at `<prefix>owner/<job>` on its lease: the first server a
//! member of the job reaches claims it (a create-if-absent transaction) and the others send
//! members there ([`Verdict::Elsewhere`], a `Redirect`). When an owner dies its lease expires
//! and its keys with it; its members, whose connections went silent, reconnect through their
//! endpoint lists, and the first other server they reach claims the job and rebuilds the round
//! from their resumes (`rendezvous::resume`). The round's record (`<prefix>round/<job>`) says
//! what the job was at its last round, for the log of the server that takes it over.
//!
//! The TCPStore door is shared the same way, as one unit: the server holding
//! `<prefix>store-owner` serves every TCPStore connection of the group, and the others relay
//! theirs to it byte for byte (so keys written through any server are read through any other,
//! with the store's full semantics). Its keys live in that server's memory: when it dies, the
//! next server to get a TCPStore connection takes the door over, empty.
//!
//! The torchft Lighthouse door is shared as one unit too (`<prefix>torchft-owner`): its holder
//! runs every job's quorums and the others relay their torchft connections to it
//! (`ha/lighthouse.rs`). Its state needs no storage (every replica heartbeats and asks again
//! within a second), except the highest quorum id issued (`<prefix>torchft-quorum-id`), which
//! the next holder starts above, so that ids never go back over a fail-over.
//!
//! Never two owners acting: a server whose lease is found gone (etcd answered: expired) claims
//! its jobs again on a new lease, and hands off at once every job another server claimed
//! meanwhile (its members' connections are closed with a redirect to the new owner). A storage
//! that does not answer is different: the jobs keep running on this server's memory (members
//! need nothing from the storage to train), new jobs cannot be claimed, the status says
//! `degraded`, and everything resumes when it answers again.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::storage::{Claim, LeaseId, Storage, StorageError};
use crate::server::native::claims::Claims;
use crate::server::native::rendezvous::{Note, RdzvCore};

/// The answer to [`Owners::claim`] (the native door's type: it asks through
/// [`Claims`]).
pub(crate) use crate::server::native::claims::Verdict;

/// See the module docs.
pub(crate) struct Owners {
    storage: Arc<dyn Storage>,
    prefix: String,
    ttl: Duration,
    /// This server's id (random per process) and advertised endpoint, and both as the owner
    /// value.
    server: String,
    endpoint: String,
    value: Vec<u8>,
    state: Mutex<State>,
    /// Counts the times this server lost the Lighthouse door to another (its torchft
    /// connections close then, so that their replicas reach the new holder).
    lighthouse_lost: watch::Sender<u64>,
}

/// The key that names the owner of `job`, or of the TCPStore door.
enum Owned<'a> {
    Job(&'a str),
    Store,
    Lighthouse,
}

struct State {
    lease: LeaseId,
    /// Jobs this server owns.
    mine: BTreeSet<String>,
    /// Whether it serves the group's TCPStore door.
    store: bool,
    /// Whether it serves the group's torchft Lighthouse door.
    lighthouse: bool,
    /// When the storage last confirmed the lease.
    confirmed: Instant,
    /// Why the storage is not answering, while it is not.
    degraded: Option<String>,
}

impl Owners {
    /// Takes a lease on `storage`; fails (the server does not start) when it does not answer.
    /// `store`, `torchft`: this server's TCPStore and torchft endpoints as the others reach
    /// them (empty when off).
    pub(crate) async fn start(
        storage: Arc<dyn Storage>,
        prefix: String,
        ttl: Duration,
        endpoint: String,
        store: String,
        torchft: String,
    ) -> Result<Arc<Self>, StorageError> {
        // Two servers must never share an id (each would take the other's claims for its own).
        let server = crate::server::config::random_hex::<8>("a server id")
            .map_err(|e| StorageError::Config(e.to_string()))?;
        let lease = storage.grant(ttl).await?;
        let value = serde_json::to_vec(&json!({"server": server, "endpoint": endpoint,
            "store": store, "torchft": torchft}))
        .expect("plain JSON");
        tracing::info!(backend = %storage.describe(), %server, %endpoint, lease, ttl = ?ttl,
            "sharing jobs through the backend");
        Ok(Arc::new(Self {
            storage,
            prefix,
            ttl,
            server,
            endpoint,
            value,
            state: Mutex::new(State {
                lease,
                mine: BTreeSet::new(),
                store: false,
                lighthouse: false,
                confirmed: Instant::now(),
                degraded: None,
            }),
            lighthouse_lost: watch::Sender::new(0),
        }))
    }

    /// The lease's time to live (`--owner-ttl`).
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn owner_key(&self, job: &str) -> String {
        format!("{}owner/{}", self.prefix, escape(job))
    }

    fn key(&self, what: &Owned<'_>) -> String {
        match what {
            Owned::Job(job) => self.owner_key(job),
            Owned::Store => format!("{}store-owner", self.prefix),
            Owned::Lighthouse => format!("{}torchft-owner", self.prefix),
        }
    }

    /// Who serves the group's TCPStore door, claiming it when nobody does.
    pub(crate) async fn claim_store(&self) -> Verdict {
        self.claim_owned(Owned::Store).await
    }

    /// Who serves the group's torchft Lighthouse door, claiming it when nobody does.
    pub(crate) async fn claim_lighthouse(&self) -> Verdict {
        self.claim_owned(Owned::Lighthouse).await
    }

    /// Changes each time this server loses the Lighthouse door to another.
    pub(crate) fn lighthouse_lost(&self) -> watch::Receiver<u64> {
        self.lighthouse_lost.subscribe()
    }

    fn quorum_id_key(&self) -> String {
        format!("{}torchft-quorum-id", self.prefix)
    }

    /// The highest torchft quorum id the group's Lighthouse issued (0 when none).
    pub(crate) async fn lighthouse_quorum_id(&self) -> Result<i64, StorageError> {
        let v = self.storage.get(&self.quorum_id_key()).await?;
        Ok(
            v.and_then(|b| std::str::from_utf8(&b).ok()?.trim().parse().ok())
                .unwrap_or(0),
        )
    }

    /// Records `quorum_id` as the highest the group's Lighthouse issued (the holder's ids only
    /// go up, so the last write is the highest).
    pub(crate) async fn note_lighthouse_quorum_id(&self, quorum_id: i64) {
        let r = self
            .storage
            .put(&self.quorum_id_key(), quorum_id.to_string().as_bytes())
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, quorum_id, "backend write of the quorum id failed");
            self.note_outage(&e);
        }
    }

    fn round_key(&self, job: &str) -> String {
        format!("{}round/{}", self.prefix, escape(job))
    }

    /// Who owns `job`, claiming it when nobody does.
    pub(crate) async fn claim(&self, job: &str) -> Verdict {
        self.claim_owned(Owned::Job(job)).await
    }

    async fn claim_owned(&self, what: Owned<'_>) -> Verdict {
        let lease = {
            let s = self.lock();
            let held = match what {
                Owned::Job(job) => s.mine.contains(job),
                Owned::Store => s.store,
                Owned::Lighthouse => s.lighthouse,
            };
            if held {
                return Verdict::Mine;
            }
            s.lease
        };
        match self
            .storage
            .claim(&self.key(&what), &self.value, lease)
            .await
        {
            Ok(Claim::Mine) => {
                let job = match what {
                    Owned::Job(job) => job,
                    Owned::Store => {
                        if !std::mem::replace(&mut self.lock().store, true) {
                            tracing::info!("serving the group's TCPStore door");
                        }
                        return Verdict::Mine;
                    }
                    Owned::Lighthouse => {
                        if !std::mem::replace(&mut self.lock().lighthouse, true) {
                            tracing::info!("serving the group's torchft Lighthouse door");
                        }
                        return Verdict::Mine;
                    }
                };
                let fresh = self.lock().mine.insert(job.to_string());
                if fresh {
                    let last = self.storage.get(&self.round_key(job)).await.ok().flatten();
                    match last.and_then(|v| serde_json::from_slice::<Value>(&v).ok()) {
                        Some(r) => tracing::info!(%job, last_round = %r,
                            "took over the job (its members resume their round here)"),
                        None => tracing::info!(%job, "owning the job"),
                    }
                }
                Verdict::Mine
            }
            Ok(Claim::Held(v)) => {
                let v: Value = serde_json::from_slice(&v).unwrap_or(Value::Null);
                Verdict::Elsewhere {
                    endpoint: v["endpoint"].as_str().unwrap_or("").to_string(),
                    store: v["store"].as_str().unwrap_or("").to_string(),
                    torchft: v["torchft"].as_str().unwrap_or("").to_string(),
                    server: v["server"].as_str().unwrap_or("?").to_string(),
                }
            }
            Err(e) => {
                self.note_outage(&e);
                Verdict::Unknown(e.to_string())
            }
        }
    }

    fn note_outage(&self, e: &StorageError) {
        if matches!(e, StorageError::Unreachable { .. }) {
            let mut s = self.lock();
            if s.degraded.is_none() && s.confirmed.elapsed() > self.ttl {
                tracing::warn!(error = %e,
                    "backend unreachable: running jobs go on here, new jobs wait (degraded)");
                s.degraded = Some(e.to_string());
            }
        }
    }

    /// This server's part of the status page and `/healthz`.
    pub(crate) fn status(&self) -> Value {
        let s = self.lock();
        json!({
            "backend": self.storage.describe(),
            "server": self.server,
            "endpoint": self.endpoint,
            "lease": s.lease,
            "owned_jobs": s.mine.iter().collect::<Vec<_>>(),
            "tcpstore_owner": s.store,
            "lighthouse_owner": s.lighthouse,
            "degraded": s.degraded,
        })
    }

    /// Keeps the lease alive and tells the storage what the machine did, until `stop`.
    pub(crate) async fn run(
        self: Arc<Self>,
        core: Arc<RdzvCore>,
        mut notes: mpsc::UnboundedReceiver<Note>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(self.ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => self.keep_alive(&core).await,
                note = notes.recv() => match note {
                    Some(n) => self.apply(n).await,
                    None => break,
                },
            }
        }
        // A clean stop hands the jobs on at once instead of after the lease's time to live.
        let lease = self.lock().lease;
        let _ = self.storage.revoke(lease).await;
    }

    async fn apply(&self, note: Note) {
        let r = match note {
            Note::Round { job, round, world } => {
                let record = json!({"round": round, "world": world, "server": self.server,
                    "endpoint": self.endpoint});
                let bytes = serde_json::to_vec(&record).expect("plain JSON");
                self.storage.put(&self.round_key(&job), &bytes).await
            }
            Note::Forgotten { job } => {
                let was_mine = self.lock().mine.remove(&job);
                if was_mine {
                    let r = self
                        .storage
                        .delete_if(&self.owner_key(&job), &self.value)
                        .await;
                    match r {
                        Ok(true) => self.storage.delete(&self.round_key(&job)).await,
                        Ok(false) => Ok(()),
                        Err(e) => Err(e),
                    }
                } else {
                    Ok(())
                }
            }
        };
        if let Err(e) = r {
            tracing::warn!(error = %e, "backend write failed (the job goes on)");
            self.note_outage(&e);
        }
    }

    async fn keep_alive(&self, core: &RdzvCore) {
        let lease = self.lock().lease;
        match self.storage.keep_alive(lease).await {
            Ok(Some(_)) => {
                let mut s = self.lock();
                s.confirmed = Instant::now();
                if s.degraded.take().is_some() {
                    tracing::info!("backend answers again; no longer degraded");
                }
            }
            Ok(None) => self.renew(core).await,
            Err(e) => self.note_outage(&e),
        }
    }

    /// The lease is gone: take a new one, claim the jobs again, hand off those another server
    /// took meanwhile.
    async fn renew(&self, core: &RdzvCore) {
        let lease = match self.storage.grant(self.ttl).await {
            Ok(l) => l,
            Err(e) => return self.note_outage(&e),
        };
        let (jobs, store, lighthouse) = {
            let mut s = self.lock();
            s.lease = lease;
            s.confirmed = Instant::now();
            s.degraded = None;
            let store = std::mem::take(&mut s.store);
            let lighthouse = std::mem::take(&mut s.lighthouse);
            (
                std::mem::take(&mut s.mine).into_iter().collect::<Vec<_>>(),
                store,
                lighthouse,
            )
        };
        if lighthouse {
            // Two Lighthouses must never issue quorums for one job: hand its replicas on.
            match self.claim_lighthouse().await {
                Verdict::Mine => {}
                Verdict::Elsewhere { server, .. } => {
                    tracing::warn!(%server, "another server serves the Lighthouse door now; \
                        closing this server's torchft connections");
                    self.lighthouse_lost.send_modify(|n| *n += 1);
                }
                // Still ours as far as anyone can tell: claim again next time.
                Verdict::Unknown(_) => self.lock().lighthouse = true,
            }
        }
        if store {
            // Its connections stay here; new ones go wherever the door is now.
            if let Verdict::Elsewhere { server, .. } = self.claim_store().await {
                tracing::warn!(%server, "another server serves the TCPStore door now; \
                    new TCPStore connections are relayed there");
            }
        }
        tracing::warn!(
            lease,
            jobs = jobs.len(),
            "ownership lease expired; claiming this server's jobs again"
        );
        for job in jobs {
            match self.claim(&job).await {
                Verdict::Mine => {}
                Verdict::Elsewhere {
                    endpoint, server, ..
                } => {
                    tracing::warn!(%job, %server, %endpoint,
                        "another server owns the job now; handing its members over");
                    core.hand_off(&job, Some(&endpoint));
                }
                Verdict::Unknown(why) => {
                    // Still ours as far as anyone can tell: keep it, claim again next time.
                    tracing::warn!(%job, %why, "could not claim the job again yet");
                    self.lock().mine.insert(job);
                }
            }
        }
    }
}

/// A job name as one key segment (`/` and `%` escaped).
fn escape(job: &str) -> String {
    job.replace('%', "%25").replace('/', "%2F")
}

impl Claims for Owners {
    fn claim_job<'a>(
        &'a self,
        job: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Verdict> + Send + 'a>> {
        Box::pin(self.claim(job))
    }
}

#[cfg(test)]
mod sim;
