//! What a rendezvous token derives: the token of one job on a server (`job_token`) and the
//! store path's link secret of one round (`store_link_secret`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The token of one job on a server whose token is `server_token`: it lets that job's members
/// join it, read its status and stop it, and opens nothing else (`dt-rdzv token --job JOB`).
#[pyfunction]
pub(crate) fn job_token(server_token: &str, job: &str) -> PyResult<String> {
    if server_token.is_empty() {
        return Err(PyValueError::new_err("the server token is empty"));
    }
    Ok(dt_rdzv_proto::rendezvous::job_token(server_token, job))
}

/// The store path's link secret (hex) a launcher hands the workers of `round` of `job` as
/// `DTCOMM_LINK_SECRET`, from the token its agent joined with; `None` for an empty token (a
/// server without authentication: anyone could derive it, so the store's own secret is kept).
#[pyfunction]
pub(crate) fn store_link_secret(token: &str, job: &str, round: u64) -> Option<String> {
    if token.is_empty() {
        return None;
    }
    let s = dtcomm::store_link_secret(token, job, round);
    Some(s.iter().map(|b| format!("{b:02x}")).collect())
}
