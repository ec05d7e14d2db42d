//! Opening a connection to the rendezvous service: an endpoint list (`host[:port]` entries,
//! each name standing for every address it resolves to), ordered for a job by rendezvous
//! hashing so that every client of one job tries the same server first, and tried in turn
//! within a deadline; or the one server a `Redirect` named.

use std::net::SocketAddr;
use std::time::Duration;

use dt_rdzv_proto::native::member::PER_SERVER;
use tokio::time::Instant;

use super::config::{ClientConfig, DEFAULT_NATIVE_PORT};
use super::error::NativeError;

/// Every address of one `host[:port]` (the native port, 29401, by default), in the resolver's
/// order.
async fn resolve_one(endpoint: &str) -> Result<Vec<SocketAddr>, NativeError> {
    let with_port = if endpoint.rsplit_once(':').is_some_and(|(h, p)| {
        !p.is_empty()
            && p.chars().all(|c| c.is_ascii_digit())
            && (!h.contains(':') || h.ends_with(']'))
    }) {
        endpoint.to_string()
    } else {
        format!("{endpoint}:{DEFAULT_NATIVE_PORT}")
    };
    let err = |why: String| NativeError::Connect {
        endpoint: endpoint.into(),
        why,
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&with_port)
        .await
        .map_err(|e| err(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(err("name resolves to no address".into()));
    }
    Ok(addrs)
}

/// The servers of an endpoint list: `host[:port]` entries separated by commas, each name
/// standing for every address it resolves to, in order and without repeats. Entries that do
/// not resolve are skipped while another does.
pub(crate) async fn resolve_all(endpoints: &str) -> Result<Vec<SocketAddr>, NativeError> {
    let mut out: Vec<SocketAddr> = Vec::new();
    let mut last = None;
    for entry in endpoints
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        match resolve_one(entry).await {
            Ok(addrs) => {
                for a in addrs {
                    if !out.contains(&a) {
                        out.push(a);
                    }
                }
            }
            Err(e) => last = Some(e),
        }
    }
    match (out.is_empty(), last) {
        (false, _) => Ok(out),
        (true, Some(e)) => Err(e),
        (true, None) => Err(NativeError::Config(format!(
            "no rendezvous endpoint in {endpoints:?}"
        ))),
    }
}

/// Orders `addrs` by rendezvous (highest-random-weight) hashing of `job` and each address:
/// the same order for every client of one job, whatever order it was given, spread evenly over
/// the servers across jobs. FNV-1a, so the order is the same in every build and process.
pub(crate) fn by_affinity(job: &str, addrs: &mut [SocketAddr]) {
    fn weight(job: &str, a: &SocketAddr) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in job.bytes().chain([0]).chain(a.to_string().into_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // FNV's low bits mix poorly for short inputs: finish with a murmur-style avalanche.
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }
    addrs.sort_by_key(|a| std::cmp::Reverse(weight(job, a)));
}

/// Opens a connection and its stream within `deadline`, trying the servers of the endpoint
/// list in order from `start` (wrapping around); with several, each but the last gets at most
/// [`PER_SERVER`] of the deadline, so that a vanished one costs little (in the order of
/// [`by_affinity`] when the config names the job). Returns the index of the server that
/// answered.
pub(crate) async fn open(
    endpoint: &quinn::Endpoint,
    cfg: &ClientConfig,
    deadline: Duration,
    start: usize,
) -> Result<
    (
        quinn::Connection,
        quinn::SendStream,
        quinn::RecvStream,
        usize,
    ),
    NativeError,
> {
    let mut addrs = resolve_all(&cfg.endpoint).await?;
    if let Some(job) = &cfg.affinity {
        by_affinity(job, &mut addrs);
    }
    let n = addrs.len();
    let until = Instant::now() + deadline;
    let mut errors = Vec::new();
    for k in 0..n {
        let i = (start + k) % n;
        let left = until.saturating_duration_since(Instant::now());
        // The last server to try gets whatever is left; the others at most PER_SERVER.
        let share = if k + 1 == n {
            left
        } else {
            left.min(PER_SERVER)
        };
        match open_one(endpoint, cfg, addrs[i], share).await {
            Ok((c, s, r)) => return Ok((c, s, r, i)),
            Err(why) => errors.push(format!("{}: {why}", addrs[i])),
        }
    }
    Err(NativeError::Connect {
        endpoint: cfg.endpoint.clone(),
        why: errors.join("; "),
    })
}

/// Opens a connection to the server a `Redirect` named, within `deadline`.
pub(crate) async fn open_redirect(
    endpoint: &quinn::Endpoint,
    cfg: &ClientConfig,
    to: &str,
    deadline: Duration,
) -> Result<(quinn::Connection, quinn::SendStream, quinn::RecvStream), NativeError> {
    let addrs = resolve_one(to).await?;
    let mut errors = Vec::new();
    let until = Instant::now() + deadline;
    for a in addrs {
        let left = until.saturating_duration_since(Instant::now());
        match open_one(endpoint, cfg, a, left).await {
            Ok(ok) => return Ok(ok),
            Err(why) => errors.push(format!("{a}: {why}")),
        }
    }
    Err(NativeError::Connect {
        endpoint: to.into(),
        why: errors.join("; "),
    })
}

async fn open_one(
    endpoint: &quinn::Endpoint,
    cfg: &ClientConfig,
    addr: SocketAddr,
    deadline: Duration,
) -> Result<(quinn::Connection, quinn::SendStream, quinn::RecvStream), String> {
    let connecting = endpoint
        .connect(addr, &cfg.server_name)
        .map_err(|e| e.to_string())?;
    let conn = tokio::time::timeout(deadline, connecting)
        .await
        .map_err(|_| format!("no handshake within {deadline:?}"))?
        .map_err(|e| e.to_string())?;
    let (send, recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    Ok((conn, send, recv))
}

#[cfg(test)]
mod tests {
    use super::by_affinity;
    use std::net::SocketAddr;

    fn servers() -> Vec<SocketAddr> {
        ["10.0.0.1:29401", "10.0.0.2:29401", "10.0.0.3:29401"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect()
    }

    #[test]
    fn every_client_of_a_job_gets_one_order_whatever_order_it_was_given() {
        let mut a = servers();
        by_affinity("job-7", &mut a);
        for rot in 1..3 {
            let mut b = servers();
            b.rotate_left(rot);
            by_affinity("job-7", &mut b);
            assert_eq!(a, b, "rotation {rot}");
        }
    }

    #[test]
    fn jobs_spread_over_the_servers() {
        let mut firsts = [0usize; 3];
        let all = servers();
        for j in 0..300 {
            let mut a = servers();
            by_affinity(&format!("job-{j}"), &mut a);
            firsts[all.iter().position(|s| *s == a[0]).unwrap()] += 1;
        }
        assert!(firsts.iter().all(|&n| n > 60), "{firsts:?}");
    }
}
