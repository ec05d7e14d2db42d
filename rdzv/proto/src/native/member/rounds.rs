//! What one member of a native job knows of its rounds, from the messages the server pushes:
//! the current round's welcome, the next one when the server already formed it, why the
//! current one is over, how many members wait to join, the per-round configuration entries
//! (`"<round> <value>"`), the job's end, and the refusals not yet read.
//!
//! The [`Member`](super::Member) machine keeps one and updates it as it reads each message
//! it hands to the application (once: [`Rounds::take`]); the application moves to the next
//! round when it is ready ([`Rounds::advance`]). Every front end (Python's
//! `dtcomm._native.Member`, the C ABI, `dtrun`, the torchrun handler) reads it through the
//! engine's member.

use std::collections::{BTreeMap, VecDeque};

use crate::native::{ServerMsg, Welcome};

/// How many refusals [`Rounds`] keeps for the application to read (the oldest go first).
pub const KEPT_REFUSALS: usize = 64;

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
#[derive(Debug, Clone, Default)]
pub struct Rounds {
    welcome: Option<Welcome>,
    next: Option<Welcome>,
    ended: Option<String>,
    waiting: u32,
    entries: BTreeMap<(String, u64), String>,
    job_end: Option<Stop>,
    refused: VecDeque<String>,
}

impl Rounds {
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

    /// Takes one message the server pushed; `Err` for the job's end or this member's removal
    /// (kept in [`Rounds::stop`] too). `Ok(Some(_))` carries a refusal's text for the caller
    /// to log (kept for [`Rounds::take_refused`] too).
    pub fn take(&mut self, m: &ServerMsg) -> Result<Option<String>, Stop> {
        let cur = self.current();
        match m {
            ServerMsg::Welcome(w) if w.round > cur => {
                if self.ended.is_none() {
                    self.ended = Some(format!("round {cur} was superseded by round {}", w.round));
                }
                self.next = Some(w.clone());
            }
            ServerMsg::RoundEnded { round, cause, .. } if *round >= cur => {
                self.ended = Some(format!("round {round} ended: {cause}"));
            }
            ServerMsg::Pending { waiting, .. } => self.waiting = *waiting,
            ServerMsg::Config { key, value, .. } => {
                let text = String::from_utf8_lossy(value);
                if let Some((rnd, v)) = text.split_once(' ')
                    && let Ok(rnd) = rnd.parse::<u64>()
                {
                    self.entries.insert((key.clone(), rnd), v.to_owned());
                }
            }
            ServerMsg::JobEnded { job, end } => {
                let stop = Stop::JobEnded {
                    job: job.clone(),
                    why: end.to_string(),
                    how: end.label().to_string(),
                };
                self.job_end = Some(stop.clone());
                return Err(stop);
            }
            ServerMsg::Removed { job, round, why } => {
                let stop = Stop::Removed {
                    job: job.clone(),
                    round: *round,
                    why: why.clone(),
                };
                self.job_end = Some(stop.clone());
                return Err(stop);
            }
            ServerMsg::Refused { code, message } => {
                let text = format!("dt-rdzv refused a request ({code:?}): {message}");
                if self.refused.len() == KEPT_REFUSALS {
                    self.refused.pop_front();
                }
                self.refused.push_back(text.clone());
                return Ok(Some(text));
            }
            _ => {}
        }
        Ok(None)
    }

    /// The refusals taken since the last call, oldest first (at most [`KEPT_REFUSALS`]).
    pub fn take_refused(&mut self) -> Vec<String> {
        self.refused.drain(..).collect()
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
mod tests;
