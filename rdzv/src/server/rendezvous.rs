//! The rendezvous machine and the native connections' outboxes behind one lock, and its timer
//! task. Like `core` for the store: every action is routed while the lock is held, so each
//! connection receives its messages in the machine's order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dt_rdzv_proto::native::ServerMsg;
use dt_rdzv_proto::rendezvous::{
    Action, ConnId, Event, Input, MachineConfig, Refusal, RendezvousMachine, RendezvousStats, Scope,
};
use tokio::sync::{Notify, mpsc, watch};

use super::journal::Journal;

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

pub(crate) struct RdzvCore {
    inner: Mutex<Inner>,
    wake: Notify,
}

struct Inner {
    machine: RendezvousMachine,
    outboxes: HashMap<ConnId, mpsc::UnboundedSender<NativeOut>>,
    /// Recent events, for the status page.
    journal: Journal,
    /// Where rounds and forgotten jobs are told when jobs are shared (`--backend`).
    notes: Option<mpsc::UnboundedSender<Note>>,
}

impl RdzvCore {
    pub(crate) fn new(config: MachineConfig) -> Self {
        Self {
            inner: Mutex::new(Inner {
                machine: RendezvousMachine::new(config),
                outboxes: HashMap::new(),
                journal: Journal::default(),
                notes: None,
            }),
            wake: Notify::new(),
        }
    }

    /// Tells `notes` of every completed round and forgotten job from now on.
    pub(crate) fn set_notes(&self, notes: mpsc::UnboundedSender<Note>) {
        self.lock().notes = Some(notes);
    }

    /// Lets go of `job` (another server owns it now): its members' connections close, with a
    /// redirect to `owner` when it is known, so that they resume their round there.
    pub(crate) fn hand_off(&self, job: &str, owner: Option<&str>) {
        let mut g = self.lock();
        let conns = g.machine.release(job);
        let why = match owner {
            Some(e) => format!("job {job:?} is owned by the server at {e} now"),
            None => format!("job {job:?} is owned by another server now"),
        };
        for c in conns {
            if let Some(tx) = g.outboxes.remove(&c) {
                if let Some(e) = owner {
                    let _ = tx.send(NativeOut::Msg(Box::new(ServerMsg::Redirect {
                        job: job.into(),
                        endpoint: e.into(),
                        why: why.clone(),
                    })));
                }
                let _ = tx.send(NativeOut::GoAway(why.clone()));
            }
        }
        g.route();
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The machine keeps itself consistent at every return; a panic elsewhere must not
        // take the server down.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn connect(
        &self,
        conn: ConnId,
        observed_ip: String,
        outbox: mpsc::UnboundedSender<NativeOut>,
    ) {
        let mut g = self.lock();
        g.outboxes.insert(conn, outbox);
        g.machine
            .handle(Instant::now(), Input::Connected { conn, observed_ip });
        g.route();
    }

    pub(crate) fn input(&self, input: Input) {
        let closed = match &input {
            Input::Closed { conn, .. } => Some(*conn),
            _ => None,
        };
        {
            let mut g = self.lock();
            g.machine.handle(Instant::now(), input);
            if let Some(c) = closed {
                g.outboxes.remove(&c);
            }
            g.route();
        }
        // A join may have set an earlier deadline (a last call): let the timer look again.
        self.wake.notify_one();
    }

    pub(crate) fn authorized(&self, scope: Scope<'_>, token: &str) -> bool {
        self.lock().machine.authorized(scope, token)
    }

    pub(crate) fn stats(&self) -> (RendezvousStats, usize, usize, usize) {
        let g = self.lock();
        let (jobs, members) = g.machine.sizes();
        (g.machine.stats().clone(), jobs, members, g.outboxes.len())
    }

    /// Journal entries after `since` (of `job`, or every job) as JSON, and the next `since`.
    pub(crate) fn events(&self, since: u64, job: Option<&str>) -> (Vec<serde_json::Value>, u64) {
        let g = self.lock();
        let (list, next) = g.journal.since(since, job);
        (list.into_iter().map(|e| e.json()).collect(), next)
    }

    /// The status of `job` (or every job) as JSON, each missing member with the time it was
    /// lost or left (Unix ms) and how, when the journal still knows.
    pub(crate) fn status_json(&self, job: Option<&str>) -> Result<Vec<serde_json::Value>, Refusal> {
        let g = self.lock();
        let list = g.machine.status(Instant::now(), job)?;
        Ok(list
            .iter()
            .map(|j| {
                let mut v = super::json::job_json(j);
                let gone: Vec<_> = j
                    .missing
                    .iter()
                    .map(|m| (m, g.journal.gone(&j.job, m)))
                    .collect();
                let since: serde_json::Map<String, serde_json::Value> = gone
                    .iter()
                    .map(|(m, g)| ((*m).clone(), g.map(|g| g.0).into()))
                    .collect();
                let why: serde_json::Map<String, serde_json::Value> = gone
                    .iter()
                    .map(|(m, g)| ((*m).clone(), g.map(|g| g.1).into()))
                    .collect();
                v["missing_since_ms"] = since.into();
                v["missing_why"] = why.into();
                v
            })
            .collect())
    }

    pub(crate) fn open_connections(&self) -> usize {
        self.lock().outboxes.len()
    }
}

impl Inner {
    fn route(&mut self) {
        while let Some(action) = self.machine.poll_action() {
            match action {
                Action::Send { conn, msg } => {
                    if let Some(tx) = self.outboxes.get(&conn) {
                        let _ = tx.send(NativeOut::Msg(Box::new(msg)));
                    }
                }
                Action::Close { conn, reason } => {
                    if let Some(tx) = self.outboxes.remove(&conn) {
                        let _ = tx.send(NativeOut::Close(reason));
                    }
                }
                Action::Event(e) => {
                    self.journal.record(&e);
                    if let Some(tx) = &self.notes {
                        match &e {
                            Event::RoundComplete {
                                job, round, world, ..
                            } => {
                                let _ = tx.send(Note::Round {
                                    job: job.clone(),
                                    round: *round,
                                    world: *world,
                                });
                            }
                            Event::JobForgotten { job } => {
                                let _ = tx.send(Note::Forgotten { job: job.clone() });
                            }
                            _ => {}
                        }
                    }
                    log(e)
                }
            }
        }
    }
}

fn log(e: Event) {
    match e {
        Event::JobCreated { job } => tracing::info!(%job, "job created"),
        Event::Joined {
            job,
            member,
            node,
            spare,
        } => tracing::debug!(%job, %member, %node, spare, "member joined"),
        Event::RoundComplete {
            job,
            round,
            world,
            cause,
            formed_in,
        } => tracing::info!(%job, round, world, %cause, formed_in = ?formed_in, "round complete"),
        Event::RoundEnded { job, round, cause } => {
            tracing::info!(%job, round, %cause, "round ended")
        }
        Event::MemberLost {
            job,
            member,
            rank,
            why,
        } => tracing::warn!(%job, %member, ?rank, %why, "member lost"),
        Event::MemberLeft { job, member } => tracing::info!(%job, %member, "member left"),
        Event::JobEnded { job, end } => tracing::info!(%job, %end, "job ended"),
        Event::JobForgotten { job } => tracing::debug!(%job, "job forgotten"),
        Event::Reported {
            job,
            round,
            by,
            rank,
            member,
            evidence,
            verdict,
        } => {
            let verdict = verdict.label();
            match verdict {
                "probing" | "dismissed" => {
                    tracing::info!(%job, round, %by, rank, ?member, %evidence, verdict, "data-plane report")
                }
                "confirmed" => {
                    tracing::warn!(%job, round, %by, rank, ?member, %evidence, verdict, "data-plane report confirmed: member lost")
                }
                _ => tracing::debug!(%job, round, %by, rank, ?member, verdict, "data-plane report"),
            }
        }
        Event::Refused { conn, refusal } => {
            tracing::warn!(conn, code = ?refusal.code(), %refusal, "request refused")
        }
    }
}

/// Runs the machine's deadlines (heartbeats, last calls, join timeouts, TTLs) until `stop`.
pub(crate) async fn run_timers(core: Arc<RdzvCore>, mut stop: watch::Receiver<bool>) {
    loop {
        let next = core.lock().machine.poll_timeout();
        let now = Instant::now();
        let sleep = next.map_or(Duration::from_secs(1), |t| {
            t.saturating_duration_since(now).min(Duration::from_secs(1))
        });
        tokio::select! {
            _ = stop.changed() => return,
            _ = core.wake.notified() => continue,
            _ = tokio::time::sleep(sleep) => {}
        }
        let mut g = core.lock();
        g.machine.handle_timeout(Instant::now());
        g.route();
    }
}

/// What a server learns from the machine that the storage must hear of.
#[derive(Debug)]
pub(crate) enum Note {
    /// A round of `job` completed.
    Round { job: String, round: u64, world: u32 },
    /// The machine forgot `job` (ended and retained long enough, idle, or handed off).
    Forgotten { job: String },
}
