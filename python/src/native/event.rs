//! `RdzvEvent`: a message the server pushed (a new round, a round ended, a member removed,
//! joiners pending, a configuration entry, the job ended, a refusal), flattened into one
//! read-only value whose `kind` says which.

use dt_rdzv_proto::native::ServerMsg;
use pyo3::prelude::*;

use super::errors::code_name;
use super::round::PyWelcome;

/// A message the server pushed: `kind` is `welcome`, `round_ended`, `removed`, `pending`, `config`,
/// `job_ended`, `refused` or `other`; the other fields are set as the kind has them.
#[pyclass(module = "dtcomm._dtcomm", name = "RdzvEvent", frozen, get_all)]
pub struct RdzvEvent {
    /// What happened.
    kind: &'static str,
    /// The job.
    job: Option<String>,
    /// The round it concerns.
    round: Option<u64>,
    /// Why (round_ended), how it ended (job_ended), or the refusal's message.
    why: Option<String>,
    /// `finished`, `stopped`, `join_timeout`, ... (job_ended); the refusal code (refused).
    how: Option<String>,
    /// Members waiting to join (pending).
    waiting: Option<u32>,
    /// Configuration entry (config).
    key: Option<String>,
    /// Its value (config).
    value: Option<Vec<u8>>,
    /// The new round (welcome).
    welcome: Option<PyWelcome>,
}

#[pymethods]
impl RdzvEvent {
    fn __repr__(&self) -> String {
        format!(
            "RdzvEvent(kind={:?}, job={:?}, round={:?}, why={:?}, how={:?}, waiting={:?}, key={:?})",
            self.kind, self.job, self.round, self.why, self.how, self.waiting, self.key
        )
    }
}

pub(super) fn event(m: ServerMsg) -> RdzvEvent {
    let mut e = RdzvEvent {
        kind: "other",
        job: None,
        round: None,
        why: None,
        how: None,
        waiting: None,
        key: None,
        value: None,
        welcome: None,
    };
    match m {
        ServerMsg::Welcome(w) => {
            e.kind = "welcome";
            e.job = Some(w.job.clone());
            e.round = Some(w.round);
            e.why = Some(w.cause.to_string());
            e.welcome = Some(PyWelcome::from(&w));
        }
        ServerMsg::RoundEnded { job, round, cause } => {
            e.kind = "round_ended";
            e.job = Some(job);
            e.round = Some(round);
            e.why = Some(cause.to_string());
        }
        ServerMsg::Pending {
            job,
            round,
            waiting,
        } => {
            e.kind = "pending";
            e.job = Some(job);
            e.round = Some(round);
            e.waiting = Some(waiting);
        }
        ServerMsg::Config { job, key, value } => {
            e.kind = "config";
            e.job = Some(job);
            e.key = Some(key);
            e.value = Some(std::sync::Arc::unwrap_or_clone(value));
        }
        ServerMsg::JobEnded { job, end } => {
            e.kind = "job_ended";
            e.job = Some(job);
            e.why = Some(end.to_string());
            e.how = Some(end.label().to_string());
        }
        ServerMsg::Removed { job, round, why } => {
            e.kind = "removed";
            e.job = Some(job);
            e.round = Some(round);
            e.why = Some(why);
        }
        ServerMsg::Refused { code, message } => {
            e.kind = "refused";
            e.why = Some(message);
            e.how = Some(code_name(code).to_string());
        }
        _ => {}
    }
    e
}
