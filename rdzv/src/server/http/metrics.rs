//! `/metrics` in the Prometheus text format: rendezvous gauges and counters, store operations.

use std::fmt::Write;

use dt_rdzv_proto::tcpstore::QueryType;

use crate::server::native::rendezvous::RdzvCore;
use crate::server::tcpstore::core::StoreCore;

/// Writes one metric's help, type and samples (each `(labels, value)`).
pub(crate) fn metric(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: &[(String, u64)],
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in samples {
        let _ = writeln!(out, "{name}{labels} {v}");
    }
}

/// The whole page.
pub(crate) fn render(store: Option<&StoreCore>, rdzv: &RdzvCore) -> String {
    let mut o = String::new();
    let (s, jobs, members, conns) = rdzv.stats();
    let one = |v: u64| vec![(String::new(), v)];
    metric(
        &mut o,
        "dtrdzv_jobs",
        "gauge",
        "Rendezvous jobs held.",
        &one(jobs as u64),
    );
    metric(
        &mut o,
        "dtrdzv_members",
        "gauge",
        "Members of all jobs.",
        &one(members as u64),
    );
    metric(
        &mut o,
        "dtrdzv_native_connections",
        "gauge",
        "Open native (QUIC) connections.",
        &one(conns as u64),
    );
    metric(
        &mut o,
        "dtrdzv_joins_total",
        "counter",
        "Joins accepted.",
        &one(s.joins),
    );
    metric(
        &mut o,
        "dtrdzv_rounds_total",
        "counter",
        "Rounds completed.",
        &one(s.rounds),
    );
    metric(
        &mut o,
        "dtrdzv_rounds_resumed_total",
        "counter",
        "Rounds rebuilt after a server restart from their members' resumes.",
        &one(s.rounds_resumed),
    );
    metric(
        &mut o,
        "dtrdzv_member_failures_total",
        "counter",
        "Members lost (silent or disconnected).",
        &one(s.losses),
    );
    metric(
        &mut o,
        "dtrdzv_reports_total",
        "counter",
        "Data-plane reports of a lost peer received from members.",
        &one(s.reports),
    );
    metric(
        &mut o,
        "dtrdzv_probes_total",
        "counter",
        "Liveness probes started by reports, by outcome (confirmed: declared lost).",
        &[
            ("{outcome=\"confirmed\"}".to_string(), s.probes_confirmed),
            ("{outcome=\"dismissed\"}".to_string(), s.probes_dismissed),
        ],
    );
    metric(
        &mut o,
        "dtrdzv_node_agents_total",
        "counter",
        "Node agents accepted (each speaks for the ranks of one node).",
        &one(s.node_agents),
    );
    metric(
        &mut o,
        "dtrdzv_nodes_lost_total",
        "counter",
        "Node agents lost, each with every rank it spoke for.",
        &one(s.nodes_lost),
    );
    metric(
        &mut o,
        "dtrdzv_member_leaves_total",
        "counter",
        "Members that left on purpose.",
        &one(s.leaves),
    );
    metric(
        &mut o,
        "dtrdzv_refusals_total",
        "counter",
        "Requests refused (token, version, garbage, limits).",
        &one(s.refusals),
    );
    metric(
        &mut o,
        "dtrdzv_jobs_created_total",
        "counter",
        "Jobs created.",
        &one(s.jobs_created),
    );
    let ended: Vec<(String, u64)> = s
        .jobs_ended
        .iter()
        .map(|(l, n)| (format!("{{reason=\"{l}\"}}"), *n))
        .collect();
    metric(
        &mut o,
        "dtrdzv_jobs_ended_total",
        "counter",
        "Jobs ended, by reason.",
        &ended,
    );
    metric(
        &mut o,
        "dtrdzv_native_messages_total",
        "counter",
        "Messages received from members.",
        &one(s.messages),
    );
    if let Some(store) = store {
        let st = store.stats();
        let ops: Vec<(String, u64)> = QueryType::ALL
            .iter()
            .zip(st.ops.iter())
            .filter(|(_, n)| **n > 0)
            .map(|(q, n)| (format!("{{op=\"{}\"}}", q.name()), *n))
            .collect();
        metric(
            &mut o,
            "dtrdzv_store_ops_total",
            "counter",
            "TCPStore requests, by operation.",
            &ops,
        );
        metric(
            &mut o,
            "dtrdzv_store_connections_total",
            "counter",
            "TCPStore connections accepted.",
            &one(st.connections_total),
        );
        let (open, keys) = store.sizes();
        metric(
            &mut o,
            "dtrdzv_store_connections",
            "gauge",
            "Open TCPStore connections.",
            &one(open as u64),
        );
        metric(
            &mut o,
            "dtrdzv_store_keys",
            "gauge",
            "Keys in the store.",
            &one(keys as u64),
        );
        metric(
            &mut o,
            "dtrdzv_store_bytes",
            "gauge",
            "Bytes of keys and values held (checked against --max-store-bytes).",
            &one(store.stored_bytes()),
        );
    }
    let memory = &rdzv.memory().server;
    if let Some(limit) = memory.limit() {
        metric(
            &mut o,
            "dtrdzv_memory_budget_bytes",
            "gauge",
            "The server's memory budget over every door (--max-memory-bytes).",
            &one(limit),
        );
    }
    let held: Vec<(String, u64)> = memory
        .by_door()
        .flat_map(|(door, data, frames)| {
            [
                (format!("{{door=\"{door}\",kind=\"data\"}}"), data),
                (format!("{{door=\"{door}\",kind=\"frames\"}}"), frames),
            ]
        })
        .collect();
    metric(
        &mut o,
        "dtrdzv_memory_held_bytes",
        "gauge",
        "Bytes each door holds for its clients against the server's memory budget: data \
         (stored values, bookkeeping, queued answers, published configuration) and partly \
         received frames.",
        &held,
    );
    o
}
