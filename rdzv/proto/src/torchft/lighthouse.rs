//! [`Lighthouse`]: torchft's Lighthouse as a sans-IO core, for many jobs at once: inputs
//! ([`Input`]) with the time, outputs ([`Output`]) polled in order, the quorum tick as its
//! one deadline.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use super::config::LighthouseConfig;
use super::error::Refusal;
use super::io::{CallId, Input, Output};
use super::job::Job;
use super::member::{Member, check_job_key, check_replica_id};
use super::status::JobStatus;
use super::watch::Watch;
use crate::sans_io::Core;

/// The Lighthouse: jobs by key, the quorum calls waiting, the tick.
#[derive(Debug)]
pub struct Lighthouse {
    config: LighthouseConfig,
    jobs: HashMap<String, Job>,
    /// Each waiting quorum call's job.
    calls: HashMap<CallId, String>,
    outputs: VecDeque<Output>,
    /// When the next tick runs (`None`: no job).
    next_tick: Option<Instant>,
    /// Jobs created from now on start their ids above this: the config's `min_quorum_id`,
    /// raised by every job forgotten, so that a job that comes back never reuses an id.
    floor: i64,
}

impl Lighthouse {
    /// A Lighthouse with no jobs.
    pub fn new(config: LighthouseConfig) -> Self {
        Self {
            floor: config.min_quorum_id,
            config,
            jobs: HashMap::new(),
            calls: HashMap::new(),
            outputs: VecDeque::new(),
            next_tick: None,
        }
    }

    /// The settings.
    pub fn config(&self) -> &LighthouseConfig {
        &self.config
    }

    /// Makes `job`'s next quorum ids greater than `quorum_id` (a restarted server restoring
    /// what it issued before). Past the job bound, every job created later starts above it.
    pub fn restore_quorum_id(&mut self, now: Instant, job: &str, quorum_id: i64) {
        match self.job_entry(job, now) {
            Ok(j) => j.quorum_id = j.quorum_id.max(quorum_id),
            Err(_) => self.floor = self.floor.max(quorum_id),
        }
        self.arm(now);
    }

    /// Makes every job's next quorum ids, and those of jobs created later, greater than
    /// `quorum_id`: a server taking the Lighthouse over from another restores the highest id
    /// the group issued.
    pub fn restore_floor(&mut self, now: Instant, quorum_id: i64) {
        self.floor = self.floor.max(quorum_id);
        for j in self.jobs.values_mut() {
            j.quorum_id = j.quorum_id.max(quorum_id);
        }
        self.arm(now);
    }

    /// The highest quorum id issued or restored, over every job (what a server taking the
    /// Lighthouse over must start above).
    pub fn highest_quorum_id(&self) -> i64 {
        self.jobs
            .values()
            .map(|j| j.quorum_id)
            .fold(self.floor, i64::max)
    }

    /// A job's last quorum id.
    pub fn quorum_id(&self, job: &str) -> Option<i64> {
        self.jobs.get(job).map(|j| j.quorum_id)
    }

    /// The Manager address of `replica_id` in `job`'s last quorum.
    pub fn member_address(&self, job: &str, replica_id: &str) -> Option<String> {
        let q = self.jobs.get(job)?.prev.as_ref()?;
        q.participants
            .iter()
            .find(|m| m.replica_id == replica_id)
            .map(|m| m.address.clone())
    }

    /// Whether a member of the quorum `replica` (its id, or the part before torchft's
    /// `:uuid`) was configured for (`quorum_id`, when given) stopped heartbeating in `job`.
    pub fn watch(&self, now: Instant, job: &str, replica: &str, quorum_id: Option<i64>) -> Watch {
        match self.jobs.get(job) {
            Some(j) => {
                super::watch::watch(j, now, self.config.heartbeat_timeout, replica, quorum_id)
            }
            None => Watch::Stale,
        }
    }

    /// Every job, sorted by key.
    pub fn status(&self, now: Instant) -> Vec<JobStatus> {
        let mut out: Vec<JobStatus> = self
            .jobs
            .iter()
            .map(|(k, j)| JobStatus::of(k, j, now, &self.config))
            .collect();
        out.sort_by(|a, b| a.job.cmp(&b.job));
        out
    }

    /// Jobs held (idle ones included).
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// Quorum calls waiting.
    pub fn waiting_calls(&self) -> usize {
        self.calls.len()
    }

    /// `job`'s state, made when new: past the job bound the idle job idle longest is
    /// forgotten for it, else it is refused.
    fn job_entry(&mut self, job: &str, now: Instant) -> Result<&mut Job, Refusal> {
        check_job_key(job, &self.config.limits)?;
        if !self.jobs.contains_key(job) {
            if self.jobs.len() >= self.config.limits.max_jobs {
                let oldest = self
                    .jobs
                    .iter()
                    .filter(|(_, j)| j.is_idle())
                    .min_by_key(|(_, j)| j.idle_since.unwrap_or(now))
                    .map(|(k, _)| k.clone());
                let Some(k) = oldest else {
                    return Err(Refusal::ResourceExhausted(format!(
                        "the Lighthouse holds {} jobs, its limit, none of them idle",
                        self.jobs.len()
                    )));
                };
                self.forget(&k);
            }
            self.jobs.insert(job.to_owned(), Job::new(self.floor));
        }
        Ok(self.jobs.get_mut(job).expect("present"))
    }

    fn forget(&mut self, job: &str) {
        if let Some(j) = self.jobs.remove(job) {
            self.floor = self.floor.max(j.quorum_id);
        }
    }

    /// Whether `job` may take one more replica id (`replica_id` may be one it has).
    fn admit(&self, job: &str, replica_id: &str) -> Result<(), Refusal> {
        let Some(j) = self.jobs.get(job) else {
            return Ok(());
        };
        let max = self.config.limits.max_replicas_per_job;
        if !j.heartbeats.contains_key(replica_id) && j.heartbeats.len() >= max {
            return Err(Refusal::ResourceExhausted(format!(
                "job {job:?} tracks {max} replica ids, its limit (ids are forgotten {} ms after their last heartbeat)",
                self.config.forget_after().as_millis()
            )));
        }
        Ok(())
    }

    fn on_quorum(&mut self, now: Instant, call: CallId, job: String, member: Member) {
        let limits = self.config.limits;
        let checked = member
            .check(&limits)
            .and_then(|()| check_job_key(&job, &limits))
            .and_then(|()| self.admit(&job, &member.replica_id))
            .and_then(|()| {
                let max = limits.max_waiting_per_job;
                match self.jobs.get(&job) {
                    Some(j) if j.waiting.len() >= max => Err(Refusal::ResourceExhausted(format!(
                        "job {job:?} has {max} quorum calls waiting, its limit"
                    ))),
                    _ => Ok(()),
                }
            })
            .and_then(|()| self.job_entry(&job, now).map(|_| ()));
        if let Err(e) = checked {
            self.outputs.push_back(Output::Quorum {
                call,
                result: Err(e),
            });
            return;
        }
        let j = self.jobs.get_mut(&job).expect("made above");
        j.join(&member, now);
        j.waiting.insert(call, member);
        self.calls.insert(call, job.clone());
        // As torchft: the rule runs at once on every request, not only on the tick.
        self.tick_job(&job, now);
        self.arm(now);
    }

    fn on_heartbeat(&mut self, now: Instant, call: CallId, job: String, replica_id: String) {
        let result = check_replica_id(&replica_id, &self.config.limits)
            .and_then(|()| self.admit(&job, &replica_id))
            .and_then(|()| self.job_entry(&job, now).map(|j| j.beat(&replica_id, now)));
        self.outputs.push_back(Output::Heartbeat { call, result });
        self.arm(now);
    }

    fn on_cancel(&mut self, call: CallId) {
        if let Some(job) = self.calls.remove(&call)
            && let Some(j) = self.jobs.get_mut(&job)
        {
            j.waiting.remove(&call);
        }
    }

    /// Runs the rule for `job`; a quorum it issues is logged and answered.
    fn tick_job(&mut self, job: &str, now: Instant) {
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        if j.joiners.is_empty() {
            return;
        }
        let Some(issue) = j.tick(now, &self.config) else {
            return;
        };
        self.outputs.push_back(Output::Issued {
            job: job.to_owned(),
            quorum: issue.quorum.clone(),
            reason: issue.reason,
            left: issue.left,
            changed: issue.changed,
        });
        for call in issue.answered {
            self.calls.remove(&call);
            self.outputs.push_back(Output::Quorum {
                call,
                result: Ok(issue.quorum.clone()),
            });
        }
    }

    /// Sets the next tick: one quorum tick from `now` while a job is active, else when the
    /// first idle job is to be forgotten.
    fn arm(&mut self, now: Instant) {
        let active = self.jobs.values().any(|j| !j.is_idle());
        self.next_tick = if active {
            let tick = now + self.config.quorum_tick;
            Some(
                self.next_tick
                    .filter(|&t| t > now)
                    .map_or(tick, |t| t.min(tick)),
            )
        } else {
            self.jobs
                .values()
                .filter_map(|j| j.idle_since)
                .min()
                .map(|t| (t + self.config.limits.idle_job_ttl).max(now))
        };
    }

    /// One tick: every job's old heartbeats forgotten and its rule run; idle jobs past their
    /// time to live forgotten.
    fn tick(&mut self, now: Instant) {
        let keys: Vec<String> = self.jobs.keys().cloned().collect();
        for k in keys {
            let ttl = self.config.limits.idle_job_ttl;
            let j = self.jobs.get_mut(&k).expect("listed");
            j.prune(now, &self.config);
            if j.idle_since
                .is_some_and(|t| now.saturating_duration_since(t) >= ttl)
            {
                self.forget(&k);
                continue;
            }
            self.tick_job(&k, now);
        }
        self.next_tick = None;
        self.arm(now);
    }
}

impl Core for Lighthouse {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Quorum { call, job, member } => self.on_quorum(now, call, job, member),
            Input::Heartbeat {
                call,
                job,
                replica_id,
            } => self.on_heartbeat(now, call, job, replica_id),
            Input::Cancel { call } => self.on_cancel(call),
        }
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.next_tick
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.next_tick.is_some_and(|t| now >= t) {
            self.tick(now);
        }
    }
}
