//! Engine options from the Python constructors' keyword arguments (one place for
//! `Communicator` and `DataListener`).

use std::time::Duration;

use dtcomm::{Algo, Options};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Engine options from the constructors' keyword arguments (`None`: the `DTCOMM_*` twin).
pub(crate) fn options(
    timeout: Option<f64>,
    algo: Option<&str>,
    socket_ifname: Option<String>,
    nsocks_perpeer: Option<usize>,
    store_prefix: Option<String>,
) -> PyResult<Options> {
    let timeout = match timeout {
        None => None,
        Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t)),
        Some(t) => {
            return Err(PyValueError::new_err(format!(
                "timeout must be a positive number of seconds, got {t}"
            )));
        }
    };
    let algo = algo
        .map(|a| a.parse::<Algo>().map_err(PyValueError::new_err))
        .transpose()?;
    Ok(Options {
        timeout,
        algo,
        socket_ifname,
        nsocks_perpeer,
        store_prefix,
        ..Options::default()
    })
}
