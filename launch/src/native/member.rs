//! One member of a native job, for callers with no Python (the C ABI) and for Python's
//! `dtcomm.init()`: connect, join with the data listener's address and host record, wait for
//! a round, build its communicator from the welcome (no store), and fence it when the server
//! ends the round (the communicator's calls then fail with `RoundEnded`). Feature `native`.
//!
//! What it knows of its rounds is its session's: the client's member machine reads each
//! message the server pushes once and keeps the rounds ([`Rounds`]); this member moves to the
//! next round there and waits on the messages only to know when to look again.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dt_rdzv::native::{
    BlockingNativeClient, ClientConfig, MemberHandle, Membership, NativeError, ProgressSource,
    Trust,
};
use dt_rdzv_proto::native::member::{Rounds, Stop};
use dt_rdzv_proto::native::progress::from_record;
use dt_rdzv_proto::native::{JobSpec, LateJoin, MAX_RELAYED, Peer, Relayed, Role, Welcome};

use super::super::{join_host_port, split_host_port};
use super::settings::NativeSettings;
use dtcomm::CommError;
use dtcomm::Communicator;
use dtcomm::{DataListener, RoundPeers, round_secret};

/// Why joining a native round failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The rendezvous: connecting, joining, a round that did not form in time, the job's end.
    #[error("{who}: {source}")]
    Rdzv {
        /// The job and member.
        who: String,
        /// What the client said.
        source: NativeError,
    },
    /// The round this member was setting up ended before it was ready (take the next one).
    #[error("{0}")]
    RoundChanged(String),
    /// Nothing came in time (a round that did not form, a value rank 0 did not publish).
    #[error("{0}")]
    Timeout(String),
    /// This thread's interrupt check asked the wait to stop (Ctrl-C in Python).
    #[error("{0}")]
    Interrupted(String),
    /// The job ended, or the server removed this member: it takes no further part.
    #[error("{who}: {}", stop_text(.stop))]
    Stopped {
        /// The job and member.
        who: String,
        /// What the server said.
        stop: Stop,
    },
    /// The round's communicator.
    #[error(transparent)]
    Comm(#[from] CommError),
}

fn stop_text(s: &Stop) -> String {
    match s {
        Stop::JobEnded { job, why, .. } => format!("job {job:?} ended: {why}"),
        Stop::Removed { job, round, why } => format!(
            "this member was removed from round {round} of job {job:?} by dt-rdzv (the others \
             went on without it): {why}"
        ),
    }
}

/// A member of a native job and the round it is in.
pub struct Member {
    settings: NativeSettings,
    client: BlockingNativeClient,
    /// This member's data listener (bound before joining; serves every round), when it
    /// builds communicators (a launcher's agent does not).
    listener: Option<DataListener>,
    /// Its rank and round once welcomed: what its heartbeats' summaries say of it.
    place: Place,
}

/// A member's rank and round, shared with its heartbeats.
type Place = Arc<Mutex<Option<(u32, u64)>>>;

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Member({})", self.who())
    }
}

fn secs(s: f64) -> Duration {
    dtcomm::secs::saturating(s)
}

impl Member {
    /// Connects to the settings' server and joins its job, advertising `listener`'s address
    /// and host record (the round may still be forming: see [`Member::next_welcome`]).
    pub fn join(
        settings: NativeSettings,
        listener: Option<DataListener>,
    ) -> Result<Member, JoinError> {
        let who = format!(
            "job {:?} member {:?}",
            settings.job.value, settings.member.value
        );
        let rdzv = |source| JoinError::Rdzv {
            who: who.clone(),
            source,
        };
        let trust = match (&settings.fingerprint.value, &settings.cacert.value) {
            (Some(f), _) => Trust::Fingerprint(f.clone()),
            (None, Some(c)) => Trust::CaFile(c.into()),
            (None, None) => {
                return Err(rdzv(NativeError::Config(
                    "no fingerprint and no CA certificate".into(),
                )));
            }
        };
        let mut cfg = ClientConfig::new(
            settings.endpoint.value.clone(),
            settings.token.value.clone(),
            trust,
        );
        cfg.server_name = settings.server_name.clone();
        cfg.reconnect = (settings.reconnect.value > 0.0).then(|| secs(settings.reconnect.value));
        cfg.affinity = Some(settings.job.value.clone());
        // A member that builds communicators tells the server what its calls are doing on
        // every heartbeat (`dt-rdzv status --hang`); a launcher's agent makes no calls.
        let place: Place = Arc::default();
        if listener.is_some() && dtcomm::flight::enabled() {
            let p = place.clone();
            cfg.progress = Some(ProgressSource::new(move || {
                let (rank, round) = (*p.lock().unwrap_or_else(|e| e.into_inner()))?;
                Some(dtcomm::flight::summary(rank, round))
            }));
        }
        // Ctrl-C is heard within 100 ms while the connection is made, too.
        let stop = || match dtcomm::interrupt::requested() {
            Some(why) => Err(JoinError::Interrupted(format!(
                "{who}: interrupted while connecting to dt-rdzv: {why}"
            ))),
            None => Ok(()),
        };
        let mut client = BlockingNativeClient::connect_until(&cfg, stop)?.map_err(rdzv)?;
        // A peer's call timed out and it asks every rank to dump (`TORCH_FR_DUMP_ON_TIMEOUT`):
        // this rank does, on the session task, whether or not it is in a call.
        if listener.is_some() {
            let p = place.clone();
            client.handle().on_dump(move |round, asker, why| {
                let here = *p.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((rank, r)) = here
                    && r == round
                {
                    dtcomm::flight::on_peer_timeout(rank, Some(asker), why);
                }
            });
        }
        let (min_members, max_members) = settings.members.value;
        let spec = JobSpec {
            min_members,
            max_members,
            max_spares: 1024,
            last_call_ms: (settings.last_call.value * 1000.0) as u64,
            join_timeout_ms: (settings.join_timeout.value * 1000.0) as u64,
            max_rounds: 0,
            max_restarts: settings.max_restarts.value,
            late_join: LateJoin::Immediate,
            ephemeral: settings.ephemeral.value,
            ttl_ms: None,
            full_peer_table_max: 64,
        };
        client
            .join(Membership {
                job: settings.job.value.clone(),
                member: settings.member.value.clone(),
                node: settings.node.value.clone(),
                addrs: listener.iter().map(|l| l.addr().to_string()).collect(),
                host: listener
                    .as_ref()
                    .map(|l| l.host_record().to_vec())
                    .unwrap_or_default(),
                role: if settings.main.value {
                    Role::Main
                } else {
                    Role::Worker
                },
                spec,
            })
            .map_err(rdzv)?;
        Ok(Member {
            settings,
            client,
            listener,
            place,
        })
    }

    /// The job and member (and round and rank, once in one), for errors.
    pub fn who(&self) -> String {
        let r = self
            .rounds(|r| r.welcome().map(|w| (w.round, w.rank)))
            .map(|(round, rank)| format!(" round {round} rank {rank}"))
            .unwrap_or_default();
        format!(
            "job {:?} member {:?}{r}",
            self.settings.job.value, self.settings.member.value
        )
    }

    /// The settings it joined with.
    pub fn settings(&self) -> &NativeSettings {
        &self.settings
    }

    /// What this member knows of its rounds (welcome, why it ended, waiting joiners, the
    /// job's end), as its session read the server's messages: `f` runs with them locked (keep
    /// it short: the session waits).
    pub fn rounds<T>(&self, f: impl FnOnce(&Rounds) -> T) -> T {
        self.client.rounds(|r| f(r))
    }

    /// The current round's welcome.
    pub fn welcome(&self) -> Option<Welcome> {
        self.rounds(|r| r.welcome().cloned())
    }

    /// The current round's heartbeat timeout in seconds (2 before the first round).
    fn heartbeat_timeout(&self) -> f64 {
        self.rounds(|r| r.welcome().map(|w| w.heartbeat_timeout_ms))
            .map_or(2.0, |ms| ms as f64 / 1000.0)
    }

    /// What the heartbeats' summaries say of this member: the current round's rank and round.
    fn sync_place(&self) {
        *self.place.lock().unwrap_or_else(|e| e.into_inner()) =
            self.rounds(|r| r.welcome().map(|w| (w.rank, w.round)));
    }

    /// What the session read that is this member's business now: refusals are logged; the
    /// job's end or this member's removal is an error (every time, once the server said so).
    fn check(&self) -> Result<(), JoinError> {
        let (refused, stop) = self
            .client
            .rounds(|r| (r.take_refused(), r.stop().cloned()));
        for refused in refused {
            tracing::warn!("dtcomm: {}: {refused}", self.who());
        }
        match stop {
            Some(stop) => Err(JoinError::Stopped {
                who: self.who(),
                stop,
            }),
            None => Ok(()),
        }
    }

    /// The client's error, unless the server ended the job (or removed this member) first.
    fn failed(&self, e: NativeError) -> JoinError {
        self.check().err().unwrap_or_else(|| self.rdzv_err(e))
    }

    /// Waits at most `step` for the session to hand on a message (the rounds are up to date
    /// with it by then); `Ok` as well when none came.
    fn wait(&mut self, step: Duration) -> Result<(), JoinError> {
        match self.client.next_message(step) {
            Ok(_) | Err(NativeError::Timeout { .. }) => Ok(()),
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Takes the messages already received; `true` when the current round is over (a member
    /// was lost, left or joined). `Err` when the job ended or this member was removed.
    pub fn poll(&mut self) -> Result<bool, JoinError> {
        while let Some(m) = self.client.try_message() {
            if let Err(e) = m {
                return Err(self.failed(e));
            }
        }
        self.check()?;
        Ok(self.rounds(|r| r.ended().is_some()))
    }

    /// Waits for the next round (the first one, or one after the current), at most
    /// `timeout` (default: the join timeout plus twice the server's heartbeat timeout and 5 s).
    /// With `ask_after`, a member whose round the server has not ended by then asks for a new
    /// one (its group failed without a membership change).
    pub fn next_welcome(
        &mut self,
        timeout: Option<Duration>,
        ask_after: Option<Duration>,
    ) -> Result<Welcome, JoinError> {
        let hb = self.heartbeat_timeout();
        let limit =
            timeout.unwrap_or_else(|| secs(self.settings.join_timeout.value + 2.0 * hb + 5.0));
        let start = Instant::now();
        let mut asked = false;
        loop {
            if let Some(w) = self.client.rounds(|r| r.advance().cloned()) {
                self.sync_place();
                return Ok(w);
            }
            self.check()?;
            self.interrupted("waiting for a round")?;
            let waited = start.elapsed();
            if waited >= limit {
                return Err(JoinError::Timeout(format!(
                    "{}: no new round within {:.0}s ({}); see `dt-rdzv status {}` for who is \
                     missing",
                    self.who(),
                    limit.as_secs_f64(),
                    self.rounds(|r| r.ended().unwrap_or("the round did not end").to_owned()),
                    self.settings.job.value
                )));
            }
            if let Some(after) = ask_after
                && !asked
                && self.rounds(|r| r.ended().is_none())
                && waited >= after
            {
                self.client.next_round().map_err(|e| self.rdzv_err(e))?;
                asked = true;
            }
            let step =
                (limit - waited).clamp(Duration::from_millis(10), Duration::from_millis(500));
            self.wait(step)?;
        }
    }

    /// Publishes `value` for the current round under configuration entry `key` (rank 0; the
    /// other members read it with [`Member::round_value`]).
    pub fn publish_round_value(&mut self, key: &str, value: &str) -> Result<(), JoinError> {
        let round = self
            .rounds(|r| r.welcome().map(|w| w.round))
            .expect("publish_round_value() after next_welcome()");
        self.client
            .publish(key, format!("{round} {value}").into_bytes())
            .map_err(|e| self.rdzv_err(e))
    }

    /// Relays to the server the summaries of this member's workers' calls, as they wrote them
    /// in their store (`records`: each worker's record, `dtcomm/progress/<rank>`: the writer's
    /// Unix ms and the summary), so that `dt-rdzv status --hang` and `/v1/jobs/JOB/hang` say
    /// why the workers hang (a launcher's agent, whose workers are not members). Records that
    /// do not decode are left out; the age of each is taken against this host's clock.
    pub fn relay_records(&mut self, world: u32, records: &[Vec<u8>]) -> Result<usize, JoinError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let workers: Vec<Relayed> = records
            .iter()
            .filter_map(|r| from_record(r).ok())
            .map(|(at, p)| Relayed {
                progress: p.bounded(),
                age_ms: now.saturating_sub(at),
            })
            .take(MAX_RELAYED)
            .collect();
        let n = workers.len();
        self.client
            .relay(world, workers)
            .map_err(|e| self.rdzv_err(e))?;
        Ok(n)
    }

    /// What rank 0 published for the current round under `key`, waiting at most `timeout`
    /// (`what` names it in the timeout's message). [`JoinError::RoundChanged`] when the
    /// round ends first.
    pub fn round_value(
        &mut self,
        key: &str,
        timeout: Duration,
        what: &str,
    ) -> Result<String, JoinError> {
        let round = self
            .rounds(|r| r.welcome().map(|w| w.round))
            .expect("round_value() after next_welcome()");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.rounds(|r| r.round_value(key)) {
                return Ok(v);
            }
            self.check()?;
            self.round_unchanged()?;
            self.interrupted(what)?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(JoinError::Timeout(format!(
                    "{}: rank 0 did not publish round {round}'s {what} within {:.0}s",
                    self.who(),
                    timeout.as_secs_f64()
                )));
            }
            self.wait(left.min(Duration::from_millis(500)))?;
        }
    }

    /// [`JoinError::RoundChanged`] when the current round is over or a later one formed.
    fn round_unchanged(&self) -> Result<(), JoinError> {
        match self.rounds(|r| r.changed().then(|| r.ended().map(str::to_owned))) {
            None => Ok(()),
            Some(ended) => Err(JoinError::RoundChanged(format!(
                "{}: {}",
                self.who(),
                ended.as_deref().unwrap_or("a new round formed")
            ))),
        }
    }

    /// Every wait here looks at this thread's interrupt check (`dtcomm::interrupt`) between
    /// its slices of at most 500 ms, so Ctrl-C in Python stops it.
    fn interrupted(&self, waiting_for: &str) -> Result<(), JoinError> {
        match dtcomm::interrupt::requested() {
            Some(why) => Err(JoinError::Interrupted(format!(
                "{}: interrupted while {waiting_for}: {why}",
                self.who()
            ))),
            None => Ok(()),
        }
    }

    fn rdzv_err(&self, source: NativeError) -> JoinError {
        JoinError::Rdzv {
            who: self.who(),
            source,
        }
    }

    /// Where every rank of the round listens, asking the server for lower ranks a partial
    /// peer table left out.
    fn peer_addrs(&mut self, w: &Welcome) -> Result<Vec<Option<SocketAddr>>, JoinError> {
        let world = w.world as usize;
        let mut peers: Vec<Peer> = w.peers.to_vec();
        if !w.all_peers {
            // Every lower rank this rank connects to, in as many lookups as the server's
            // per-request bound takes (one lookup of more than 2,048 ranks was refused: no
            // round past about 2,100 ranks could form).
            let known: std::collections::HashSet<u32> = peers.iter().map(|p| p.rank).collect();
            let missing: Vec<u32> = (0..w.rank).filter(|r| !known.contains(r)).collect();
            if !missing.is_empty() {
                let more = self
                    .client
                    .lookup_all(&missing)
                    .map_err(|e| self.rdzv_err(e))?;
                peers.extend(more);
            }
        }
        let mut out = vec![None; world];
        for p in &peers {
            let (Some(addr), true) = (p.addrs.first(), (p.rank as usize) < world) else {
                continue;
            };
            let Ok((mut host, port)) = split_host_port(addr, 0) else {
                continue;
            };
            if (host == "0.0.0.0" || host == "::") && !p.observed_ip.is_empty() {
                host = p.observed_ip.trim_start_matches("::ffff:").to_owned();
            }
            out[p.rank as usize] = join_host_port(&host, port).parse().ok();
        }
        Ok(out)
    }

    /// Every rank's host record from a whole peer table (`None` when partial).
    fn peer_hosts(w: &Welcome) -> Option<Vec<Vec<u8>>> {
        if !w.all_peers {
            return None;
        }
        let mut hosts = vec![Vec::new(); w.world as usize];
        for p in w.peers.iter() {
            if let Some(h) = hosts.get_mut(p.rank as usize) {
                h.clone_from(&p.host);
            }
        }
        hosts.iter().all(|h| !h.is_empty()).then_some(hosts)
    }

    /// The current round's communicator, over the member's listener and the welcome's peer
    /// table, fenced by the round: when the server ends it for a lost or removed member, its
    /// calls fail with [`CommError::RoundEnded`] at once.
    pub fn communicator(&mut self) -> Result<Communicator, JoinError> {
        self.round_unchanged()?;
        let w = self.welcome().expect("communicator() after next_welcome()");
        let peers = RoundPeers {
            job: w.job.clone(),
            round: w.round,
            rank: w.rank as usize,
            world: w.world as usize,
            addrs: self.peer_addrs(&w)?,
            hosts: Self::peer_hosts(&w).unwrap_or_default(),
        };
        let secret = round_secret(&self.settings.token.value, &w.job, w.round);
        let listener = self
            .listener
            .as_ref()
            .expect("communicator() of a member joined with a data listener")
            .try_clone()?;
        let comm = Communicator::from_welcome(listener, &peers, &secret)?;
        watch_round(&self.client.handle(), &comm, w.round);
        Ok(comm)
    }

    /// The communicator of the next round, taking later rounds when one ends while it is
    /// being built (a member lost, left or joined during set-up): the one join rule of every
    /// front end (Python's `init()` and elastic reset, the C ABI). A set-up that fails without
    /// the round ending is retried only if the server ends the round within twice its
    /// heartbeat timeout (the failure was a member going away); otherwise its error stands.
    /// `ask_after` is [`Member::next_welcome`]'s. Every step is bounded.
    pub fn connect_round(
        &mut self,
        ask_after: Option<Duration>,
    ) -> Result<Communicator, JoinError> {
        loop {
            self.next_welcome(None, ask_after)?;
            match self.communicator() {
                Ok(c) => return Ok(c),
                Err(JoinError::RoundChanged(why)) => {
                    tracing::info!(who = %self.who(), why, "round changed during set-up; taking the next");
                }
                Err(JoinError::Comm(e)) => {
                    if self.poll()? || self.wait_round_end()? {
                        tracing::info!(who = %self.who(), error = %e, "a member went away during set-up; taking the next round");
                        continue;
                    }
                    return Err(JoinError::Comm(e));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// After a failed set-up: whether the server ends the round within twice its heartbeat
    /// timeout and a second.
    fn wait_round_end(&mut self) -> Result<bool, JoinError> {
        let hb = self.heartbeat_timeout();
        let deadline = dtcomm::secs::deadline(Instant::now(), secs(2.0 * hb + 1.0));
        loop {
            if self.poll()? {
                return Ok(true);
            }
            self.interrupted("waiting for the round to end")?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.wait(left.min(Duration::from_millis(200)))?;
        }
    }

    /// Leaves the job for good (the others get a new round).
    pub fn leave(self) {
        let _ = self.client.leave();
    }

    /// Ends the job for every member (`Finish`); later joins are refused.
    pub fn finish(self) -> Result<(), JoinError> {
        let who = self.who();
        self.client
            .finish()
            .map_err(|source| JoinError::Rdzv { who, source })
    }

    /// Tells the server this member's link to `rank` of `round` broke, and how (`evidence`;
    /// the server probes that member before acting on it).
    pub fn report(&mut self, round: u64, rank: u32, evidence: String) -> Result<(), JoinError> {
        self.client
            .handle()
            .report(round, rank, evidence)
            .map_err(|e| self.rdzv_err(e))
    }

    /// Addresses of some ranks of the current round (from the server).
    pub fn lookup(&mut self, ranks: Vec<u32>) -> Result<Vec<Peer>, JoinError> {
        self.client.lookup(ranks).map_err(|e| self.rdzv_err(e))
    }
}

/// Fences `comm` by round `round` of the member behind `h`: its links report broken peers to
/// the server, and when the server ends the round for a lost or removed member the
/// communicator's calls fail with `RoundEnded` at once. A round that ends only to let members
/// in leaves the communicator working (elastic training moves on at its next commit).
pub fn watch_round(h: &MemberHandle, comm: &Communicator, round: u64) {
    let fence = comm.fence();
    let reporter = h.clone();
    fence.set_reporter(Box::new(move |peer, detail| {
        let _ = reporter.report(round, peer as u32, detail.to_string());
    }));
    let asker = h.clone();
    comm.fence().set_dump_asker(Box::new(move |why| {
        let _ = asker.ask_dump(round, why.to_string());
    }));
    h.on_round_end(round, move |end| {
        if end.lost.is_some() || end.removed {
            fence.end(end.clone());
        }
    });
}
