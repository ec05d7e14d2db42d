//! One member of a native job, for callers with no Python (the C ABI) and for Python's
//! `dtcomm.init()`: connect, join with the data listener's address and host record, wait for
//! a round, build its communicator from the welcome (no store), and fence it when the server
//! ends the round (the communicator's calls then fail with `RoundEnded`). Feature `native`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use dt_rdzv::native::{
    BlockingNativeClient, ClientConfig, MemberHandle, Membership, NativeError, Trust,
};
use dt_rdzv_proto::native::{JobSpec, LateJoin, Peer, Role, ServerMsg, Welcome};

use super::super::{join_host_port, split_host_port};
use super::settings::NativeSettings;
use crate::bootstrap::welcome::{DataListener, RoundPeers, round_secret};
use crate::communicator::Communicator;
use crate::error::CommError;
use crate::fence::RoundEnd;

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
    /// The round's communicator.
    #[error(transparent)]
    Comm(#[from] CommError),
}

/// A member of a native job and the round it is in.
pub struct Member {
    settings: NativeSettings,
    client: BlockingNativeClient,
    listener: DataListener,
    welcome: Option<Welcome>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Member({})", self.who())
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

impl Member {
    /// Connects to the settings' server and joins its job, advertising `listener`'s address
    /// and host record (the round may still be forming: see [`Member::next_welcome`]).
    pub fn join(settings: NativeSettings, listener: DataListener) -> Result<Member, JoinError> {
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
        let mut client = BlockingNativeClient::connect(&cfg).map_err(rdzv)?;
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
                addrs: vec![listener.addr().to_string()],
                host: listener.host_record().to_vec(),
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
            welcome: None,
        })
    }

    /// The job and member (and round and rank, once in one), for errors.
    pub fn who(&self) -> String {
        let r = self
            .welcome
            .as_ref()
            .map(|w| format!(" round {} rank {}", w.round, w.rank))
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

    /// The current round's welcome.
    pub fn welcome(&self) -> Option<&Welcome> {
        self.welcome.as_ref()
    }

    /// Waits for the next round (the first one, or one after the current), at most the join
    /// timeout plus twice the server's heartbeat timeout.
    pub fn next_welcome(&mut self) -> Result<&Welcome, JoinError> {
        let hb = self
            .welcome
            .as_ref()
            .map_or(2.0, |w| w.heartbeat_timeout_ms as f64 / 1000.0);
        let limit = secs(self.settings.join_timeout.value + 2.0 * hb + 5.0);
        let start = Instant::now();
        let cur = self.welcome.as_ref().map_or(0, |w| w.round);
        loop {
            let left = limit.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(self.rdzv_err(NativeError::Config(format!(
                    "no round after {cur} within {limit:?}; see `dt-rdzv status {}` for who is \
                     missing",
                    self.settings.job.value
                ))));
            }
            match self
                .client
                .next_message(left.min(Duration::from_millis(500)))
            {
                Ok(ServerMsg::Welcome(w)) if w.round > cur => {
                    return Ok(self.welcome.insert(w));
                }
                Ok(_) => {}
                Err(NativeError::Timeout { .. }) => {}
                Err(e) => return Err(self.rdzv_err(e)),
            }
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
        let mut peers: Vec<Peer> = w.peers.clone();
        let known: Vec<u32> = peers.iter().map(|p| p.rank).collect();
        let missing: Vec<u32> = (0..w.rank).filter(|r| !known.contains(r)).collect();
        if !missing.is_empty() && !w.all_peers {
            let more = self.client.lookup(missing).map_err(|e| self.rdzv_err(e))?;
            peers.extend(more);
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
        for p in &w.peers {
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
        let w = self
            .welcome
            .clone()
            .expect("communicator() after next_welcome()");
        let peers = RoundPeers {
            job: w.job.clone(),
            round: w.round,
            rank: w.rank as usize,
            world: w.world as usize,
            addrs: self.peer_addrs(&w)?,
            hosts: Self::peer_hosts(&w).unwrap_or_default(),
        };
        let secret = round_secret(&self.settings.token.value, &w.job, w.round);
        let listener = self.listener.try_clone()?;
        let comm = Communicator::from_welcome(listener, &peers, &secret)?;
        watch_round(&self.client.handle(), &comm, w.round);
        Ok(comm)
    }

    /// Leaves the job for good (the others get a new round).
    pub fn leave(self) {
        let _ = self.client.leave();
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
    h.on_round_end(round, move |end| {
        if end.lost.is_some() || end.removed {
            fence.end(RoundEnd {
                round,
                lost: end.lost.map(|r| r as usize),
                cause: end.why.clone(),
                removed: end.removed,
            });
        }
    });
}
