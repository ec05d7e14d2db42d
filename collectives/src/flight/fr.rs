//! torch's Flight Recorder trace format (version 2.10, as torch 2.15 writes it): a pickled
//! dict of `version`, `pg_config` (each group's name, description and global ranks),
//! `pg_status` (each group's last enqueued, started and completed collective) and `entries`
//! (one dict per call: `record_id`, `pg_id`, `process_group`, `collective_seq_id`,
//! `p2p_seq_id`, `profiling_name` such as `dtcomm:all_reduce` or `dtcomm:send 0->1`, sizes,
//! dtypes, `state`, times, `frames`). `torchfrtrace` reads a directory of such files, one
//! per rank, named prefix + rank.

use std::path::Path;

use dt_rdzv_proto::native::CallState;
use dt_rdzv_proto::native::progress::WORLD_GROUP;

use super::entry::Entry;
use super::pickle::{Value, to_bytes};
use crate::dtype::DType;

/// Most calls one dump holds (the newest): about 60 MB of pickle. A larger ring is dumped
/// cut to them, and the dump says so (`dtcomm_entries_dropped`).
pub const MAX_DUMP_ENTRIES: usize = 100_000;

/// The format version torch 2.15 writes.
const VERSION: &str = "2.10";

/// torch's name of a dtype (`c10::ScalarType`'s), as FR dumps spell dtypes.
fn torch_dtype(d: DType) -> &'static str {
    match d {
        DType::F32 => "Float",
        DType::F64 => "Double",
        DType::F16 => "Half",
        DType::BF16 => "BFloat16",
        DType::I8 => "Char",
        DType::U8 => "Byte",
        DType::I32 => "Int",
        DType::I64 => "Long",
        DType::I16 => "Short",
        DType::C64 => "ComplexFloat",
        DType::C128 => "ComplexDouble",
        DType::Bool => "Bool",
    }
}

fn pg_name(group: u64) -> String {
    group.to_string()
}

fn pg_desc(group: u64) -> &'static str {
    if group == WORLD_GROUP {
        "default_pg"
    } else {
        "dtcomm_subgroup"
    }
}

fn s(k: &str) -> Value {
    Value::str(k)
}

fn sizes(count: u64, dtype: DType) -> (Value, Value) {
    if count == 0 {
        (Value::List(vec![]), Value::List(vec![]))
    } else {
        (
            Value::List(vec![Value::List(vec![Value::int(count)])]),
            Value::List(vec![s(torch_dtype(dtype))]),
        )
    }
}

fn profiling_name(e: &Entry) -> String {
    let i = &e.info;
    match (i.op, i.group_peer) {
        ("send", Some(p)) => format!("dtcomm:send {}->{p}", i.group_rank),
        ("recv", Some(p)) => format!("dtcomm:recv {}<-{p}", i.group_rank),
        ("recv", None) => format!("dtcomm:recv {}<-?", i.group_rank),
        (op, _) => format!("dtcomm:{op}"),
    }
}

fn entry(e: &Entry) -> Value {
    let i = &e.info;
    let (in_sizes, in_dtypes) = sizes(i.in_count, i.dtype);
    let (out_sizes, out_dtypes) = sizes(i.out_count, i.dtype);
    // Flight Recorder has no failed state: a call that failed (a timeout) is one that
    // started and never completed, as torch's own dumps show a timed-out call.
    let state = match e.state {
        CallState::Failed => "started",
        s => s.name(),
    };
    let (coll_seq, p2p_seq) = if i.p2p { (0, e.seq) } else { (e.seq, 0) };
    Value::Dict(vec![
        (s("record_id"), Value::int(e.record_id)),
        (s("pg_id"), Value::int(i.group)),
        (
            s("process_group"),
            Value::Tuple(vec![Value::str(pg_name(i.group)), s(pg_desc(i.group))]),
        ),
        (s("collective_seq_id"), Value::int(coll_seq)),
        (s("p2p_seq_id"), Value::int(p2p_seq)),
        (s("op_id"), Value::int(e.seq)),
        (s("profiling_name"), Value::Str(profiling_name(e))),
        (s("time_created_ns"), Value::int(e.time_queued_ns)),
        (s("duration_ms"), Value::None),
        (s("input_sizes"), in_sizes),
        (s("input_dtypes"), in_dtypes),
        (s("output_sizes"), out_sizes),
        (s("output_dtypes"), out_dtypes),
        (s("state"), s(state)),
        (
            s("time_discovered_started_ns"),
            Value::opt(e.time_started_ns),
        ),
        (
            s("time_discovered_completed_ns"),
            Value::opt(e.time_ended_ns.filter(|_| e.state == CallState::Completed)),
        ),
        (s("retired"), Value::Bool(e.time_ended_ns.is_some())),
        (s("timeout_ms"), Value::int(i.timeout_ms)),
        (s("is_p2p"), Value::Bool(i.p2p)),
        (s("frames"), Value::List(vec![])),
        (s("thread_id"), s("")),
        (s("thread_name"), s("")),
        // dtcomm's own, which torch's analyzer ignores.
        (s("dtcomm_state"), s(e.state.name())),
        (s("dtcomm_rank"), Value::int(i.rank)),
        (
            s("dtcomm_waiting_for"),
            Value::List(e.waiting_for.iter().map(|r| Value::int(*r)).collect()),
        ),
    ])
}

/// Per group: (group, size, last enqueued, last started, last completed collective).
fn pg_status(entries: &[Entry]) -> Vec<(u64, u32, i64, i64, i64)> {
    let mut out: Vec<(u64, u32, i64, i64, i64)> = Vec::new();
    for e in entries {
        let i = &e.info;
        let row = match out.iter_mut().position(|r| r.0 == i.group) {
            Some(p) => &mut out[p],
            None => {
                out.push((i.group, i.group_size, -1, -1, -1));
                out.last_mut().expect("just pushed")
            }
        };
        if i.p2p || e.seq == 0 {
            continue;
        }
        let seq = e.seq as i64;
        row.2 = row.2.max(seq);
        if e.time_started_ns.is_some() {
            row.3 = row.3.max(seq);
        }
        if e.state == CallState::Completed {
            row.4 = row.4.max(seq);
        }
    }
    out
}

/// The trace of `entries` (one rank's, oldest first) as a Flight Recorder dump.
pub(crate) fn trace(entries: &[Entry], dropped: usize) -> Value {
    let groups = pg_status(entries);
    let pg_config = groups
        .iter()
        .map(|&(g, size, ..)| {
            let ranks = super::group_ranks(g, size)
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            (
                Value::str(pg_name(g)),
                Value::Dict(vec![
                    (s("name"), Value::str(pg_name(g))),
                    (s("desc"), s(pg_desc(g))),
                    (s("ranks"), Value::Str(format!("[{ranks}]"))),
                ]),
            )
        })
        .collect();
    let pg_status = groups
        .iter()
        .map(|&(g, _, enq, start, done)| {
            (
                Value::str(pg_name(g)),
                Value::Dict(vec![
                    (s("last_enqueued_collective"), Value::int(enq)),
                    (s("last_started_collective"), Value::int(start)),
                    (s("last_completed_collective"), Value::int(done)),
                ]),
            )
        })
        .collect();
    Value::Dict(vec![
        (s("version"), s(VERSION)),
        (s("comm_lib_version"), Value::str(env!("CARGO_PKG_VERSION"))),
        (s("pg_config"), Value::Dict(pg_config)),
        (s("pg_status"), Value::Dict(pg_status)),
        (
            s("entries"),
            Value::List(entries.iter().map(entry).collect()),
        ),
        (s("dtcomm_entries_dropped"), Value::int(dropped as u64)),
    ])
}

/// The trace of global rank `rank` (every rank of this process when `None`; a process
/// usually has one) as the bytes of a Flight Recorder dump, at most [`MAX_DUMP_ENTRIES`]
/// calls (the newest), and how many calls it holds.
pub fn dump_bytes(rank: Option<u32>) -> (Vec<u8>, usize) {
    let mut entries: Vec<Entry> = super::entries()
        .into_iter()
        .filter(|e| rank.is_none_or(|r| e.info.rank == r))
        .collect();
    let dropped = entries.len().saturating_sub(MAX_DUMP_ENTRIES);
    entries.drain(..dropped);
    (to_bytes(&trace(&entries, dropped)), entries.len())
}

/// Writes [`dump_bytes`] to `path` (through a temporary file renamed into place, so a reader
/// never sees half a dump); returns how many calls it holds.
pub fn dump(path: &Path, rank: Option<u32>) -> std::io::Result<usize> {
    let (bytes, n) = dump_bytes(rank);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    std::fs::write(&tmp, &bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(n)
}
