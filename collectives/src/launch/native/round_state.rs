//! What one member of a native job knows of its rounds, from the messages the server pushes,
//! sans IO: the current round's welcome, the next one when the server already formed it, why
//! the current one is over, how many members wait to join, the per-round configuration entries
//! (`"<round> <value>"`), and the job's end. [`Member`](super::Member) feeds it; every front end
//! (Python's `dtcomm._native.Member`, the C ABI, `dtrun`, the torchrun handler) reads it.

use std::collections::BTreeMap;

use dt_rdzv_proto::native::{ServerMsg, Welcome};

/// A message that ends this member's part: the job's end, or its removal from a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The server ended the job.
    JobEnded {
        /// The job.
        job: String,
        /// How, in words.
        why: String,
        /// `finished`, `stopped`, `join_timeout`, ...
        how: String,
    },
    /// The server removed this member from `round` (the others went on without it).
    Removed {
        /// The job.
        job: String,
        /// The round.
        round: u64,
        /// What the server saw.
        why: String,
    },
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct RoundState {
    welcome: Option<Welcome>,
    next: Option<Welcome>,
    ended: Option<String>,
    waiting: u32,
    entries: BTreeMap<(String, u64), String>,
    job_end: Option<Stop>,
}

impl RoundState {
    /// The current round's welcome.
    pub fn welcome(&self) -> Option<&Welcome> {
        self.welcome.as_ref()
    }

    /// Why the current round is over (superseded, or ended by the server), if it is.
    pub fn ended(&self) -> Option<&str> {
        self.ended.as_deref()
    }

    /// Members waiting to join, as the server last said.
    pub fn waiting(&self) -> u32 {
        self.waiting
    }

    /// The job's end or this member's removal, once the server said so.
    pub fn stop(&self) -> Option<&Stop> {
        self.job_end.as_ref()
    }

    /// Whether the current round is over or a later one is formed already.
    pub fn changed(&self) -> bool {
        self.ended.is_some() || self.next.is_some()
    }

    fn current(&self) -> u64 {
        self.welcome.as_ref().map_or(0, |w| w.round)
    }

    /// Takes one pushed message; `Err` for the job's end or this member's removal (kept in
    /// [`RoundState::stop`] too). `refused` carries a refusal's text for the caller to log.
    pub fn take(&mut self, m: ServerMsg) -> Result<Option<String>, Stop> {
        let cur = self.current();
        match m {
            ServerMsg::Welcome(w) if w.round > cur => {
                if self.ended.is_none() {
                    self.ended = Some(format!("round {cur} was superseded by round {}", w.round));
                }
                self.next = Some(w);
            }
            ServerMsg::RoundEnded { round, cause, .. } if round >= cur => {
                self.ended = Some(format!("round {round} ended: {cause}"));
            }
            ServerMsg::Pending { waiting, .. } => self.waiting = waiting,
            ServerMsg::Config { key, value, .. } => {
                let text = String::from_utf8_lossy(&value).into_owned();
                if let Some((rnd, v)) = text.split_once(' ')
                    && let Ok(rnd) = rnd.parse::<u64>()
                {
                    self.entries.insert((key, rnd), v.to_owned());
                }
            }
            ServerMsg::JobEnded { job, end } => {
                let stop = Stop::JobEnded {
                    job,
                    why: end.to_string(),
                    how: end.label().to_string(),
                };
                self.job_end = Some(stop.clone());
                return Err(stop);
            }
            ServerMsg::Removed { job, round, why } => {
                let stop = Stop::Removed { job, round, why };
                self.job_end = Some(stop.clone());
                return Err(stop);
            }
            ServerMsg::Refused { code, message } => {
                return Ok(Some(format!(
                    "dt-rdzv refused a request ({code:?}): {message}"
                )));
            }
            _ => {}
        }
        Ok(None)
    }

    /// Moves to the round the server formed after the current one, if it did.
    pub fn advance(&mut self) -> Option<&Welcome> {
        let w = self.next.take()?;
        self.ended = None;
        self.waiting = 0;
        Some(self.welcome.insert(w))
    }

    /// What rank 0 published for the current round under `key`: from the welcome's
    /// configuration, or a configuration message that came since.
    pub fn round_value(&self, key: &str) -> Option<String> {
        let w = self.welcome.as_ref()?;
        let from_welcome = w.config.iter().find(|(k, _)| k == key).and_then(|(_, v)| {
            let text = String::from_utf8_lossy(v).into_owned();
            let (rnd, v) = text.split_once(' ')?;
            (rnd.parse::<u64>().ok()? == w.round).then(|| v.to_owned())
        });
        from_welcome.or_else(|| self.entries.get(&(key.to_owned(), w.round)).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dt_rdzv_proto::native::{JobEnd, RoundCause};

    fn welcome(round: u64, config: &[(&str, &str)]) -> Welcome {
        Welcome {
            job: "j".into(),
            round,
            cause: RoundCause::First,
            rank: 0,
            world: 2,
            local_rank: 0,
            local_world: 2,
            node_rank: 0,
            nodes: 1,
            peers: Vec::new(),
            all_peers: true,
            config: config
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
            heartbeat_interval_ms: 500,
            heartbeat_timeout_ms: 2000,
            restarts: 0,
        }
    }

    #[test]
    fn rounds_values_and_the_end_as_the_server_pushes_them() {
        let mut s = RoundState::default();
        s.take(ServerMsg::Welcome(welcome(1, &[("k", "1 first")])))
            .unwrap();
        assert_eq!(s.advance().map(|w| w.round), Some(1));
        assert!(!s.changed());
        assert_eq!(s.round_value("k").as_deref(), Some("first"));
        // A value for another round is not this round's; one for this round is.
        let config = |v: &str| ServerMsg::Config {
            job: "j".into(),
            key: "s".into(),
            value: v.as_bytes().to_vec(),
        };
        s.take(config("2 later")).unwrap();
        assert_eq!(s.round_value("s"), None);
        s.take(config("1 now")).unwrap();
        assert_eq!(s.round_value("s").as_deref(), Some("now"));
        s.take(ServerMsg::Pending {
            job: "j".into(),
            round: 1,
            waiting: 3,
        })
        .unwrap();
        assert_eq!(s.waiting(), 3);
        // A stale round's end is ignored; the current one's is kept; a later welcome waits.
        s.take(ServerMsg::RoundEnded {
            job: "j".into(),
            round: 0,
            cause: RoundCause::First,
        })
        .unwrap();
        assert!(!s.changed());
        s.take(ServerMsg::Welcome(welcome(2, &[]))).unwrap();
        assert_eq!(s.ended(), Some("round 1 was superseded by round 2"));
        assert_eq!(s.advance().map(|w| w.round), Some(2));
        assert!(s.ended().is_none() && s.waiting() == 0);
        let end = s
            .take(ServerMsg::JobEnded {
                job: "j".into(),
                end: JobEnd::Finished { by: "m0".into() },
            })
            .unwrap_err();
        assert!(
            matches!(&end, Stop::JobEnded { how, .. } if how == "finished"),
            "{end:?}"
        );
        assert_eq!(s.stop(), Some(&end));
    }
}
