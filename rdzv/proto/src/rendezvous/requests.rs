//! What a job's members may ask of it besides joining and leaving (publish, lookup), and
//! its status report.

use std::time::Instant;

use super::config::MachineConfig;
use super::effects::Effects;
use super::error::Refusal;
use super::job::{Job, Member, Phase, Place};
use super::progress_view::JobProgress;
use crate::native::{JobStatus, MemberStatus, Peer, Role, ServerMsg};

impl Job {
    /// Publishes a configuration entry to every member, if the server's memory budget leaves
    /// `room` for it (`None`: no budget).
    pub(crate) fn publish(
        &mut self,
        by: &str,
        key: String,
        value: Vec<u8>,
        cfg: &MachineConfig,
        room: Option<u64>,
        fx: &mut Effects,
    ) -> Result<(), Refusal> {
        let m = self
            .members
            .get(by)
            .ok_or(Refusal::NotJoined { what: "Publish" })?;
        let allowed = match self.main_member() {
            Some(main) => main.id == by,
            None => m.place == Place::Active && m.rank == Some(0),
        };
        if !allowed || !matches!(self.phase, Phase::Running { .. }) && m.role != Role::Main {
            return Err(Refusal::NotMain {
                job: self.name.clone(),
                member: by.into(),
                round: self.round,
            });
        }
        let too_many =
            self.config.get(&key).is_none() && self.config.len() >= cfg.max_config_entries;
        let refuse = |why: String| Refusal::BadRequest {
            job: self.name.clone(),
            member: by.into(),
            why,
        };
        if value.len() > cfg.max_config_value || too_many || key.is_empty() || key.len() > 1024 {
            return Err(refuse(format!(
                "config entry {key:?} of {} bytes refused (values up to {} bytes, keys 1..=1024 bytes, {} entries per job)",
                value.len(),
                cfg.max_config_value,
                cfg.max_config_entries
            )));
        }
        // Every welcome carries the whole configuration (one shared copy in the server, one
        // encoded copy per member on the wire): bound it per job, and in one round's welcomes
        // together.
        let replaced = self.config.get(&key).map_or(0, |v| key.len() + v.len());
        let total = self.config.bytes() - replaced + key.len() + value.len();
        if total > cfg.max_config_bytes {
            return Err(refuse(format!(
                "config entry {key:?} of {} bytes refused: the job's configuration would be \
                 {total} bytes, over its {}-byte budget (max_config_bytes)",
                value.len(),
                cfg.max_config_bytes
            )));
        }
        let growth = (key.len() + value.len()).saturating_sub(replaced) as u64;
        if let Some(room) = room
            && growth > room
        {
            return Err(refuse(format!(
                "config entry {key:?} of {} bytes refused: the server's memory budget \
                 (--max-memory-bytes) has {room} bytes left for it",
                value.len()
            )));
        }
        let copies = total.saturating_mul(self.members.len());
        if copies > cfg.max_welcome_config_bytes {
            return Err(refuse(format!(
                "config entry {key:?} of {} bytes refused: {total} bytes of configuration in \
                 each of {} members' welcomes is {copies} bytes, over the {}-byte welcome \
                 budget (max_welcome_config_bytes)",
                value.len(),
                self.members.len(),
                cfg.max_welcome_config_bytes
            )));
        }
        // One copy of the value for every member's message.
        let msg = ServerMsg::Config {
            job: self.name.clone(),
            key: key.clone(),
            value: std::sync::Arc::new(value.clone()),
        };
        self.config.insert(key, value);
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|m| m.arrival);
        for m in members {
            fx.send(m.conn, msg.clone());
        }
        Ok(())
    }

    /// Addresses of some ranks of the running round: each rank once, in the order first asked,
    /// at most `cfg.max_lookup_ranks` distinct ones (more are refused, naming the bound).
    pub(crate) fn lookup(
        &self,
        by: &str,
        ranks: &[u32],
        cfg: &MachineConfig,
    ) -> Result<Vec<Peer>, Refusal> {
        let mut seen = std::collections::HashSet::new();
        let distinct: Vec<u32> = ranks.iter().copied().filter(|r| seen.insert(*r)).collect();
        if distinct.len() > cfg.max_lookup_ranks {
            return Err(Refusal::BadRequest {
                job: self.name.clone(),
                member: by.into(),
                why: format!(
                    "lookup of {} distinct ranks refused (at most {}, max_lookup_ranks)",
                    distinct.len(),
                    cfg.max_lookup_ranks
                ),
            });
        }
        Ok(distinct.into_iter().filter_map(|r| self.peer(r)).collect())
    }

    /// Its ranks and their latest summaries, borrowed (the timeline's sample).
    pub(crate) fn progress(&self) -> JobProgress<'_> {
        // A launcher's agents relaying their workers' summaries: the workers' world.
        let relays: Vec<&super::job::Relay> = self
            .members
            .values()
            .filter_map(|m| m.relayed.as_ref())
            .collect();
        if !relays.is_empty() {
            return JobProgress {
                job: &self.name,
                round: 0,
                world: relays.iter().map(|r| r.world).max().unwrap_or(0),
                ranks: relays
                    .iter()
                    .flat_map(|r| r.workers.iter())
                    .map(|w| (w.progress.rank, Some(&w.progress)))
                    .collect(),
            };
        }
        JobProgress {
            job: &self.name,
            round: self.round,
            world: match self.phase {
                Phase::Running { .. } => self.ranks.len() as u32,
                _ => 0,
            },
            ranks: self
                .members
                .values()
                .filter(|m| m.place == Place::Active)
                .filter_map(|m| Some((m.rank?, m.progress.as_ref().map(|(p, _)| p))))
                .collect(),
        }
    }

    /// The job as `dt-rdzv status` shows it.
    pub(crate) fn status(&self, now: Instant) -> JobStatus {
        let state = match &self.phase {
            Phase::Forming { .. } => "forming".to_string(),
            Phase::Running { .. } => "running".to_string(),
            Phase::Ended { end, .. } => end.label().to_string(),
        };
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by(|a, b| {
            (a.rank.is_none(), a.rank, &a.node, &a.id).cmp(&(
                b.rank.is_none(),
                b.rank,
                &b.node,
                &b.id,
            ))
        });
        let world = match self.phase {
            Phase::Running { .. } => self.ranks.len() as u32,
            _ => 0,
        };
        JobStatus {
            job: self.name.clone(),
            state,
            round: self.round,
            world,
            spec: self.spec.clone(),
            members: members
                .iter()
                .map(|m| MemberStatus {
                    member: m.id.clone(),
                    node: m.node.clone(),
                    state: match m.place {
                        Place::Active => "active",
                        Place::Waiting => "waiting",
                        Place::Spare => "spare",
                    }
                    .into(),
                    rank: m.rank.filter(|_| m.place == Place::Active),
                    role: m.role,
                    last_seen_ms: now.saturating_duration_since(m.last_seen).as_millis() as u64,
                    addrs: m.addrs.clone(),
                    observed_ip: m.observed_ip.clone(),
                    progress: m.progress.as_ref().map(|(p, _)| p.clone()),
                    progress_age_ms: m.progress.as_ref().map_or(0, |(_, at)| {
                        now.saturating_duration_since(*at).as_millis() as u64
                    }),
                })
                .collect(),
            missing: self.missing.iter().cloned().collect(),
            restarts: self.restarts,
            age_ms: now.saturating_duration_since(self.created).as_millis() as u64,
            config_keys: self.config.keys().cloned().collect(),
            workers_world: members
                .iter()
                .filter_map(|m| m.relayed.as_ref().map(|r| r.world))
                .max()
                .unwrap_or(0),
            workers: relayed_workers(&members, now),
        }
    }
}

/// The workers `members` relay, as if members (ranks of the workers' world): each named after
/// its relaying member, silent for the record's age when relayed plus the time since.
fn relayed_workers(members: &[&Member], now: Instant) -> Vec<MemberStatus> {
    let mut out: Vec<MemberStatus> = members
        .iter()
        .filter_map(|m| Some((*m, m.relayed.as_ref()?)))
        .flat_map(|(m, r)| {
            let since = now.saturating_duration_since(r.at).as_millis() as u64;
            r.workers.iter().map(move |w| {
                let age = w.age_ms.saturating_add(since);
                MemberStatus {
                    member: format!("{}/rank{}", m.id, w.progress.rank),
                    node: m.node.clone(),
                    state: "active".into(),
                    rank: Some(w.progress.rank),
                    role: Role::Worker,
                    last_seen_ms: age,
                    addrs: Vec::new(),
                    observed_ip: m.observed_ip.clone(),
                    // Read as of the workers' world (round 0, set as the relay arrived).
                    progress: Some(w.progress.clone()),
                    progress_age_ms: age,
                }
            })
        })
        .collect();
    out.sort_by_key(|w| w.rank);
    out
}
