//! Meeting at a store that rank 0 of the job hosts in its own process (torch's env:// rule,
//! a PyTorchJob's pods, an `srun` step, OCI's MAIN): a new server at every `init()`, on the
//! same address as the last one.
//!
//! A re-initialising guest can reach the server of rank 0's *previous* init in the moment
//! before rank 0 stops it, count its generation there, publish its address there, and then
//! wait for peers that publish on the new server: every rank waits out its whole deadline
//! ("never published its address"). So the n-th hosting of a process is announced under a key
//! of its own ([`key`]), and a guest at its n-th init waits for that key: on the old server it
//! never appears, the old server's stop closes the connection, and the guest reconnects until
//! it reaches the new one. The count is kept per process, per endpoint and run id; every rank
//! counts the same inits (the contract of `shutdown()` and `init()`: every rank calls both).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dt_rdzv::client::TcpStoreClient;
use dt_rdzv::store::{Store, StoreError};

/// This process's part in a store meeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The store outlives the job's processes (a `dt-rdzv serve`, torch's agent store): connect.
    External,
    /// This process hosts the store: announce each hosting once the server runs.
    Host,
    /// Rank 0 of the job hosts the store: wait until it is rank 0's hosting for this init.
    Guest,
}

impl Role {
    /// The role the launch rules give: `host_store` (this process hosts) and `rank0_hosts`
    /// (the rule says rank 0 of the job hosts, which every rank can tell).
    pub fn of(host_store: bool, rank0_hosts: bool) -> Role {
        match (host_store, rank0_hosts) {
            (true, true) => Role::Host,
            (false, true) => Role::Guest,
            _ => Role::External,
        }
    }
}

/// The key rank 0 sets on the `n`-th store it hosts for `run_id`.
pub fn key(run_id: &str, n: u64) -> String {
    format!("{run_id}/dtcomm/hosted/{n}")
}

/// How many times this process met at `endpoint` under `run_id` with rank 0 hosting,
/// this one included.
fn next_meeting(endpoint: &str, run_id: &str) -> u64 {
    static COUNTS: Mutex<Option<HashMap<(String, String), u64>>> = Mutex::new(None);
    let mut g = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    let n = g
        .get_or_insert_with(HashMap::new)
        .entry((endpoint.to_owned(), run_id.to_owned()))
        .or_insert(0);
    *n += 1;
    *n
}

/// Connects to the store at `endpoint` for this init, in `role`, within `wait`: a host
/// announces its hosting; a guest returns only once connected to rank 0's hosting of this
/// init. `rank` names this process in errors (`None`: numbered at the store).
pub fn connect(
    endpoint: &str,
    run_id: &str,
    role: Role,
    rank: Option<usize>,
    wait: Duration,
) -> Result<TcpStoreClient, String> {
    let who = rank.map_or_else(|| "an OCI worker".to_owned(), |r| format!("rank {r}"));
    let reach =
        |e: StoreError| format!("{who}: cannot reach the rendezvous store at {endpoint}: {e}");
    if role == Role::External {
        return TcpStoreClient::connect(endpoint, wait).map_err(reach);
    }
    let n = next_meeting(endpoint, run_id);
    let k = key(run_id, n);
    if role == Role::Host {
        let c = TcpStoreClient::connect(endpoint, wait).map_err(reach)?;
        c.set(&k, b"1")
            .map_err(|e| format!("{who}: announcing the store it hosts at {endpoint}: {e}"))?;
        return Ok(c);
    }
    let deadline = Instant::now() + wait;
    let mut stale = 0u32;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let c = match TcpStoreClient::connect(endpoint, left) {
            Ok(c) => c,
            // Nothing listened until the deadline.
            Err(e @ StoreError::Connect { .. }) => return Err(reach(e)),
            // Accepted, then reset during the handshake: an earlier store closing.
            Err(e) => {
                stale += 1;
                if Instant::now() >= deadline {
                    return Err(reach(e));
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match c.wait(&[&k], left) {
            Ok(()) => return Ok(c),
            Err(StoreError::Timeout { .. }) => {
                return Err(format!(
                    "{who}: the store at {endpoint} is not rank 0's for this init (its \
                     init number {n} under run id {run_id:?}) after {wait:?}: rank 0 has not \
                     called init() as often as this rank, or it hangs before hosting \
                     (reconnected {stale} times as earlier stores closed)"
                ));
            }
            // The server closed: rank 0 stopped the store of its previous init. Reconnect.
            Err(e) => {
                stale += 1;
                tracing::debug!(endpoint, n, error = %e, "store closed while waiting for rank 0's hosting; reconnecting");
                if Instant::now() >= deadline {
                    return Err(reach(e));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_follow_the_rules() {
        assert_eq!(Role::of(true, true), Role::Host);
        assert_eq!(Role::of(false, true), Role::Guest);
        assert_eq!(Role::of(true, false), Role::External);
        assert_eq!(Role::of(false, false), Role::External);
    }

    #[test]
    fn meetings_count_per_endpoint_and_run() {
        assert_eq!(next_meeting("h:1", "a"), 1);
        assert_eq!(next_meeting("h:1", "a"), 2);
        assert_eq!(next_meeting("h:1", "b"), 1);
        assert_eq!(next_meeting("h:2", "a"), 1);
        assert_eq!(key("a", 2), "a/dtcomm/hosted/2");
    }
}
