//! One job: its members, its rounds and its end. Driven by the machine, which routes each
//! connection's requests here and collects the [`Effects`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ConnId;
use super::config::{MachineConfig, defaults};
use super::effects::{Effects, Event};
use super::error::Refusal;
use super::{peers, ranks};
use crate::native::{
    JobEnd, JobSpec, Join, LateJoin, Peer, Progress, Role, RoundCause, ServerMsg, Welcome,
};

/// Where a member stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// In the current round (while forming: carried over from the last one, keeping its rank).
    Active,
    /// Waiting for the next round.
    Waiting,
    /// Beyond `max_members`; takes a slot when one frees up.
    Spare,
}

#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub(crate) id: String,
    pub(crate) conn: ConnId,
    pub(crate) node: String,
    pub(crate) addrs: Vec<String>,
    pub(crate) host: Vec<u8>,
    pub(crate) observed_ip: String,
    pub(crate) role: Role,
    pub(crate) last_seen: Instant,
    pub(crate) arrival: u64,
    /// Rank in the current round, or (while forming) in the last one.
    pub(crate) rank: Option<u32>,
    pub(crate) place: Place,
    /// Its latest summary of its calls and when it arrived (`dt-rdzv status --hang`).
    pub(crate) progress: Option<(Progress, Instant)>,
    /// Its workers' summaries, if it relays them ([`crate::native::ClientMsg::Relay`]): their
    /// world, each summary and its age when it arrived, and when that was.
    pub(crate) relayed: Option<Relay>,
    /// When it was first welcomed into a round. Until a message of it arrives after that, it
    /// has the round's timeout plus one waiting heartbeat interval: it beats at the waiting
    /// rate until the welcome reaches it, so its next beat may be due a whole waiting interval
    /// after the welcome (with the round's timeout from the welcome on, 8,192 members on one
    /// machine, whose welcomes took a while to reach them all, were lost 2 s after forming).
    pub(crate) welcomed_at: Option<Instant>,
}

/// What a member relays of its workers (a launcher's agent whose workers meet through a store).
#[derive(Debug, Clone)]
pub(crate) struct Relay {
    /// The workers' world size.
    pub(crate) world: u32,
    /// Each worker's summary and its age (ms) as relayed.
    pub(crate) workers: Vec<crate::native::Relayed>,
    /// When it arrived.
    pub(crate) at: Instant,
}

impl Member {
    /// How long it may stay silent, and a note for the log when it is not the round's
    /// timeout: the waiting timeout before its first round, the round's plus one waiting
    /// interval from its first welcome until it is heard from (see `welcomed_at`).
    pub(crate) fn liveness_timeout(&self, cfg: &MachineConfig) -> (Duration, &'static str) {
        match (self.rank, self.welcomed_at) {
            (None, _) => (cfg.waiting_heartbeat_timeout, ", before its first round"),
            (Some(_), Some(w)) if self.last_seen <= w => (
                cfg.heartbeat_timeout + cfg.waiting_heartbeat_interval,
                ", silent since its first welcome",
            ),
            (Some(_), _) => (cfg.heartbeat_timeout, ""),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Phase {
    Forming {
        since: Instant,
        last_call_at: Option<Instant>,
        cause: RoundCause,
        /// Forming because a running round ended: complete as soon as `min` are present.
        carried: bool,
    },
    Running {
        pending_since: Option<Instant>,
    },
    Ended {
        end: JobEnd,
        at: Instant,
    },
}

/// How a member goes.
#[derive(Debug, Clone)]
pub(crate) enum Removal {
    Lost(String),
    Left,
}

#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) name: String,
    pub(crate) spec: JobSpec,
    pub(crate) created: Instant,
    pub(crate) members: BTreeMap<String, Member>,
    /// Member ids by rank: the current round, or the last one while forming.
    pub(crate) ranks: Vec<String>,
    pub(crate) round: u64,
    pub(crate) phase: Phase,
    pub(crate) restarts: u32,
    pub(crate) config: super::published::Published,
    /// Members of the last round that are gone (while forming).
    pub(crate) missing: BTreeSet<String>,
    pub(crate) counts: [u32; 3],
    next_arrival: u64,
    pub(crate) empty_since: Option<Instant>,
    /// Rebuilding a round after a server restart (see `resume`).
    pub(crate) adopting: Option<Adopting>,
    /// The round whose members were asked to dump their flight recorders (once per round).
    pub(crate) dumped: Option<u64>,
}

pub(crate) fn ms(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// Checks a spec before a job is created from it.
pub(crate) fn validate(job: &str, spec: &JobSpec) -> Result<(), Refusal> {
    let bad = |why: String| {
        Err(Refusal::InvalidSpec {
            job: job.into(),
            why,
        })
    };
    if spec.min_members == 0 {
        return bad("min_members is 0".into());
    }
    if spec.min_members > spec.max_members {
        return bad(format!(
            "min_members {} > max_members {}",
            spec.min_members, spec.max_members
        ));
    }
    if spec.join_timeout_ms == 0 {
        return bad("join_timeout_ms is 0".into());
    }
    if job.is_empty() || job.len() > 256 {
        return bad(format!("job name of {} bytes (1..=256)", job.len()));
    }
    Ok(())
}

/// Which fields of two specs differ, as `name: ours vs theirs`.
fn spec_diff(a: &JobSpec, b: &JobSpec) -> String {
    let mut d = Vec::new();
    macro_rules! cmp {
        ($($f:ident),*) => {$(
            if a.$f != b.$f {
                d.push(format!("{}: {:?} vs {:?}", stringify!($f), a.$f, b.$f));
            }
        )*};
    }
    cmp!(
        min_members,
        max_members,
        max_spares,
        last_call_ms,
        join_timeout_ms,
        max_rounds,
        max_restarts,
        late_join,
        ephemeral,
        ttl_ms,
        full_peer_table_max
    );
    d.join(", ")
}

impl Job {
    pub(crate) fn new(name: String, spec: JobSpec, now: Instant) -> Self {
        Self {
            name,
            spec,
            created: now,
            members: BTreeMap::new(),
            ranks: Vec::new(),
            round: 0,
            phase: Phase::Forming {
                since: now,
                last_call_at: None,
                cause: RoundCause::First,
                carried: false,
            },
            restarts: 0,
            config: Default::default(),
            missing: BTreeSet::new(),
            counts: [0; 3],
            next_arrival: 0,
            empty_since: Some(now),
            adopting: None,
            dumped: None,
        }
    }

    pub(crate) fn count(&self, p: Place) -> u32 {
        self.counts[p as usize]
    }

    pub(crate) fn candidates(&self) -> u32 {
        self.count(Place::Active) + self.count(Place::Waiting)
    }

    pub(crate) fn set_place(&mut self, id: &str, p: Place) {
        if let Some(m) = self.members.get_mut(id) {
            self.counts[m.place as usize] -= 1;
            self.counts[p as usize] += 1;
            m.place = p;
        }
    }

    pub(crate) fn ended(&self) -> Option<&JobEnd> {
        match &self.phase {
            Phase::Ended { end, .. } => Some(end),
            _ => None,
        }
    }

    pub(crate) fn main_member(&self) -> Option<&Member> {
        self.members.values().find(|m| m.role == Role::Main)
    }

    /// Adds a member (the machine has checked the token and that the connection is new).
    pub(crate) fn join(
        &mut self,
        now: Instant,
        conn: ConnId,
        join: Join,
        observed_ip: String,
        cfg: &MachineConfig,
        fx: &mut Effects,
    ) -> Result<(), Refusal> {
        if let Some(end) = self.ended() {
            return Err(Refusal::JobEnded {
                job: self.name.clone(),
                end: end.to_string(),
            });
        }
        if join.spec != self.spec {
            return Err(Refusal::SpecMismatch {
                job: self.name.clone(),
                member: join.member,
                diff: spec_diff(&self.spec, &join.spec),
            });
        }
        if let Some(m) = self.members.get(&join.member) {
            return Err(Refusal::MemberTaken {
                job: self.name.clone(),
                member: join.member,
                last_seen_ms: ms(now.saturating_duration_since(m.last_seen)),
            });
        }
        if join.role == Role::Main
            && let Some(main) = self.main_member()
        {
            return Err(Refusal::MainTaken {
                job: self.name.clone(),
                main: main.id.clone(),
                member: join.member,
            });
        }
        let resumed = self.resumed_rank(&join);
        let place = if resumed.is_some() {
            Place::Active
        } else if self.candidates() < self.spec.max_members {
            Place::Waiting
        } else if self.count(Place::Spare) < self.spec.max_spares {
            Place::Spare
        } else {
            return Err(Refusal::JobFull {
                job: self.name.clone(),
                member: join.member,
                members: self.candidates(),
                max: self.spec.max_members,
                spares: self.count(Place::Spare),
                max_spares: self.spec.max_spares,
            });
        };
        let id = join.member;
        self.next_arrival += 1;
        self.counts[place as usize] += 1;
        self.members.insert(
            id.clone(),
            Member {
                id: id.clone(),
                conn,
                node: join.node.clone(),
                addrs: join.addrs,
                host: join.host,
                observed_ip,
                role: join.role,
                last_seen: now,
                arrival: self.next_arrival,
                rank: resumed,
                place,
                progress: None,
                relayed: None,
                welcomed_at: None,
            },
        );
        if let Some(rank) = resumed {
            self.seat(&id, rank);
        }
        self.empty_since = None;
        fx.event(Event::Joined {
            job: self.name.clone(),
            member: id,
            node: join.node,
            spare: place == Place::Spare,
        });
        fx.send(
            conn,
            ServerMsg::Joined {
                job: self.name.clone(),
                round: self.round + 1,
                spare: place == Place::Spare,
                // A member that took back its rank is in a round already: the round's rate.
                heartbeat_interval_ms: ms(if resumed.is_some() {
                    cfg.heartbeat_interval
                } else {
                    cfg.waiting_heartbeat_interval
                }),
            },
        );
        match &mut self.phase {
            Phase::Forming { .. } => self.try_complete(now, cfg, fx),
            // The first late joiner: tell the round, and start the batching window.
            Phase::Running { pending_since }
                if place == Place::Waiting && self.counts[Place::Waiting as usize] == 1 =>
            {
                if self.spec.late_join == LateJoin::Immediate {
                    *pending_since = Some(now);
                }
                self.broadcast_active(
                    ServerMsg::Pending {
                        job: self.name.clone(),
                        round: self.round,
                        waiting: 1,
                    },
                    fx,
                );
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn broadcast_active(&self, msg: ServerMsg, fx: &mut Effects) {
        for id in &self.ranks {
            if let Some(m) = self.members.get(id)
                && m.place == Place::Active
            {
                fx.send(m.conn, msg.clone());
            }
        }
    }

    /// In a forming round: complete it if its rules say so now.
    pub(crate) fn try_complete(&mut self, now: Instant, cfg: &MachineConfig, fx: &mut Effects) {
        if self.try_complete_resumed(now, cfg, fx) {
            return;
        }
        let n = self.candidates();
        let Phase::Forming {
            last_call_at,
            carried,
            ..
        } = &mut self.phase
        else {
            return;
        };
        if n >= self.spec.max_members || (n >= self.spec.min_members && *carried) {
            self.complete(now, cfg, fx);
        } else if n >= self.spec.min_members {
            if last_call_at.is_none() {
                *last_call_at = Some(now);
            }
            if self.spec.last_call_ms == 0 {
                self.complete(now, cfg, fx);
            }
        } else {
            *last_call_at = None;
        }
    }

    /// Forms the next round from the active (carried) and waiting members.
    pub(crate) fn complete(&mut self, now: Instant, cfg: &MachineConfig, fx: &mut Effects) {
        let Phase::Forming { since, cause, .. } = &self.phase else {
            return;
        };
        let (since, cause) = (*since, cause.clone());
        if self.spec.max_rounds > 0 && self.round >= u64::from(self.spec.max_rounds) {
            self.end(
                now,
                JobEnd::RoundLimit {
                    rounds: self.spec.max_rounds,
                },
                fx,
            );
            return;
        }
        let mut survivors: Vec<(String, u32)> = Vec::new();
        let mut waiting: Vec<&Member> = Vec::new();
        for m in self.members.values() {
            match (m.place, m.rank) {
                (Place::Active, Some(r)) => survivors.push((m.id.clone(), r)),
                (Place::Active, None) | (Place::Waiting, _) => waiting.push(m),
                (Place::Spare, _) => {}
            }
        }
        survivors.sort_by_key(|s| s.1);
        waiting.sort_by_key(|m| m.arrival);
        let room = (self.spec.max_members as usize).saturating_sub(survivors.len());
        let overflow: Vec<String> = waiting.iter().skip(room).map(|m| m.id.clone()).collect();
        waiting.truncate(room);
        waiting.sort_by(|a, b| {
            (a.role != Role::Main, &a.node, &a.id).cmp(&(b.role != Role::Main, &b.node, &b.id))
        });
        let newcomers: Vec<String> = waiting.iter().map(|m| m.id.clone()).collect();
        let main = self
            .members
            .values()
            .find(|m| m.role == Role::Main && m.place != Place::Spare)
            .filter(|m| !overflow.contains(&m.id))
            .map(|m| m.id.clone());
        // Rank assignment works on indices into one list of names.
        let mut names: Vec<String> = survivors.iter().map(|s| s.0.clone()).collect();
        names.extend(newcomers.iter().cloned());
        let keep: Vec<(usize, u32)> = survivors
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s.1))
            .collect();
        let fresh: Vec<usize> = (survivors.len()..names.len()).collect();
        let main_ix = main.and_then(|id| names.iter().position(|n| *n == id));
        let order = ranks::assign(&keep, &fresh, main_ix);
        self.ranks = order.into_iter().map(|i| names[i].clone()).collect();
        for id in overflow {
            self.set_place(&id, Place::Spare);
        }
        let ranks = std::mem::take(&mut self.ranks);
        for (r, id) in ranks.iter().enumerate() {
            self.set_place(id, Place::Active);
            if let Some(m) = self.members.get_mut(id) {
                if m.rank.is_none() {
                    // Welcomed for the first time: it switches to the round's heartbeat rate
                    // when the welcome arrives, and keeps the waiting timeout from now until
                    // a message of it shows that (see `Member::welcomed_at`).
                    m.last_seen = now;
                    m.welcomed_at = Some(now);
                }
                m.rank = Some(r as u32);
            }
        }
        self.ranks = ranks;
        self.round += 1;
        self.missing.clear();
        self.phase = Phase::Running {
            pending_since: None,
        };
        self.send_welcomes(&cause, cfg, fx);
        fx.event(Event::RoundComplete {
            job: self.name.clone(),
            round: self.round,
            world: self.ranks.len() as u32,
            cause,
            formed_in: now.saturating_duration_since(since),
        });
    }

    pub(crate) fn peer(&self, rank: u32) -> Option<Peer> {
        let m = self.members.get(self.ranks.get(rank as usize)?)?;
        Some(Peer {
            rank,
            member: m.id.clone(),
            node: m.node.clone(),
            addrs: m.addrs.clone(),
            host: m.host.clone(),
            observed_ip: m.observed_ip.clone(),
        })
    }

    pub(crate) fn send_welcomes(&self, cause: &RoundCause, cfg: &MachineConfig, fx: &mut Effects) {
        let world = self.ranks.len() as u32;
        // Each member looked up once; peers are cloned from here, only those a welcome holds.
        let by_rank: Vec<Option<&Member>> =
            self.ranks.iter().map(|id| self.members.get(id)).collect();
        let layout = peers::layout(by_rank.iter().map(|m| m.map_or("", |m| m.node.as_str())));
        let peer = |rank: u32| {
            let m = by_rank.get(rank as usize).copied().flatten()?;
            Some(Peer {
                rank,
                member: m.id.clone(),
                node: m.node.clone(),
                addrs: m.addrs.clone(),
                host: m.host.clone(),
                observed_ip: m.observed_ip.clone(),
            })
        };
        let all = world
            <= self
                .spec
                .full_peer_table_max
                .min(defaults::MAX_FULL_PEER_TABLE);
        // The whole table once, shared by every welcome.
        let table: Arc<Vec<Peer>> = Arc::new(if all {
            (0..world).filter_map(peer).collect()
        } else {
            Vec::new()
        });
        // One list for every welcome (and every later round, until an entry changes).
        let config = self.config.shared();
        for (r, m) in by_rank.iter().enumerate() {
            let Some(m) = m else {
                continue;
            };
            let (local_rank, local_world, node_rank) = layout.per_rank[r];
            let peers = if all {
                table.clone()
            } else {
                let node = &layout.nodes[node_rank as usize];
                peers::neighbours(r as u32, world, node, local_rank)
                    .into_iter()
                    .filter_map(peer)
                    .collect::<Vec<_>>()
                    .into()
            };
            fx.send(
                m.conn,
                ServerMsg::Welcome(Welcome {
                    job: self.name.clone(),
                    round: self.round,
                    cause: cause.clone(),
                    rank: r as u32,
                    world,
                    local_rank,
                    local_world,
                    node_rank,
                    nodes: layout.nodes.len() as u32,
                    peers,
                    all_peers: all,
                    config: config.clone(),
                    heartbeat_interval_ms: ms(cfg.heartbeat_interval),
                    heartbeat_timeout_ms: ms(cfg.heartbeat_timeout),
                    restarts: self.restarts,
                }),
            );
        }
    }
}

/// A round being rebuilt from resumes (`resume.rs`).
#[derive(Debug, Clone)]
pub(crate) struct Adopting {
    pub(crate) round: u64,
    pub(crate) world: u32,
    pub(crate) until: Instant,
}
