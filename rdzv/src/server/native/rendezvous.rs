//! The native door's core: the rendezvous machine and the native connections' outboxes,
//! behind the server's one [`Driver`]. Like `core` for the store: every action is routed while
//! the lock is held, so each connection receives its messages in the machine's order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dt_rdzv_proto::native::hang::{HangOptions, HangReport, diagnose};
use dt_rdzv_proto::native::{JobStatus, ServerMsg};
use dt_rdzv_proto::rendezvous::{
    Action, ConnId, Event, Input, MachineConfig, Refusal, RendezvousMachine, RendezvousStats, Scope,
};
use tokio::sync::{mpsc, watch};

use super::journal::{Journal, now_ms as unix_ms};
use super::memory::NativeMemory;
use super::outbox::{NativeOut, Outbox};
use super::timeline::{self, Timelines};
use crate::server::driver::{Driven, Driver, Route};

/// A job's status and what the journal knows of its missing members.
pub(crate) struct JobView {
    /// The machine's status of the job.
    pub status: JobStatus,
    /// Each missing member: when it was lost or left (Unix ms) and how, if the journal knows.
    pub gone: Vec<(String, Option<(u64, String)>)>,
}

/// The machine and where its actions go.
pub(crate) struct RdzvCore {
    driver: Driver<RendezvousMachine, Routes>,
    /// Each job's recent history, sampled by [`RdzvCore::run_timeline`].
    timelines: Mutex<Timelines>,
    /// What the door holds against the server's memory budget.
    memory: Arc<NativeMemory>,
}

/// Where the machine's actions go.
#[derive(Default)]
struct Routes {
    outboxes: HashMap<ConnId, Outbox>,
    /// Recent events, for the status page.
    journal: Journal,
    /// Where rounds and forgotten jobs are told when jobs are shared (`--backend`).
    notes: Option<mpsc::UnboundedSender<Note>>,
}

impl RdzvCore {
    pub(crate) fn new(config: MachineConfig, memory: Arc<NativeMemory>) -> Self {
        Self {
            driver: Driver::new(RendezvousMachine::new(config), Routes::default()),
            timelines: Mutex::default(),
            memory,
        }
    }

    /// What the door holds against the server's memory budget.
    pub(crate) fn memory(&self) -> &Arc<NativeMemory> {
        &self.memory
    }

    /// Tells `notes` of every completed round and forgotten job from now on.
    pub(crate) fn set_notes(&self, notes: mpsc::UnboundedSender<Note>) {
        self.driver.with(|g| g.routes.notes = Some(notes));
    }

    /// Lets go of `job` (another server owns it now): its members' connections close, with a
    /// redirect to `owner` when it is known, so that they resume their round there.
    pub(crate) fn hand_off(&self, job: &str, owner: Option<&str>) {
        let why = match owner {
            Some(e) => format!("job {job:?} is owned by the server at {e} now"),
            None => format!("job {job:?} is owned by another server now"),
        };
        self.driver.with(|g| {
            for c in g.core.release(job) {
                if let Some(tx) = g.routes.outboxes.remove(&c) {
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
        });
    }

    pub(crate) fn connect(&self, conn: ConnId, observed_ip: String, outbox: Outbox) {
        self.driver.with(|g| {
            g.routes.outboxes.insert(conn, outbox);
            g.handle(Instant::now(), Input::Connected { conn, observed_ip });
        });
    }

    /// A rank's stream on the node agent's connection whose hello stream is `carrier`.
    pub(crate) fn stream(
        &self,
        conn: ConnId,
        carrier: ConnId,
        observed_ip: String,
        outbox: Outbox,
    ) {
        self.driver.with(|g| {
            g.routes.outboxes.insert(conn, outbox);
            let input = Input::Stream {
                conn,
                carrier,
                observed_ip,
            };
            g.handle(Instant::now(), input);
        });
    }

    pub(crate) fn input(&self, input: Input) {
        let closed = match &input {
            Input::Closed { conn, .. } => Some(*conn),
            _ => None,
        };
        // A join may set an earlier deadline (a last call): the driver lets the timer know.
        self.driver.with(|g| {
            g.core.set_config_room(self.memory.config_room());
            g.core.handle(Instant::now(), input);
            self.memory.set_config(g.core.config_bytes());
            if let Some(c) = closed {
                g.routes.outboxes.remove(&c);
            }
        });
    }

    pub(crate) fn authorized(&self, scope: Scope<'_>, token: &str) -> bool {
        self.driver.read(|g| g.core.authorized(scope, token))
    }

    pub(crate) fn stats(&self) -> (RendezvousStats, usize, usize, usize) {
        self.driver.read(|g| {
            let (jobs, members) = g.core.sizes();
            (
                g.core.stats().clone(),
                jobs,
                members,
                g.routes.outboxes.len(),
            )
        })
    }

    /// Journal entries after `since` (of `job`, or every job) as JSON, and the next `since`.
    pub(crate) fn events(&self, since: u64, job: Option<&str>) -> (Vec<serde_json::Value>, u64) {
        self.driver.read(|g| {
            let (list, next) = g.routes.journal.since(since, job);
            (list.into_iter().map(|e| e.json()).collect(), next)
        })
    }

    /// Why `job` is stuck, if it is (`/v1/jobs/{job}/hang`): its members' last summaries and
    /// heartbeats, diagnosed. Members silent for three heartbeat intervals count as silent.
    pub(crate) fn hang(&self, job: &str) -> Result<HangReport, Refusal> {
        let (status, beat) = self.driver.read(|g| {
            let beat = g.core.config().heartbeat_interval;
            (g.core.status(Instant::now(), Some(job)), beat)
        });
        let opts = HangOptions {
            silent_after_ms: (beat.as_millis() as u64).saturating_mul(3).max(1),
            ..HangOptions::default()
        };
        Ok(diagnose(&status?[0], &opts))
    }

    /// The status of `job` (or every job), each missing member with the time it was lost or
    /// left (Unix ms) and how, when the journal still knows (`http/json.rs` writes it out).
    pub(crate) fn status_views(&self, job: Option<&str>) -> Result<Vec<JobView>, Refusal> {
        self.driver.read(|g| status_gone(g, job))
    }

    /// `job`'s timeline (`/v1/jobs/{job}/timeline`): its ranks' progress over the last
    /// minutes and the journal's marks in that window.
    pub(crate) fn timeline(
        &self,
        job: &str,
        since_ms: Option<u64>,
    ) -> Result<serde_json::Value, Refusal> {
        let now = unix_ms();
        let window = (timeline::INTERVAL * timeline::SAMPLES as u32).as_millis() as u64;
        // Marks after `since_ms` only, as the samples (the page keeps the earlier ones).
        let from = since_ms.map_or(0, |t| t.saturating_add(1));
        let marks = self.driver.read(|g| {
            g.core.status(Instant::now(), Some(job))?;
            Ok::<_, Refusal>(
                g.routes
                    .journal
                    .recent(
                        job,
                        now.saturating_sub(window).max(from),
                        timeline::MAX_MARKS,
                    )
                    .into_iter()
                    .map(|e| e.json())
                    .collect(),
            )
        })?;
        let t = self.timelines.lock().unwrap_or_else(|p| p.into_inner());
        Ok(t.json(job, now, marks, since_ms))
    }

    /// Samples every job's progress into the timelines once a [`timeline::INTERVAL`] until
    /// `stop`.
    pub(crate) async fn run_timeline(&self, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(timeline::INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tick.tick() => {}
            }
            // Under the read lock: the summaries are borrowed, not copied.
            self.driver.read(|g| {
                let mut t = self.timelines.lock().unwrap_or_else(|p| p.into_inner());
                t.sample(unix_ms(), &g.core.progress());
            });
        }
    }

    /// Runs the machine's deadlines (heartbeats, last calls, join timeouts, TTLs) until `stop`.
    pub(crate) async fn run_timers(&self, stop: watch::Receiver<bool>) {
        self.driver.run_timers(stop).await;
    }
}

impl Route<Action> for Routes {
    fn route(&mut self, action: Action) {
        match action {
            Action::Send { conn, msg } => {
                if let Some(tx) = self.outboxes.get(&conn)
                    && let Err(refused) = tx.send(NativeOut::Msg(Box::new(msg)))
                {
                    // The member does not read: close it rather than hold more for it.
                    let why = format!("the member reads too slowly: {refused}");
                    crate::server::ratelog::limited!(warn, "native connection closed: not reading", conn, %why);
                    if let Some(tx) = self.outboxes.remove(&conn) {
                        tx.kill(why);
                    }
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

/// The status of `job` (or every job), each missing member with the time it was lost or left
/// (Unix ms) and how, when the journal still knows.
fn status_gone(
    g: &Driven<RendezvousMachine, Routes>,
    job: Option<&str>,
) -> Result<Vec<JobView>, Refusal> {
    let list = g.core.status(Instant::now(), job)?;
    Ok(list
        .into_iter()
        .map(|status| {
            let gone = status
                .missing
                .iter()
                .map(|m| {
                    let seen = g.routes.journal.gone(&status.job, m);
                    (m.clone(), seen.map(|(at, why)| (at, why.to_string())))
                })
                .collect();
            JobView { status, gone }
        })
        .collect())
}

/// Logs an event; job, member and node names in escaped (Debug) form, so that a newline in
/// one cannot forge a log line.
fn log(e: Event) {
    match e {
        Event::JobCreated { job } => tracing::info!(?job, "job created"),
        Event::Joined {
            job,
            member,
            node,
            spare,
        } => tracing::debug!(?job, ?member, ?node, spare, "member joined"),
        Event::RoundComplete {
            job,
            round,
            world,
            cause,
            formed_in,
        } => tracing::info!(?job, round, world, %cause, formed_in = ?formed_in, "round complete"),
        Event::RoundEnded { job, round, cause } => {
            tracing::info!(?job, round, %cause, "round ended")
        }
        Event::MemberLost {
            job,
            member,
            rank,
            why,
        } => tracing::warn!(?job, ?member, ?rank, ?why, "member lost"),
        Event::MemberLeft { job, member } => tracing::info!(?job, ?member, "member left"),
        Event::NodeAgent { job, node, conn } => {
            tracing::info!(?job, ?node, conn, "node agent connected")
        }
        Event::NodeLost {
            job,
            node,
            ranks,
            why,
        } => tracing::warn!(?job, ?node, ranks, ?why, "node lost with its ranks"),
        Event::JobEnded { job, end } => tracing::info!(?job, %end, "job ended"),
        Event::JobForgotten { job } => tracing::debug!(?job, "job forgotten"),
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
                    tracing::info!(
                        ?job,
                        round,
                        ?by,
                        rank,
                        ?member,
                        ?evidence,
                        verdict,
                        "data-plane report"
                    )
                }
                "confirmed" => {
                    tracing::warn!(
                        ?job,
                        round,
                        ?by,
                        rank,
                        ?member,
                        ?evidence,
                        verdict,
                        "data-plane report confirmed: member lost"
                    )
                }
                _ => tracing::debug!(
                    ?job,
                    round,
                    ?by,
                    rank,
                    ?member,
                    verdict,
                    "data-plane report"
                ),
            }
        }
        Event::Refused { conn, refusal } => {
            // Escaped and clipped (a refusal may quote what a stranger sent), and at a
            // limited rate (a stranger can draw one per connection).
            let mut text = format!("{refusal}").escape_debug().to_string();
            if text.len() > 512 {
                let mut end = 512;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push_str("...");
            }
            crate::server::ratelog::limited!(warn, "request refused", conn, code = ?refusal.code(), refusal = %text)
        }
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
