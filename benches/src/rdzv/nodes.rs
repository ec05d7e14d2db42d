//! The native herd as nodes: N ranks on N / K nodes, each node's agent holding one QUIC
//! connection with one stream per rank and one heartbeat for all of them (node-level
//! liveness), against which `native` measures one connection per rank.

use std::time::{Duration, Instant};

use dt_rdzv::native::{ClientConfig, NativeError};

use super::native::{NativeResult, QuicTotals, herd, who};

/// `n` ranks join job `job` (min = max = n) through `n / per_node` node agents, with at most
/// `in_flight` agents' QUIC handshakes under way at once. `connect_all` is the last agent
/// connected; `join_to_welcome` from then to the last rank's welcome.
pub async fn run_node_herd(
    cfg: &ClientConfig,
    n: usize,
    per_node: usize,
    job: &str,
    timeout: Duration,
    in_flight: usize,
) -> std::io::Result<NativeResult> {
    let err = |e: NativeError| std::io::Error::other(e.to_string());
    let per_node = per_node.max(1);
    let nodes = n.div_ceil(per_node);
    let (connectors, gate, spec) = herd(&cfg.trust, n, in_flight, timeout)?;
    let start = Instant::now();
    let tasks: Vec<_> = (0..nodes)
        .map(|node| {
            let (c, cfg, gate, spec) = (
                connectors[node % connectors.len()].clone(),
                cfg.clone(),
                gate.clone(),
                spec.clone(),
            );
            let job = job.to_string();
            tokio::spawn(async move {
                let permit = gate.acquire().await;
                let agent = c.node_agent(&cfg, &job, &format!("node{node:05}")).await?;
                drop(permit);
                let connected = Instant::now();
                let first = node * per_node;
                let mut ranks = Vec::new();
                for i in first..(first + per_node).min(n) {
                    let mut r = agent.rank().await?;
                    r.join(who(&job, i, format!("node{node:05}"), &spec))
                        .await?;
                    ranks.push(r);
                }
                let mut last = connected;
                for r in ranks.iter_mut() {
                    r.wait_welcome(timeout).await?;
                    last = last.max(Instant::now());
                }
                Ok::<_, NativeError>((agent, ranks, connected, last))
            })
        })
        .collect();
    let (mut connect_all, mut last) = (Duration::ZERO, start);
    let mut keep = Vec::with_capacity(nodes);
    for t in tasks {
        let (agent, ranks, connected, at) = t.await.map_err(std::io::Error::other)?.map_err(err)?;
        connect_all = connect_all.max(connected - start);
        last = last.max(at);
        keep.push((agent, ranks));
    }
    let mut quic = QuicTotals::default();
    for (_, ranks) in &keep {
        // One connection per node: its ranks' clients share it.
        if let Some(r) = ranks.first() {
            quic.add(&r.quic_stats());
        }
    }
    let result = NativeResult {
        total: last - start,
        connect_all,
        join_to_welcome: last.saturating_duration_since(start + connect_all),
        quic,
    };
    for (agent, ranks) in keep {
        drop(ranks);
        agent.close("benchmark done");
    }
    Ok(result)
}
